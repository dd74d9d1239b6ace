// TransportLimits: the bounds are checked (limit and limit + 1), and a server started with them
// enforces them on real connections.
#include "server/transport_limits.h"

#include <sys/resource.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/test_server.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;

struct LimitCase {
  const char* name;
  void (*set)(TransportLimits&);
  bool valid;
};

class TransportLimitsValidationTest : public testing::TestWithParam<LimitCase> {};

TEST_P(TransportLimitsValidationTest, AcceptsTheBoundsAndRefusesOneBeyond) {
  TransportLimits limits;
  GetParam().set(limits);
  EXPECT_EQ(ValidateTransportLimits(limits).ok(), GetParam().valid)
      << ValidateTransportLimits(limits);
}

INSTANTIATE_TEST_SUITE_P(
    Bounds, TransportLimitsValidationTest,
    testing::Values(
        LimitCase{"Defaults", [](TransportLimits&) {}, true},
        LimitCase{"StreamsMin", [](TransportLimits& l) { l.max_concurrent_streams = 1; }, true},
        LimitCase{"StreamsBelowMin", [](TransportLimits& l) { l.max_concurrent_streams = 0; },
                  false},
        LimitCase{
            "StreamsMax",
            [](TransportLimits& l) { l.max_concurrent_streams = kMaxConcurrentStreamsBound.max; },
            true},
        LimitCase{"StreamsAboveMax",
                  [](TransportLimits& l) {
                    l.max_concurrent_streams = kMaxConcurrentStreamsBound.max + 1;
                  },
                  false},
        LimitCase{"MemoryMin",
                  [](TransportLimits& l) { l.memory_mb = kTransportMemoryMbBound.min; }, true},
        LimitCase{"MemoryBelowMin",
                  [](TransportLimits& l) { l.memory_mb = kTransportMemoryMbBound.min - 1; }, false},
        LimitCase{"ThreadsBelowMin",
                  [](TransportLimits& l) { l.max_threads = kGrpcMaxThreadsBound.min - 1; }, false},
        LimitCase{"MessageMax",
                  [](TransportLimits& l) {
                    l.max_receive_message_bytes = kMaxReceiveMessageBytesBound.max;
                  },
                  true},
        LimitCase{"MessageAboveMax",
                  [](TransportLimits& l) {
                    l.max_receive_message_bytes = kMaxReceiveMessageBytesBound.max + 1;
                  },
                  false},
        LimitCase{"IdleOneMillisecond",
                  [](TransportLimits& l) { l.max_connection_idle = absl::Milliseconds(1); }, true},
        LimitCase{"IdleZero",
                  [](TransportLimits& l) { l.max_connection_idle = absl::ZeroDuration(); }, false},
        LimitCase{"HandshakeNegative",
                  [](TransportLimits& l) { l.handshake_timeout = -absl::Seconds(1); }, false}),
    [](const testing::TestParamInfo<LimitCase>& info) { return std::string(info.param.name); });

TEST(TransportLimitsTest, StartRefusesInvalidLimitsNamingTheField) {
  ServerOptions options = testing_util::LoopbackOptions();
  options.transport.max_concurrent_streams = 0;
  absl::StatusOr<std::unique_ptr<LedgerServer>> server = LedgerServer::Start(options);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(),
              HasSubstr("--max_concurrent_streams must be 1 to 100000; got 0"));
}

TEST(TransportLimitsTest, AMessageOverTheReceiveLimitIsRefusedBeforeTheService) {
  ServerOptions options = testing_util::LoopbackOptions();
  options.transport.max_receive_message_bytes = 2048;
  testing_util::TestServer server(options);
  auto stub = server.NewStub();

  v1::DepositRequest request;
  request.set_amount(1);
  request.set_account_id(std::string(1900, 'a'));  // Under the limit: the service answers.
  v1::DepositResponse response;
  grpc::Status under = stub->Deposit(testing_util::ContextWithDeadline().get(), request, &response);
  EXPECT_EQ(under.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << under.error_message();

  request.set_account_id(std::string(2100, 'a'));  // Over it: gRPC refuses the message.
  grpc::Status over = stub->Deposit(testing_util::ContextWithDeadline().get(), request, &response);
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << over.error_message();
}

TEST(RaiseOpenFileLimitTest, RaisesTheSoftLimitToTheHardLimitAndReportsBoth) {
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_max == RLIM_INFINITY || limit.rlim_max <= 256) {
    GTEST_SKIP() << "needs a finite hard limit above 256; it is " << limit.rlim_max;
  }
  const rlimit original = limit;
  limit.rlim_cur = 256;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);

  absl::StatusOr<OpenFileLimit> raised = RaiseOpenFileLimit();
  ASSERT_TRUE(raised.ok()) << raised.status();
  EXPECT_EQ(raised->before, 256u);
  EXPECT_EQ(raised->after, original.rlim_max);
  EXPECT_EQ(raised->hard, original.rlim_max);
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  EXPECT_EQ(limit.rlim_cur, original.rlim_max);
  setrlimit(RLIMIT_NOFILE, &original);
}

}  // namespace
}  // namespace ledger
