// Admission through the real gRPC server: at --max_in_flight the next call is refused at once,
// before anything of it is applied, with gRPC's retry pushback; the bound frees as calls are
// answered; a full mailbox's refusal carries the pushback too. Orderings, never wall-clock bounds:
// a shard is held in its handler while the test looks.
#include <charconv>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/error_details.h"
#include "server/ledger_service.h"
#include "tests/server/test_server.h"
#include "tests/shard/shard_test_util.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using testing_util::Balance;
using testing_util::Deposit;
using testing_util::LoopbackOptions;
using testing_util::TestServer;

constexpr int64_t kHolderAmount = 1'000'000;

// The server options of these tests: the shard applies calls on its own thread (not on gRPC's),
// one at a time.
ServerOptions HoldingOptions() {
  ServerOptions options = LoopbackOptions();
  options.router.shard.inline_execution = false;
  options.router.shard.max_batch = 1;
  return options;
}

// Deposits of kHolderAmount block their shard's thread until `release` is notified.
ServerTestHooks HoldingHooks(testing_util::Event& held, testing_util::Event& release) {
  ServerTestHooks hooks;
  hooks.router.shard.before_handle = [&held, &release](const Message& message) {
    if (testing_util::DepositAmount(message) == kHolderAmount) {
      held.Notify();
      release.WaitForNotification();
    }
  };
  return hooks;
}

// One asynchronous Deposit whose state outlives the server (its Shutdown answers it on every
// path).
struct AsyncDeposit {
  v1::DepositRequest request;
  v1::DepositResponse response;
  grpc::ClientContext context;
  grpc::Status status;
  testing_util::Event done;
};

void Send(v1::Ledger::Stub& stub, AsyncDeposit& call, const std::string& account, int64_t amount) {
  call.request.set_account_id(account);
  call.request.set_amount(amount);
  call.context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  stub.async()->Deposit(&call.context, &call.request, &call.response, [&call](grpc::Status status) {
    call.status = std::move(status);
    call.done.Notify();
  });
}

// The pushback a refused call carries, in ms; -1 when absent or not a decimal integer.
int64_t PushbackMs(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  const auto found = trailers.find(kRetryPushbackKey);
  if (found == trailers.end()) return -1;
  int64_t ms = -1;
  const char* end = found->second.data() + found->second.size();
  if (std::from_chars(found->second.data(), end, ms).ptr != end) return -1;
  return ms;
}

TEST(AdmissionTest, AtTheLimitTheNextCallIsRefusedAtOnceWithPushbackAndNothingOfItApplied) {
  constexpr int64_t kLimit = 3;
  testing_util::Event held;
  testing_util::Event release;
  ServerOptions options = HoldingOptions();
  options.max_in_flight = kLimit;
  TestServer server(options, HoldingHooks(held, release));
  absl::Cleanup always_release = [&] { release.Notify(); };
  auto stub = server.NewStub();
  const AdmissionControl& admission = server.server().admission();

  // The holder and two calls queued behind it on the same shard fill the bound.
  std::vector<AsyncDeposit> admitted(kLimit);
  Send(*stub, admitted[0], "held", kHolderAmount);
  ASSERT_TRUE(testing_util::WaitUntil([&] { return held.HasBeenNotified(); }, "the holder runs"));
  Send(*stub, admitted[1], "held", 1);
  Send(*stub, admitted[2], "held", 2);
  ASSERT_TRUE(testing_util::WaitUntil([&] { return admission.in_flight() == kLimit; },
                                      "three calls in flight"));

  // While the shard is still held, a call to any account is refused, and so are a Balance and
  // a History: answered at once, or these synchronous calls would wait for the release.
  grpc::ClientContext refused_context;
  refused_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::DepositRequest refused_request;
  refused_request.set_account_id("elsewhere");
  refused_request.set_amount(7);
  v1::DepositResponse refused_response;
  const grpc::Status refused = stub->Deposit(&refused_context, refused_request, &refused_response);
  EXPECT_FALSE(release.HasBeenNotified());
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), ::testing::HasSubstr("limit of 3 calls in flight"));
  EXPECT_THAT(refused.error_message(), ::testing::HasSubstr("--max_in_flight"));
  const int64_t pushback = PushbackMs(refused_context);
  EXPECT_GE(pushback, kMinPushback.count());
  EXPECT_LE(pushback, kMaxPushback.count());
  // For machines: the reason, the bound, and the same wait as RetryInfo.
  const std::optional<ErrorDetails> details = DecodeErrorDetails(refused.error_details());
  ASSERT_TRUE(details.has_value());
  EXPECT_EQ(details->reason, v1::IN_FLIGHT_LIMIT);
  EXPECT_EQ(MetadataValue(details->metadata, "max_in_flight"), "3");
  ASSERT_TRUE(details->retry_delay.has_value());
  EXPECT_EQ(details->retry_delay->count(), pushback);
  EXPECT_EQ(Balance(*stub, "held").status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(testing_util::History(*stub, "held").status.error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(admission.refused(RefusalReason::kInFlightLimit), 3u);
  EXPECT_EQ(admission.in_flight(), kLimit);

  release.Notify();
  for (AsyncDeposit& call : admitted) {
    call.done.WaitForNotification();
    EXPECT_TRUE(call.status.ok()) << call.status.error_message();
  }
  ASSERT_TRUE(testing_util::WaitUntil([&] { return admission.in_flight() == 0; },
                                      "every admitted call answered"));
  // Nothing of the refused deposit was applied; the admitted ones all were.
  EXPECT_EQ(Balance(*stub, "elsewhere").status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Balance(*stub, "held").balance, kHolderAmount + 1 + 2);
  EXPECT_EQ(server.server().metrics().requests(
                RpcMethod::kDeposit, static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED)),
            1u);
}

