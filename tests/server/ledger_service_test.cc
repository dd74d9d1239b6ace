// Integration tests: an in-process ledgerd on a loopback port, called through real gRPC clients.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/server/test_server.h"
#include "tests/shard/shard_test_util.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;
using testing_util::Balance;
using testing_util::CallResult;
using testing_util::ContextWithDeadline;
using testing_util::Deposit;
using testing_util::LoopbackOptions;
using testing_util::TestServer;
using testing_util::Withdraw;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

TEST(LedgerServiceTest, DepositWithdrawAndBalanceReturnTheBalanceAfterEachCall) {
  TestServer server;
  auto stub = server.NewStub();
  CallResult deposited = Deposit(*stub, "alice", 1500);
  ASSERT_TRUE(deposited.status.ok()) << deposited.status.error_message();
  EXPECT_EQ(deposited.balance, 1500);
  CallResult withdrawn = Withdraw(*stub, "alice", 400);
  ASSERT_TRUE(withdrawn.status.ok()) << withdrawn.status.error_message();
  EXPECT_EQ(withdrawn.balance, 1100);
  CallResult balance = Balance(*stub, "alice");
  ASSERT_TRUE(balance.status.ok());
  EXPECT_EQ(balance.balance, 1100);
}

TEST(LedgerServiceTest, InsufficientFundsIsFailedPreconditionAndChangesNothing) {
  TestServer server;
  auto stub = server.NewStub();
  ASSERT_TRUE(Deposit(*stub, "alice", 1100).status.ok());
  CallResult refused = Withdraw(*stub, "alice", 5000);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(refused.status.error_message(),
            "insufficient funds: balance 1100, requested 5000, overdraft limit 0");
  EXPECT_EQ(Balance(*stub, "alice").balance, 1100);
}