TEST(AdmissionTest, TheBoundFreesAsCallsAreAnswered) {
  constexpr int64_t kLimit = 2;
  ServerOptions options = LoopbackOptions();
  options.max_in_flight = kLimit;
  TestServer server(options);
  auto stub = server.NewStub();
  // One after another, many more calls than the bound all pass: each answer frees its place.
  for (int i = 1; i <= 20; ++i) {
    const auto result = Deposit(*stub, "serial", 1);
    ASSERT_TRUE(result.status.ok()) << "call " << i << ": " << result.status.error_message();
    EXPECT_EQ(result.balance, i);
  }
  const AdmissionControl& admission = server.server().admission();
  EXPECT_EQ(admission.refused(RefusalReason::kInFlightLimit), 0u);
  EXPECT_EQ(admission.admitted(), 20u);
  EXPECT_TRUE(testing_util::WaitUntil([&] { return admission.in_flight() == 0; },
                                      "the last call released"));
}

TEST(AdmissionTest, AFullMailboxIsRefusedWithThePushbackOfItsShard) {
  testing_util::Event held;
  testing_util::Event release;
  ServerOptions options = HoldingOptions();
  options.router.shard.mailbox_capacity = 1;
  TestServer server(options, HoldingHooks(held, release));
  absl::Cleanup always_release = [&] { release.Notify(); };
  auto stub = server.NewStub();
  const Shard& shard = server.server().router().shard(server.server().router().ShardFor("hot"));

  AsyncDeposit holder;
  AsyncDeposit queued;
  Send(*stub, holder, "hot", kHolderAmount);
  ASSERT_TRUE(testing_util::WaitUntil([&] { return held.HasBeenNotified(); }, "the holder runs"));
  Send(*stub, queued, "hot", 5);
  ASSERT_TRUE(
      testing_util::WaitUntil([&] { return shard.MailboxDepth() == 1; }, "the mailbox is full"));

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::DepositRequest request;
  request.set_account_id("hot");
  request.set_amount(7);
  v1::DepositResponse response;
  const grpc::Status shed = stub->Deposit(&context, request, &response);
  EXPECT_FALSE(release.HasBeenNotified());
  EXPECT_EQ(shed.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(shed.error_message(), ::testing::HasSubstr("mailbox full"));
  const int64_t pushback = PushbackMs(context);
  EXPECT_GE(pushback, kMinPushback.count());
  EXPECT_LE(pushback, kMaxPushback.count());
  const std::optional<ErrorDetails> details = DecodeErrorDetails(shed.error_details());
  ASSERT_TRUE(details.has_value());
  EXPECT_EQ(details->reason, v1::MAILBOX_FULL);
  EXPECT_EQ(MetadataValue(details->metadata, "mailbox_capacity"), "1");
  EXPECT_EQ(MetadataValue(details->metadata, "shard"), absl::StrCat(shard.index()));
  ASSERT_TRUE(details->retry_delay.has_value());
  EXPECT_EQ(details->retry_delay->count(), pushback);
  const AdmissionControl& admission = server.server().admission();
  EXPECT_EQ(admission.refused(RefusalReason::kMailboxFull), 1u);
  EXPECT_EQ(admission.refused(RefusalReason::kInFlightLimit), 0u);

  release.Notify();
  holder.done.WaitForNotification();
  queued.done.WaitForNotification();
  EXPECT_TRUE(holder.status.ok());
  EXPECT_TRUE(queued.status.ok());
  EXPECT_EQ(Balance(*stub, "hot").balance, kHolderAmount + 5);  // The 7 was not applied.
}

// Every refusal reason and the bound itself are exported, under the names the dashboard and
// the alert rules use.
TEST(AdmissionTest, TheCountsAreExportedUnderTheirMetricNames) {
  ServerOptions options = LoopbackOptions();
  options.max_in_flight = 77;
  TestServer server(options);
  auto stub = server.NewStub();
  ASSERT_TRUE(Deposit(*stub, "a", 1).status.ok());
  std::vector<std::string> names;
  double limit = -1;
  double admitted = -1;
  for (const prometheus::MetricFamily& family : server.server().metrics().Collect()) {
    names.push_back(family.name);
    if (family.name == "ledger_in_flight_limit") limit = family.metric.at(0).gauge.value;
    if (family.name == "ledger_admitted_total") admitted = family.metric.at(0).counter.value;
    if (family.name == "ledger_refused_total") {
      std::vector<std::string> reasons;
      for (const auto& metric : family.metric) reasons.push_back(metric.label.at(0).value);
      EXPECT_THAT(reasons, ::testing::UnorderedElementsAre("in_flight_limit", "fair_share",
                                                           "mailbox_full", "shutting_down"));
    }
  }
  EXPECT_THAT(names, ::testing::IsSupersetOf({"ledger_admitted_total", "ledger_refused_total",
                                              "ledger_in_flight", "ledger_in_flight_limit"}));
  EXPECT_EQ(limit, 77);
  EXPECT_EQ(admitted, 1);
}

// Two clients (each connection its own, --fair_share_by=connection): once both call, each may
// hold half of --max_in_flight. The first, at its half, is refused FAIR_SHARE with its own reason,
// figures and pushback while the bound still has room, and the other client is still admitted.
TEST(AdmissionTest, AClientAtItsShareIsRefusedFairShareWhileAnotherIsStillAdmitted) {
  constexpr int64_t kLimit = 4;
  testing_util::Event held;
  testing_util::Event release;
  ServerOptions options = HoldingOptions();
  options.max_in_flight = kLimit;
  options.fair_share_by = FairShareBy::kConnection;
  TestServer server(options, HoldingHooks(held, release));
  absl::Cleanup always_release = [&] { release.Notify(); };
  // NewStub makes a channel of its own (a connection of its own) each time.
  auto first = server.NewStub();
  auto second = server.NewStub();
  const AdmissionControl& admission = server.server().admission();

  std::vector<AsyncDeposit> admitted(3);
  Send(*first, admitted[0], "held", kHolderAmount);
  ASSERT_TRUE(testing_util::WaitUntil([&] { return held.HasBeenNotified(); }, "the holder runs"));
  Send(*first, admitted[1], "held", 1);
  Send(*second, admitted[2], "held", 2);
  ASSERT_TRUE(
      testing_util::WaitUntil([&] { return admission.in_flight() == 3; }, "three calls in flight"));
  EXPECT_EQ(admission.shares().clients(), 2u);
  EXPECT_EQ(admission.shares().share(), 2);

  grpc::ClientContext refused_context;
  refused_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::DepositRequest request;
  request.set_account_id("elsewhere");
  request.set_amount(7);
  v1::DepositResponse response;
  const grpc::Status refused = first->Deposit(&refused_context, request, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), ::testing::HasSubstr("its fair share of --max_in_flight"));
  const std::optional<ErrorDetails> details = DecodeErrorDetails(refused.error_details());
  ASSERT_TRUE(details.has_value());
  EXPECT_EQ(details->reason, v1::FAIR_SHARE);
  EXPECT_EQ(MetadataValue(details->metadata, "in_flight"), "2");
  EXPECT_EQ(MetadataValue(details->metadata, "share"), "2");
  EXPECT_EQ(MetadataValue(details->metadata, "clients"), "2");
  const int64_t pushback = PushbackMs(refused_context);
  EXPECT_GE(pushback, kMinPushback.count());
  ASSERT_TRUE(details->retry_delay.has_value());
  EXPECT_EQ(details->retry_delay->count(), pushback);
  EXPECT_EQ(admission.refused(RefusalReason::kFairShare), 1u);
  EXPECT_EQ(admission.refused(RefusalReason::kInFlightLimit), 0u);

  // The second client, below its share, is admitted: the bound's last slot is its.
  AsyncDeposit fourth;
  Send(*second, fourth, "held", 3);
  ASSERT_TRUE(testing_util::WaitUntil([&] { return admission.in_flight() == kLimit; },
                                      "the second client's call is admitted"));
  release.Notify();
  for (AsyncDeposit* call : {&admitted[0], &admitted[1], &admitted[2], &fourth}) {
    call->done.WaitForNotification();
    EXPECT_TRUE(call->status.ok()) << call->status.error_message();
  }
  // Nothing of the refused call was applied.
  EXPECT_EQ(Balance(*first, "elsewhere").status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Balance(*first, "held").balance, kHolderAmount + 1 + 2 + 3);
}

TEST(ClientIdentityTest, PeerAddressDropsOnlyThePort) {
  EXPECT_EQ(PeerAddress("ipv4:10.0.0.7:5123"), "ipv4:10.0.0.7");
  EXPECT_EQ(PeerAddress("ipv6:[::1]:5123"), "ipv6:[::1]");
  EXPECT_EQ(PeerAddress("ipv6:[fe80::1%eth0]:80"), "ipv6:[fe80::1%eth0]");
  EXPECT_EQ(PeerAddress("unix:/run/ledgerd.sock"), "unix:/run/ledgerd.sock");
  EXPECT_EQ(PeerAddress("unix:"), "unix:");
  EXPECT_EQ(ParseFairShareBy("address"), FairShareBy::kAddress);
  EXPECT_EQ(ParseFairShareBy("connection"), FairShareBy::kConnection);
  EXPECT_EQ(ParseFairShareBy("Address"), std::nullopt);
}

}  // namespace
}  // namespace ledger