TEST(LedgerServiceTest, OverdraftLimitAllowsExactlyThatMuchBelowZero) {
  ServerOptions options = LoopbackOptions();
  options.router.shard.policy.overdraft_limit = 500;
  TestServer server(options);
  auto stub = server.NewStub();
  ASSERT_TRUE(Deposit(*stub, "bob", 100).status.ok());
  CallResult one_too_far = Withdraw(*stub, "bob", 601);
  EXPECT_EQ(one_too_far.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(one_too_far.status.error_message(),
            "insufficient funds: balance 100, requested 601, overdraft limit 500");
  CallResult to_the_limit = Withdraw(*stub, "bob", 600);
  ASSERT_TRUE(to_the_limit.status.ok());
  EXPECT_EQ(to_the_limit.balance, -500);
  EXPECT_EQ(Balance(*stub, "bob").balance, -500);
}

TEST(LedgerServiceTest, UnknownAccountIsNotFoundForBalanceAndWithdraw) {
  TestServer server;
  auto stub = server.NewStub();
  CallResult balance = Balance(*stub, "nobody");
  EXPECT_EQ(balance.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(balance.status.error_message(),
            "account nobody not found: it has never received a deposit");
  EXPECT_EQ(Withdraw(*stub, "nobody", 1).status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Balance(*stub, "nobody").status.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST(LedgerServiceTest, DepositThatWouldOverflowIsOutOfRangeAndChangesNothing) {
  TestServer server;
  auto stub = server.NewStub();
  ASSERT_TRUE(Deposit(*stub, "rich", kInt64Max).status.ok());
  CallResult overflow = Deposit(*stub, "rich", kInt64Max);
  EXPECT_EQ(overflow.status.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(overflow.status.error_message(),
              HasSubstr("deposit would overflow the balance: balance 9223372036854775807"));
  EXPECT_EQ(Balance(*stub, "rich").balance, kInt64Max);
}

TEST(LedgerServiceTest, HandlerFaultIsInternalForThatCallAndTheServerKeepsServing) {
  ServerOptions options = LoopbackOptions();
  ServerTestHooks hooks;
  hooks.router.shard.before_handle = [](const Message& message) {
    if (message.op() == Op::kDeposit && message.account_id == "boom") {
      throw std::runtime_error("injected fault");
    }
  };
  TestServer server(options, hooks);
  auto stub = server.NewStub();
  CallResult fault = Deposit(*stub, "boom", 10);
  EXPECT_EQ(fault.status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_THAT(fault.status.error_message(), HasSubstr("nothing was applied"));
  EXPECT_EQ(Balance(*stub, "boom").status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Deposit(*stub, "fine", 10).balance, 10);
}

TEST(LedgerServiceTest, CallWhoseDeadlinePassesInTheMailboxIsNotApplied) {
  testing_util::Event first_call_held;
  testing_util::Event release;
  ServerOptions options = LoopbackOptions();
  options.router.shard.inline_execution = false;  // The hold must block a shard, not gRPC.
  options.router.shard.max_batch = 1;             // So that the second call stays in the mailbox.
  ServerTestHooks hooks;
  hooks.router.shard.before_handle = [&](const Message&) {
    if (!first_call_held.HasBeenNotified()) {
      first_call_held.Notify();
      release.WaitForNotification();
    }
  };
  // The calls' state is declared before the server, so that it outlives the Shutdown that
  // answers them even when an assertion ends the test early.
  v1::DepositRequest first;
  first.set_account_id("slow");
  first.set_amount(1);
  v1::DepositResponse first_response;
  auto first_context = ContextWithDeadline();
  std::atomic<bool> first_done{false};
  grpc::Status first_status;
  v1::DepositRequest second = first;
  second.set_amount(1000);
  v1::DepositResponse second_response;
  // Long enough to reach the mailbox on a loaded machine under ASan (checked below).
  constexpr std::chrono::seconds kSecondTimeout{1};
  auto second_context = ContextWithDeadline(kSecondTimeout);
  std::atomic<bool> second_done{false};
  grpc::Status second_status;
  TestServer server(options, hooks);
  // Released on every path, so that a failed assertion cannot leave Shutdown waiting forever.
  absl::Cleanup always_release = [&] { release.Notify(); };
  auto stub = server.NewStub();
  const Shard& shard = server.server().router().shard(server.server().router().ShardFor("slow"));
  // The first call holds the shard; the second waits behind it in the mailbox until its caller
  // gives up; only then is the shard let go, and it must skip the second.
  stub->async()->Deposit(first_context.get(), &first, &first_response, [&](grpc::Status status) {
    first_status = std::move(status);
    first_done.store(true);
  });
  ASSERT_TRUE(testing_util::WaitUntil([&] { return first_call_held.HasBeenNotified(); },
                                      "the first deposit is held in its handler"));
  stub->async()->Deposit(second_context.get(), &second, &second_response, [&](grpc::Status status) {
    second_status = std::move(status);
    second_done.store(true);
  });
  ASSERT_TRUE(testing_util::WaitUntil([&] { return shard.MailboxDepth() == 1; },
                                      "the second deposit is queued behind the held one"));
  const auto queued_by = std::chrono::steady_clock::now();
  ASSERT_TRUE(testing_util::WaitUntil([&] { return second_done.load(); },
                                      "the second deposit's caller gives up"));
  EXPECT_EQ(second_status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // NOTE: the one wait on time, and a lower bound only (waiting longer can only make the test
  // surer). The shard skips a call when gRPC says the server context is cancelled, and nothing
  // outside gRPC can observe that moment: the caller's DEADLINE_EXCEEDED above comes first, the
  // server's own deadline timer (at most kSecondTimeout after the call reached the server,
  // which was before `queued_by`) or the caller's RST_STREAM a little later. A second of margin
  // lets that notice land even on a loaded ASan run; releasing the shard at once made the test
  // apply the deposit about once in 50 runs (a legal outcome: its caller never learned it).
  std::this_thread::sleep_until(queued_by + kSecondTimeout + std::chrono::seconds(1));
  release.Notify();
  ASSERT_TRUE(
      testing_util::WaitUntil([&] { return first_done.load(); }, "the first deposit is answered"));
  EXPECT_TRUE(first_status.ok()) << first_status.error_message();
  EXPECT_EQ(first_response.balance(), 1);
  // Balance queues behind the second deposit, so it sees whatever the shard did with it.
  EXPECT_EQ(Balance(*stub, "slow").balance, 1);
  EXPECT_EQ(server.server().metrics().shard(shard.index()).expired(), 1u);
}

// What `grpcurl list` and `grpcurl describe ledger.v1.Ledger` (docs/api.md) are built from.
TEST(LedgerServiceTest, ReflectionListsAndDescribesTheLedgerService) {
  TestServer server;
  auto stub = grpc::reflection::v1alpha::ServerReflection::NewStub(server.NewChannel());
  auto context = ContextWithDeadline();
  auto stream = stub->ServerReflectionInfo(context.get());
  grpc::reflection::v1alpha::ServerReflectionRequest request;
  request.set_list_services("");
  ASSERT_TRUE(stream->Write(request));
  grpc::reflection::v1alpha::ServerReflectionResponse listed;
  ASSERT_TRUE(stream->Read(&listed));
  std::vector<std::string> services;
  for (const auto& service : listed.list_services_response().service()) {
    services.push_back(service.name());
  }
  std::sort(services.begin(), services.end());
  EXPECT_THAT(services,
              ::testing::ElementsAre("grpc.health.v1.Health",
                                     "grpc.reflection.v1alpha.ServerReflection", "ledger.v1.Ledger",
                                     "ledger.v1.LedgerAdmin", "ledger.v1.LedgerCluster"));

  request.set_file_containing_symbol("ledger.v1.Ledger");
  ASSERT_TRUE(stream->Write(request));
  grpc::reflection::v1alpha::ServerReflectionResponse described;
  ASSERT_TRUE(stream->Read(&described));
  // ledger.proto and what it imports (google/protobuf/timestamp.proto, for History).
  ASSERT_EQ(described.file_descriptor_response().file_descriptor_proto_size(), 2);
  google::protobuf::FileDescriptorProto file;
  ASSERT_TRUE(file.ParseFromString(described.file_descriptor_response().file_descriptor_proto(0)));
  EXPECT_EQ(file.name(), "ledger/v1/ledger.proto");
  ASSERT_EQ(file.service_size(), 1);
  std::vector<std::string> methods;
  for (const auto& method : file.service(0).method()) {
    methods.push_back(method.name() + "(" + method.input_type() + ") " + method.output_type());
  }
  EXPECT_THAT(methods, ::testing::ElementsAre(
                           "Deposit(.ledger.v1.DepositRequest) .ledger.v1.DepositResponse",
                           "Withdraw(.ledger.v1.WithdrawRequest) .ledger.v1.WithdrawResponse",
                           "Balance(.ledger.v1.BalanceRequest) .ledger.v1.BalanceResponse",
                           "History(.ledger.v1.HistoryRequest) .ledger.v1.HistoryResponse",
                           "Transfer(.ledger.v1.TransferRequest) .ledger.v1.TransferResponse",
                           "GetTransfer(.ledger.v1.GetTransferRequest) "
                           ".ledger.v1.GetTransferResponse",
                           "Apply(.ledger.v1.ApplyRequest) .ledger.v1.ApplyResponse",
                           "Watch(.ledger.v1.WatchRequest) .ledger.v1.WatchResponse"));
  EXPECT_TRUE(file.service(0).method(7).server_streaming());
  // ledgerd serves the descriptor set built with source info, so reflection clients see the
  // .proto's documentation (tests/server/reflection_service_test.cc checks the comments).
  EXPECT_TRUE(file.has_source_code_info());
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST(LedgerServiceTest, HealthIsServingAndTurnsNotServingWhenShutdownBegins) {
  TestServer server;
  auto health = grpc::health::v1::Health::NewStub(server.NewChannel());
  for (const char* service : {"", "ledger.v1.Ledger"}) {
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    ASSERT_TRUE(health->Check(ContextWithDeadline().get(), request, &response).ok()) << service;
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }
  // A Watch stream opened before the shutdown sees the change.
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("ledger.v1.Ledger");
  auto context = ContextWithDeadline();
  auto watch = health->Watch(context.get(), request);
  grpc::health::v1::HealthCheckResponse update;
  ASSERT_TRUE(watch->Read(&update));
  EXPECT_EQ(update.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  std::thread stopper([&] { server.server().Shutdown(); });
  ASSERT_TRUE(watch->Read(&update));
  EXPECT_EQ(update.status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  context->TryCancel();
  stopper.join();
}

TEST(LedgerServiceTest, GracefulStopAnswersCallsInFlightThenRefusesNewCalls) {
  constexpr int kInFlight = 8;
  testing_util::Event first_call_held;
  testing_util::Event release;
  ServerOptions options = LoopbackOptions();
  options.router.shard.max_batch = 1;  // So that the calls behind the first stay in the mailbox.
  options.router.shard.inline_execution = false;  // The hold must block a shard, not gRPC.
  ServerTestHooks hooks;
  hooks.router.shard.before_handle = [&](const Message&) {
    if (!first_call_held.HasBeenNotified()) {
      first_call_held.Notify();
      release.WaitForNotification();
    }
  };
  // The calls' state outlives the server (see CallWhoseDeadlinePassesInTheMailboxIsNotApplied).
  std::vector<grpc::ClientContext> contexts(kInFlight);
  std::vector<v1::DepositResponse> responses(kInFlight);
  std::vector<grpc::Status> statuses(kInFlight);
  std::atomic<int> done{0};
  v1::DepositRequest request;
  request.set_account_id("inflight");
  request.set_amount(5);
  TestServer server(options, hooks);
  std::thread stopper;
  // Runs before the server is destroyed, on every path: a failed assertion must neither leave
  // Shutdown waiting for the held call forever nor destroy a joinable thread.
  absl::Cleanup always_release = [&] {
    release.Notify();
    if (stopper.joinable()) stopper.join();
  };
  auto stub = server.NewStub();
  for (int i = 0; i < kInFlight; ++i) {
    stub->async()->Deposit(&contexts[i], &request, &responses[i], [&, i](grpc::Status status) {
      statuses[i] = std::move(status);
      done.fetch_add(1);
    });
  }
  // Every call is at the shard: one held in its handler, the rest queued behind it.
  ASSERT_TRUE(testing_util::WaitUntil([&] { return first_call_held.HasBeenNotified(); },
                                      "the first call is held in its handler"));
  const Shard& shard =
      server.server().router().shard(server.server().router().ShardFor("inflight"));
  ASSERT_TRUE(testing_util::WaitUntil([&] { return shard.MailboxDepth() == kInFlight - 1; },
                                      "the other calls are queued behind the held one"));
  std::atomic<bool> shutdown_returned{false};
  stopper = std::thread([&] {
    server.server().Shutdown();
    shutdown_returned.store(true);
  });
  // Shutdown has begun once a new call to that shard is refused at once: by the closed mailbox
  // (SHUTTING_DOWN), or by the channel, which the GOAWAY sent first left with no connection to
  // send it on (never sent). A Balance probe, so that a probe queued before the mailbox closed
  // changes nothing (its deadline then passes and the shard skips it).
  grpc::Status refused;
  ASSERT_TRUE(testing_util::WaitUntil(
      [&] {
        v1::BalanceRequest probe;
        probe.set_account_id("inflight");
        v1::BalanceResponse ignored;
        refused = stub->Balance(ContextWithDeadline(std::chrono::milliseconds(200)).get(), probe,
                                &ignored);
        return refused.error_code() == grpc::StatusCode::UNAVAILABLE;
      },
      "a new call is refused UNAVAILABLE (the shutdown began)", testing_util::kEventTimeout,
      std::chrono::milliseconds(10)))
      << "last probe: " << refused.error_code() << " " << refused.error_message();
  EXPECT_THAT(refused.error_message(),
              testing::AnyOf(HasSubstr("nothing was applied"),
                             testing::StartsWith("failed to connect to all addresses")));
  // The shutdown is under way, yet the calls it found are neither answered nor cut short:
  // Shutdown is waiting for them.
  EXPECT_EQ(done.load(), 0);
  EXPECT_FALSE(shutdown_returned.load());
  release.Notify();
  stopper.join();
  // Every call accepted before the shutdown is answered with its real outcome, none cancelled.
  ASSERT_TRUE(testing_util::WaitUntil([&] { return done.load() == kInFlight; },
                                      "every call in flight is answered"));
  std::vector<int64_t> balances;
  for (int i = 0; i < kInFlight; ++i) {
    EXPECT_TRUE(statuses[i].ok()) << statuses[i].error_message();
    balances.push_back(responses[i].balance());
  }
  std::sort(balances.begin(), balances.end());
  for (int i = 0; i < kInFlight; ++i) EXPECT_EQ(balances[i], 5 * (i + 1));
  EXPECT_EQ(Deposit(*stub, "inflight", 5).status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(LedgerServiceTest, StartRefusesAPortInUse) {
  TestServer first;
  ServerOptions options = LoopbackOptions();
  options.listen_address = first.target();
  absl::StatusOr<std::unique_ptr<LedgerServer>> second = LedgerServer::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("cannot listen on"));
}

}  // namespace
}  // namespace ledger
