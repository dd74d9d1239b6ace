// ledger-loadtest end to end against a ledgerd it starts, bounded to a few seconds each.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "client/loadtest_report.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/e2e/fake_ledger.h"
#include "tests/e2e/ledgerd_process.h"
#include "tests/e2e/loadtest_report.h"
#include "tests/e2e/subprocess.h"
#include "tests/scratch_dir.h"
#include "tests/test_paths.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing_util::JsonNumber;
using testing_util::Subprocess;

// The number after `"key":` in a flat JSON text, as a double, or -1.
double JsonDouble(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\":");
  return at == std::string::npos ? -1 : std::strtod(json.c_str() + at + key.size() + 3, nullptr);
}

// The report as its message, read strictly: a key the message does not have fails the test.
loadtest::Report ParseReport(const std::string& json) {
  loadtest::Report report;
  const auto parsed = google::protobuf::util::JsonStringToMessage(json, &report);
  EXPECT_TRUE(parsed.ok()) << parsed.ToString() << ": " << json;
  return report;
}

// The sum of a map of counts by code.
long long Total(const google::protobuf::Map<std::string, int64_t>& counts) {
  long long total = 0;
  for (const auto& [code, count] : counts) total += count;
  return total;
}

class LoadtestTest : public testing::Test {
 protected:
  // A ledgerd with `flags`, no metrics and a new ledger.
  void StartLedgerd(std::vector<std::string> flags) {
    flags.insert(flags.begin(), "--metrics_listen=");
    ledgerd_ = std::make_unique<testing_util::LedgerdProcess>(flags);
    ASSERT_TRUE(ledgerd_->Start());
    target_ = ledgerd_->target();
  }
  void TearDown() override {
    if (ledgerd_ != nullptr) ledgerd_->Stop();
    std::filesystem::remove(json_path_);
  }

  // Starts the load test against target_ with a JSON report (see ReadJson).
  std::unique_ptr<Subprocess> StartLoadtest(std::vector<std::string> flags) {
    flags.insert(flags.begin(), {testing_util::LoadtestPath(), "--target=" + target_,
                                 "--json_file=" + json_path_, "--server_shards=2", "--warmup=0s"});
    return std::make_unique<Subprocess>(flags);
  }
  // Waits up to `timeout` for the load test to exit; returns its exit code (-1: still running or
  // killed) and leaves its output in output_ and its JSON report in json_.
  int Finish(Subprocess& loadtest, std::chrono::seconds timeout = std::chrono::seconds(60)) {
    const int exit_code = loadtest.WaitForExit(timeout).value_or(-1);
    output_ = loadtest.output();
    std::ifstream file(json_path_);
    json_.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
    return exit_code;
  }
  // Runs the load test; returns its exit code and leaves its JSON report in json_.
  int RunLoadtest(std::vector<std::string> flags) { return Finish(*StartLoadtest(flags)); }

  std::unique_ptr<testing_util::LedgerdProcess> ledgerd_;
  std::string target_;
  const std::string json_path_ =
      (std::filesystem::temp_directory_path() / ("loadtest-" + std::to_string(getpid()) + ".json"))
          .string();
  std::string json_;
  std::string output_;
};

TEST_F(LoadtestTest, HealthyServerClosedLoopHasNoErrorsAndPasses) {
  StartLedgerd({"--shards=2"});
  ASSERT_EQ(RunLoadtest({"--duration=2s", "--concurrency=32", "--accounts=200"}), 0) << output_;
  EXPECT_THAT(json_, HasSubstr("\"verification\":\"PASS\""));
  EXPECT_GT(JsonNumber(json_, "OK"), 1000);
  EXPECT_GT(JsonNumber(json_, "ok_per_second"), 500);
  // Only the ledger's own answers: refused withdrawals and reads of unopened accounts.
  for (const char* error :
       {"RESOURCE_EXHAUSTED", "UNAVAILABLE", "DEADLINE_EXCEEDED", "INTERNAL", "CANCELLED"}) {
    EXPECT_THAT(json_, Not(HasSubstr(std::string("\"") + error + "\""))) << error;
  }
  for (const char* key : {"p50", "p90", "p99", "p999", "max", "attempted_per_second"}) {
    EXPECT_THAT(json_, HasSubstr(std::string("\"") + key + "\":")) << key;
  }
  EXPECT_THAT(output_, HasSubstr("verification: PASS"));
}

TEST_F(LoadtestTest, OverloadedServerShedsAndStillLosesNoMoney) {
  StartLedgerd({"--shards=2", "--mailbox_capacity=4", "--debug_handler_delay=2ms"});
  ASSERT_EQ(RunLoadtest({"--duration=2s", "--concurrency=64", "--distribution=zipf:1.1"}), 0)
      << output_;
  EXPECT_THAT(json_, HasSubstr("\"verification\":\"PASS\""));
  EXPECT_GT(JsonNumber(json_, "RESOURCE_EXHAUSTED"), 0) << json_;
  EXPECT_GT(JsonNumber(json_, "OK"), 0) << json_;
}

// --batch: every call is one Apply of 500 operations; every account is funded first, so that no
// withdrawal or transfer can be refused and every operation ends OK, against a durable ledgerd.
TEST_F(LoadtestTest, BatchedRunCountsEveryOperationAndPasses) {
  StartLedgerd({"--shards=2"});
  ASSERT_EQ(RunLoadtest({"--batch=500", "--mix=deposit=5,withdraw=3,transfer=2", "--requests=40",
                         "--duration=0s", "--concurrency=8", "--accounts=1000", "--fund=1000000"}),
            0)
      << output_;
  const loadtest::Report report = ParseReport(json_);
  EXPECT_EQ(report.verification(), "PASS") << json_;
  EXPECT_EQ(report.batch(), 500);
  EXPECT_EQ(report.measured_calls(), 40) << json_;
  EXPECT_EQ(report.codes().at("OK"), 40) << json_;
  // Each OK call answered one result per operation, and each of those was counted once: by code,
  // by kind, by shard.
  EXPECT_EQ(report.operations().measured(), 40 * 500) << json_;
  EXPECT_EQ(Total(report.operations().codes()), report.operations().measured()) << json_;
  EXPECT_EQ(report.operations().codes().at("OK"), 40 * 500) << json_;
  long long by_kind = 0;
  for (const auto& [kind, counts] : report.ops()) by_kind += counts.calls();
  EXPECT_EQ(by_kind, 40 * 500) << json_;
  ASSERT_EQ(report.shards_size(), 2) << json_;
  EXPECT_EQ(report.shards(0).calls() + report.shards(1).calls(), 40 * 500) << json_;
  EXPECT_EQ(report.transfers().ok(), report.ops().at("transfer").calls()) << json_;
  // Every operation OK: operations per second are the calls per second times the batch.
  EXPECT_GT(report.calls_per_second(), 0) << json_;
  EXPECT_GT(report.ops_per_second(), report.calls_per_second()) << json_;
  EXPECT_NEAR(report.ops_per_second() / report.calls_per_second(), 500, 2) << json_;
  EXPECT_EQ(report.ok_per_second(), report.calls_per_second()) << json_;
  // The report is the message: printed again and read again, nothing changes.
  std::string again;
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  print.always_print_primitive_fields = true;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(report, &again, print).ok());
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(ParseReport(again), report));
  EXPECT_THAT(output_, HasSubstr("funded 1000 accounts with 1000000 each in "));
  EXPECT_THAT(output_, HasSubstr("batches of 500: 20000 operations, "));
  EXPECT_THAT(output_, HasSubstr("; by result: OK=20000\n"));
  EXPECT_THAT(output_, HasSubstr("verification: PASS (1000 accounts; "));
}

// A mailbox bound of 64 operations against batches of 100 over 2 shards: a shard's part (about
// 50 operations) fits only while the shard holds little else, so many parts are refused whole.
// Their operations are counted RESOURCE_EXHAUSTED, applied nothing, and the book stays exact.
TEST_F(LoadtestTest, BatchedRunAgainstATinyMailboxShedsPartsAndStillPasses) {
  StartLedgerd({"--shards=2", "--mailbox_capacity=64"});
  ASSERT_EQ(RunLoadtest({"--batch=100", "--mix=deposit=5,withdraw=3,transfer=2", "--duration=2s",
                         "--concurrency=16", "--accounts=1000"}),
            0)
      << output_;
  const loadtest::Report report = ParseReport(json_);
  EXPECT_EQ(report.verification(), "PASS") << json_;
  const long long shed = report.operations().codes().at("RESOURCE_EXHAUSTED");
  EXPECT_GT(shed, 0) << json_;
  EXPECT_GT(report.operations().codes().at("OK"), 0) << json_;
  EXPECT_EQ(report.operations().measured(), report.measured_calls() * 100) << json_;
  EXPECT_EQ(Total(report.operations().codes()), report.operations().measured()) << json_;
  ASSERT_EQ(report.shards_size(), 2) << json_;
  EXPECT_EQ(report.shards(0).shed() + report.shards(1).shed(), shed) << json_;
  // The calls themselves were answered OK, their refused parts carrying the pushback, which the
  // client read for each call with shed operations: it retried, or counted why not.
  EXPECT_EQ(report.codes().at("OK"), report.measured_calls()) << json_;
  const loadtest::Retries& retries = report.retries();
  EXPECT_GT(retries.sent() + retries.denied_by_budget() + retries.denied_by_deadline() +
                retries.denied_by_max_retries(),
            0)
      << json_;
  EXPECT_THAT(output_, HasSubstr("RESOURCE_EXHAUSTED="));
  EXPECT_THAT(output_, HasSubstr("verification: PASS"));
}

// The benchmark uses 100,000 accounts: setup, load and verification each take batches.
TEST_F(LoadtestTest, BatchedRunOverAHundredThousandAccountsFundsAndVerifiesThemAll) {
  StartLedgerd({"--shards=2"});
  ASSERT_EQ(RunLoadtest({"--batch=2000", "--mix=deposit=1,withdraw=1", "--requests=10",
                         "--duration=0s", "--concurrency=4", "--accounts=100000", "--fund=100"}),
            0)
      << output_;
  EXPECT_EQ(ParseReport(json_).operations().measured(), 10 * 2000) << json_;
  EXPECT_THAT(output_, HasSubstr("funded 100000 accounts with 100 each in "));
  EXPECT_THAT(output_, HasSubstr("verification: PASS (100000 accounts; "));
}

TEST_F(LoadtestTest, OpenLoopAtAFixedRateSendsAboutThatMany) {
  StartLedgerd({"--shards=2"});
  ASSERT_EQ(RunLoadtest({"--duration=2s", "--rate=500"}), 0) << output_;
  EXPECT_THAT(json_, HasSubstr("\"verification\":\"PASS\""));
  EXPECT_NEAR(JsonNumber(json_, "attempted_per_second"), 500, 100) << json_;
  EXPECT_EQ(JsonDouble(json_, "offered_per_second"), 500) << json_;
  // Sent, or not sent because the client was late: every measured call is one or the other.
  EXPECT_GE(JsonNumber(json_, "not_sent_late"), 0) << json_;
  EXPECT_GT(JsonDouble(json_, "sent_per_second"), 0) << json_;
  EXPECT_GT(JsonDouble(json_, "client_cpu_seconds"), 0) << json_;
  EXPECT_THAT(json_, HasSubstr("\"retries\":{\"sent\":\"0\",\"denied_by_budget\":\"0\","));
  EXPECT_THAT(output_, HasSubstr("client CPU: "));
}

TEST_F(LoadtestTest, OpenLoopCallsTheSenderReachesLateAreNotSentAndCounted) {
  StartLedgerd({"--shards=2"});
  // No call is reached within 1 ns of its intended time (reading the clock takes longer), so
  // every one is late: none is sent, and each counts as NOT_SENT(late).
  ASSERT_EQ(RunLoadtest({"--duration=1s", "--rate=200", "--max_send_delay=1ns"}), 0) << output_;
  EXPECT_GT(JsonNumber(json_, "not_sent_late"), 0) << json_;
  EXPECT_EQ(JsonNumber(json_, "not_sent_late"), JsonNumber(json_, "measured_calls")) << json_;
  EXPECT_EQ(JsonDouble(json_, "sent_per_second"), 0) << json_;
  EXPECT_THAT(output_, HasSubstr("NOT_SENT(late)="));
}

TEST_F(LoadtestTest, ClosedLoopOffersNothingAndReportsItsCpu) {
  StartLedgerd({"--shards=2"});
  ASSERT_EQ(RunLoadtest({"--requests=300", "--duration=0s", "--accounts=20"}), 0) << output_;
  EXPECT_EQ(JsonDouble(json_, "offered_per_second"), 0) << json_;
  EXPECT_EQ(JsonNumber(json_, "not_sent_late"), 0) << json_;
  EXPECT_GT(JsonDouble(json_, "client_cpu_seconds"), 0) << json_;
  EXPECT_THAT(output_, HasSubstr("client CPU: "));
}

// Pushback (issue 14), against a fake ledger that sheds, with grpc-retry-pushback-ms: 1, the first
// attempt of every deposit and withdraw (by request_id) and the first read of each account.
class LoadtestPushbackTest : public LoadtestTest {
 protected:
  void SetUp() override {
    fake_ = std::make_unique<testing_util::FakeLedger>(
        testing_util::FakeLedger::Shedding{.attempts_shed = 1, .pushback_ms = "1"});
    target_ = fake_->Start();
  }
  // A closed-loop run of exactly 400 measured calls, all measured (no warm-up).
  int Run(std::vector<std::string> flags) {
    flags.insert(flags.end(), {"--requests=400", "--duration=0s", "--concurrency=8",
                               "--accounts=20", "--resolve_for=0"});
    return RunLoadtest(flags);
  }
  std::unique_ptr<testing_util::FakeLedger> fake_;
};

TEST_F(LoadtestPushbackTest, RetriesStayWithinTheBudgetAndTheBookStaysExact) {
  ASSERT_EQ(Run({}), 0) << output_;
  EXPECT_THAT(json_, HasSubstr("\"verification\":\"PASS\""));
  const long long sent = JsonNumber(json_, "sent");
  EXPECT_GT(sent, 0) << json_;
  // The default --retry_budget=0.1: at most one retry per ten first attempts, at any moment.
  EXPECT_LE(sent * 10, JsonNumber(json_, "measured_calls")) << json_;
  EXPECT_GT(JsonNumber(json_, "denied_by_budget"), 0) << json_;
  // A call the budget refused ends shed; a retried one is never shed again by this fake.
  EXPECT_EQ(JsonNumber(json_, "RESOURCE_EXHAUSTED"), JsonNumber(json_, "denied_by_budget"))
      << json_;
  EXPECT_GT(JsonNumber(json_, "ok_after_retry"), 0) << json_;
  EXPECT_LE(JsonNumber(json_, "ok_after_retry"), sent) << json_;
  EXPECT_EQ(JsonNumber(json_, "denied_by_deadline"), 0) << json_;
  EXPECT_THAT(output_, HasSubstr("retries after pushback: "));
  // Every shed attempt is timed on its own: the retried ones and the calls that ended shed.
  const std::string attempts = "\"resource_exhausted_attempt\":";
  ASSERT_THAT(json_, HasSubstr(attempts));
  EXPECT_EQ(JsonNumber(json_.substr(json_.find(attempts)), "count"),
            sent + JsonNumber(json_, "RESOURCE_EXHAUSTED"))
      << json_;
  EXPECT_THAT(output_, HasSubstr("latency SHED attempt "));
}

// The load test decides by the reason (ErrorInfo), never by the words: this fake applies the
// first attempt of every deposit and withdraw and answers it OUTCOME_UNKNOWN in words that say
// "nothing was applied". A client that believed the words would book none of them, and the
// verification would find the money it left out.
class LoadtestReasonTest : public LoadtestTest {
 protected:
  void SetUp() override {
    fake_ = std::make_unique<testing_util::FakeLedger>(
        testing_util::FakeLedger::Shedding{.attempts_shed = 0, .pushback_ms = std::nullopt},
        testing_util::FakeLedger::WriteFault{.code = grpc::StatusCode::UNAVAILABLE,
                                             .reason = v1::OUTCOME_UNKNOWN,
                                             .words = "nothing was applied",
                                             .applied = true});
    target_ = fake_->Start();
  }
  std::unique_ptr<testing_util::FakeLedger> fake_;
};

TEST_F(LoadtestReasonTest, AnUnknownOutcomeIsSettledWhateverItsWordsSay) {
  ASSERT_EQ(RunLoadtest({"--requests=200", "--duration=0s", "--concurrency=4", "--accounts=10",
                         "--mix=deposit=1", "--resolve_for=30s"}),
            0)
      << output_;
  EXPECT_THAT(json_, HasSubstr("\"verification\":\"PASS\""));
  // Every measured deposit was answered OUTCOME_UNKNOWN, then settled as applied by its retry.
  const std::string ambiguous = "\"ambiguous\":";
  ASSERT_THAT(json_, HasSubstr(ambiguous));
  const std::string settled = json_.substr(json_.find(ambiguous));
  EXPECT_EQ(JsonNumber(settled, "calls"), 200) << json_;
  EXPECT_EQ(JsonNumber(settled, "applied"), 200) << json_;
  EXPECT_EQ(JsonNumber(settled, "unresolved"), 0) << json_;
}

TEST_F(LoadtestPushbackTest, ABudgetOfOneRetriesEveryShedCallOnce) {
  // Each first attempt earns a whole token before it can be shed, so none is ever missing.
  ASSERT_EQ(Run({"--retry_budget=1"}), 0) << output_;
  EXPECT_THAT(json_, HasSubstr("\"verification\":\"PASS\""));
  EXPECT_EQ(JsonNumber(json_, "denied_by_budget"), 0) << json_;
  EXPECT_THAT(json_, Not(HasSubstr("\"RESOURCE_EXHAUSTED\""))) << json_;
  // Every OK call's last attempt is timed on its own too, apart from the shed one before it.
  const std::string ok_attempts = "\"ok_attempt\":";
  ASSERT_THAT(json_, HasSubstr(ok_attempts));
  EXPECT_EQ(JsonNumber(json_.substr(json_.find(ok_attempts)), "count"), JsonNumber(json_, "OK"))
      << json_;
  EXPECT_THAT(output_, HasSubstr("latency OK attempt "));
  std::map<std::string, int> attempts;
  for (const std::string& request_id : fake_->request_ids()) ++attempts[request_id];
  ASSERT_FALSE(attempts.empty());
  for (const auto& [request_id, count] : attempts) {
    EXPECT_EQ(count, 2) << request_id << ": every deposit and withdraw is shed once, retried once";
  }
}

TEST_F(LoadtestPushbackTest, MaxRetriesZeroNeverRetries) {
  ASSERT_EQ(Run({"--max_retries=0", "--retry_budget=1"}), 0) << output_;
  EXPECT_THAT(json_, HasSubstr("\"verification\":\"PASS\""));
  EXPECT_EQ(JsonNumber(json_, "sent"), 0) << json_;
  EXPECT_GT(JsonNumber(json_, "denied_by_max_retries"), 0) << json_;
  EXPECT_EQ(JsonNumber(json_, "RESOURCE_EXHAUSTED"), JsonNumber(json_, "denied_by_max_retries"))
      << json_;
}

// Client-side adaptive throttling (--throttle_k), against a fake that refuses every call with no
// pushback (so nothing is retried): the client soon refuses most calls itself, unsent.
class LoadtestThrottleTest : public LoadtestTest {
 protected:
  void SetUp() override {
    fake_ = std::make_unique<testing_util::FakeLedger>(testing_util::FakeLedger::Shedding{
        .attempts_shed = 1'000'000, .pushback_ms = std::nullopt});
    target_ = fake_->Start();
  }
  // One second of open loop at 400 calls/s, never counted late (the machine may be busy).
  int Run(std::vector<std::string> flags) {
    flags.insert(flags.end(), {"--rate=400", "--duration=1s", "--max_send_delay=inf",
                               "--mix=deposit=100", "--accounts=20", "--verify=false"});
    return RunLoadtest(flags);
  }
  std::unique_ptr<testing_util::FakeLedger> fake_;
};

TEST_F(LoadtestThrottleTest, ARefusingServerIsSparedMostCallsByTheClient) {
  ASSERT_EQ(Run({"--throttle_k=2"}), 0) << output_;
  const long long throttled = JsonNumber(json_, "not_sent_throttled");
  const long long shed = JsonNumber(json_, "RESOURCE_EXHAUSTED");
  // Nothing was ever accepted, so after n refusals the next call is sent with chance 1/(n+1).
  EXPECT_GT(throttled, 0) << json_;
  EXPECT_GT(throttled, shed) << json_;
  EXPECT_EQ(throttled + shed, JsonNumber(json_, "measured_calls")) << json_;
  // The server saw only the calls that were sent: every one of them, and no other.
  EXPECT_EQ(static_cast<long long>(fake_->request_ids().size()), shed) << json_;
  EXPECT_THAT(output_, HasSubstr("NOT_SENT(throttled)="));
}

TEST_F(LoadtestThrottleTest, KZeroSendsEveryCall) {
  ASSERT_EQ(Run({"--throttle_k=0"}), 0) << output_;
  EXPECT_EQ(JsonNumber(json_, "not_sent_throttled"), 0) << json_;
  EXPECT_EQ(JsonNumber(json_, "RESOURCE_EXHAUSTED"), JsonNumber(json_, "measured_calls")) << json_;
}

// Transfers (issue 15), against a fake ledger that leaves some transfers' outcome unknown to the
// load test: decided then UNAVAILABLE, dropped then UNAVAILABLE, or still pending.
class LoadtestTransferTest : public LoadtestTest {
 protected:
  using Ending = testing_util::FakeLedger::TransferEnding;
  void StartFake(testing_util::FakeLedger::Shedding shedding) {
    fake_ = std::make_unique<testing_util::FakeLedger>(std::move(shedding));
    target_ = fake_->Start();
  }
  // A closed-loop run of exactly 600 measured calls, half of them transfers among 20 accounts.
  int Run(std::vector<std::string> flags) {
    flags.insert(flags.end(), {"--requests=600", "--duration=0s", "--concurrency=8",
                               "--accounts=20", "--mix=deposit=5,transfer=5"});
    return RunLoadtest(flags);
  }
  // A number in the report's "transfers" object.
  long long Transfers(const std::string& key) {
    const size_t at = json_.find("\"transfers\":{");
    return at == std::string::npos ? -1 : JsonNumber(json_.substr(at), key);
  }
  // How many calls ended with status `code`: the report's "codes" lists only the codes seen, so
  // one that never came is 0 (JsonNumber's -1 for a missing key made the book one short).
  long long Code(const std::string& code) {
    const size_t at = json_.find("\"codes\":{");
    if (at == std::string::npos) return -1;
    const std::string codes = json_.substr(at, json_.find('}', at) - at);
    return std::max(0LL, JsonNumber(codes, code));
  }
  std::unique_ptr<testing_util::FakeLedger> fake_;
};

TEST_F(LoadtestTransferTest, AmbiguousTransfersAreSettledAndTheBookIsExact) {
  StartFake(
      {.first_transfer_endings = {Ending::kAnswer, Ending::kDecideThenUnavailable,
                                  Ending::kDropThenUnavailable, Ending::kPendingThenUnavailable},
       .get_transfer_pending = 2});
  ASSERT_EQ(Run({}), 0) << output_;
  EXPECT_THAT(json_, HasSubstr("\"verification\":\"PASS\"")) << json_;
  // Three in four first attempts ended UNAVAILABLE; every one was settled, none left in doubt.
  const testing_util::FakeLedger::AmbiguousTransfers fake = fake_->ambiguous_transfers();
  EXPECT_GT(Transfers("ambiguous"), 50) << json_;
  EXPECT_EQ(Transfers("ambiguous"), fake.committed + fake.refused) << json_;
  EXPECT_EQ(fake.unrecorded, 0);  // Each dropped one was retried under its transfer_id.
  EXPECT_EQ(Transfers("settled_committed"), fake.committed) << json_;
  EXPECT_EQ(Transfers("settled_refused"), fake.refused) << json_;
  EXPECT_GT(fake.committed, 0);
  EXPECT_GT(fake.refused, 0);  // From unopened or short accounts.
  EXPECT_EQ(Transfers("unresolved"), 0) << json_;
  EXPECT_EQ(Transfers("in_doubt_amount"), 0) << json_;
  EXPECT_GT(Transfers("ok"), 0) << json_;
  EXPECT_THAT(json_, HasSubstr("\"refused_by_code\":{")) << json_;
  // Applied at most once: no transfer_id was recorded twice (a map), and each recorded transfer
  // is one the load test made, between two different accounts.
  const auto transfers = fake_->transfers();
  EXPECT_EQ(
      static_cast<long long>(transfers.size()),
      Transfers("ok") + Code("FAILED_PRECONDITION") + Code("NOT_FOUND") + Transfers("ambiguous"))
      << json_;
  for (const auto& [id, transfer] : transfers) {
    EXPECT_NE(transfer.from_account_id(), transfer.to_account_id()) << id;
  }
  EXPECT_THAT(output_, HasSubstr("transfers: "));
  EXPECT_THAT(output_, HasSubstr("latency OK transfer "));
  EXPECT_THAT(output_, HasSubstr("verification: PASS"));
}

TEST_F(LoadtestTransferTest, WithoutTransferRecordsAmbiguousTransfersWidenTheCheckUnretried) {
  StartFake({.first_transfer_endings = {Ending::kAnswer, Ending::kDecideThenUnavailable},
             .no_transfer_records = true});
  ASSERT_EQ(Run({}), 0) << output_;
  EXPECT_THAT(json_, HasSubstr("\"verification\":\"PASS\"")) << json_;
  const long long ambiguous = Transfers("ambiguous");
  EXPECT_GT(ambiguous, 20) << json_;
  EXPECT_EQ(Transfers("unresolved"), ambiguous) << json_;
  EXPECT_EQ(Transfers("unresolved_without_records"), ambiguous) << json_;
  EXPECT_EQ(Transfers("settled_committed"), 0) << json_;
  EXPECT_GT(Transfers("in_doubt_amount"), 0) << json_;
  // Not one transfer was retried: without records a retry could move the money twice.
  std::map<std::string, int> attempts;
  for (const std::string& id : fake_->request_ids()) ++attempts[id];
  for (const auto& [id, count] : attempts) EXPECT_EQ(count, 1) << id;
  EXPECT_THAT(output_, HasSubstr("ambiguous transfers left unsettled: the server keeps no "
                                 "transfer records"));
}

TEST_F(LoadtestTransferTest, CrossShardTransfersPassVerification) {
  StartFake({});
  ASSERT_EQ(Run({"--transfer_scope=cross_shard"}), 0) << output_;
  EXPECT_THAT(json_, HasSubstr("\"verification\":\"PASS\"")) << json_;
  EXPECT_GT(Transfers("ok"), 0) << json_;
  EXPECT_EQ(Transfers("ambiguous"), 0) << json_;
  const loadtest::Report report = ParseReport(json_);
  ASSERT_EQ(report.ops().size(), 2u) << json_;
  EXPECT_GT(report.ops().at("deposit").calls(), 0) << json_;
  EXPECT_EQ(report.ops().at("transfer").ok(), report.transfers().ok()) << json_;
}

TEST_F(LoadtestTest, BadFlagsExitWithUsageCode) {
  target_ = "127.0.0.1:1";
  for (const std::vector<std::string>& flags :
       std::vector<std::vector<std::string>>{{"--mix=transfers=5"},
                                             {"--distribution=zipf:0"},
                                             {"--amount_min=0"},
                                             {"--concurrency=0"},
                                             {"--run_id=has space"}}) {
    EXPECT_EQ(RunLoadtest(flags), 2) << flags[0] << ": " << output_;
    EXPECT_THAT(output_, HasSubstr("ledger-loadtest: ")) << flags[0];
  }
}

TEST_F(LoadtestTest, JsonPrintsTheReportAsJsonOnStdoutInsteadOfText) {
  StartLedgerd({"--shards=2"});
  Subprocess loadtest({"/bin/sh", "-c",
                       testing_util::LoadtestPath() + " --target=" + target_ +
                           " --json --requests=200 --duration=0s --warmup=0s --server_shards=2 "
                           "--accounts=20 2>/dev/null"});
  ASSERT_EQ(loadtest.WaitForExit(std::chrono::seconds(60)), 0) << loadtest.output();
  const std::string& out = loadtest.output();
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.front(), '{') << out;
  EXPECT_EQ(out.find('\n'), out.size() - 1) << "one line: " << out;
  EXPECT_THAT(out, HasSubstr("\"verification\":\"PASS\""));
  EXPECT_THAT(out, HasSubstr("\"shards\":[{\"calls\":"));
  EXPECT_THAT(out, Not(HasSubstr("verification: PASS")));  // The text report.
}

struct FlagCase {
  std::vector<std::string> args;
  std::string message;  // The first line of the output; exit 2.
};

class LoadtestFlagTest : public testing::TestWithParam<FlagCase> {};

TEST_P(LoadtestFlagTest, IsRefusedWithExitTwoAndAHint) {
  std::vector<std::string> argv = {testing_util::LoadtestPath(), "--target=127.0.0.1:1"};
  argv.insert(argv.end(), GetParam().args.begin(), GetParam().args.end());
  Subprocess loadtest(argv);
  EXPECT_EQ(loadtest.WaitForExit(std::chrono::seconds(30)), 2) << loadtest.output();
  EXPECT_EQ(loadtest.output().substr(0, loadtest.output().find('\n')),
            "ledger-loadtest: " + GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LoadtestFlagTest,
    testing::Values(
        FlagCase{{"--duration=10"},
                 "Illegal value '10' specified for flag 'duration'; durations need a unit, e.g. "
                 "5s, 250ms or 1m30s"},
        FlagCase{{"--json=out.json"},
                 "Illegal value 'out.json' specified for flag 'json'; use true or false"},
        FlagCase{{"--shards=2"}, "Unknown command line flag 'shards'"},
        FlagCase{{"--server_shards=1025"}, "--server_shards must be 0 to 1024"},
        FlagCase{{"--max_send_delay=0s"}, "--max_send_delay must be positive (inf: never late)"},
        FlagCase{{"--max_retries=11"}, "--max_retries must be 0 to 10"},
        FlagCase{{"--batch=0"}, "--batch must be 1 to 8192 (the server's limit)"},
        FlagCase{{"--batch=8193"}, "--batch must be 1 to 8192 (the server's limit)"},
        FlagCase{{"--fund=-1"}, "--fund must not be negative"},
        FlagCase{{"--retry_budget=1.5"}, "--retry_budget must be 0 to 1"},
        FlagCase{{"--throttle_k=-1"}, "--throttle_k must be 0 (off) to 1000"},
        FlagCase{{"--target=ledger"},
                 "--target needs HOST:PORT, e.g. 127.0.0.1:50051 or :50051; got \"ledger\": no "
                 "port"},
        FlagCase{{"--concurency=8"},
                 "Unknown command line flag 'concurency'; did you mean --concurrency?"},
        FlagCase{{"run"}, "unexpected argument \"run\"; ledger-loadtest takes only flags"},
        FlagCase{{"--transfer_scope=cross"},
                 "--transfer_scope must be any, same_shard or cross_shard; got \"cross\""},
        FlagCase{{"--mix=transfer=1", "--transfer_scope=cross_shard"},
                 "--transfer_scope same_shard or cross_shard needs --server_shards (the server's "
                 "--shards), to know which accounts share a shard"},
        FlagCase{{"--mix=transfer=1", "--transfer_scope=cross_shard", "--server_shards=1"},
                 "--transfer_scope=cross_shard: all --accounts are on one shard (needs "
                 "--server_shards >= 2 and more accounts)"},
        FlagCase{{"--mix=deposit=1,transfer=1", "--accounts=1"},
                 "transfers need at least 2 accounts (--accounts)"}));

TEST(LoadtestHelpTest, HelpListsItsOwnFlagsAndExitsZero) {
  Subprocess help({testing_util::LoadtestPath(), "--help"});
  EXPECT_EQ(help.WaitForExit(), 0);
  for (const char* flag :
       {"  --json  (default: false)", "  --json_file=STRING", "--server_shards",
        "must equal the server's --shards", "--concurrency", "--version", "--max_send_delay",
        "--max_retries", "--retry_budget", "--throttle_k", "--adaptive_in_flight",
        "--transfer_scope", "transfer=N", "--batch", "--fund"}) {
    EXPECT_THAT(help.output(), HasSubstr(flag)) << flag;
  }
  EXPECT_THAT(help.output(), Not(HasSubstr("No flags matched")));
  EXPECT_THAT(help.output(), Not(HasSubstr("Flags from")));
}

// A port on 127.0.0.1 that is bound but not listening, so a connection to it is refused, for as
// long as the returned descriptor is open.
int BindWithoutListening(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  *port = ntohs(address.sin_port);
  return fd;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST_F(LoadtestTest, NoListenerFailsWithinFiveSecondsNamingTheTargetAndTheError) {
  int port = 0;
  const int fd = BindWithoutListening(&port);
  ASSERT_GT(port, 0);
  target_ = "127.0.0.1:" + std::to_string(port);
  const auto start = std::chrono::steady_clock::now();
  auto loadtest = StartLoadtest({"--duration=10s"});
  EXPECT_EQ(Finish(*loadtest, std::chrono::seconds(5)), 5) << output_;
  EXPECT_LT(SecondsSince(start), 5.0);
  close(fd);
  EXPECT_THAT(output_, HasSubstr("ledger-loadtest: cannot connect to ledgerd at " + target_ +
                                 " within 3s: UNAVAILABLE: "));
  EXPECT_THAT(output_, HasSubstr("Connection refused"));
  EXPECT_THAT(output_, HasSubstr("; nothing was sent\n"));
}

TEST_F(LoadtestTest, ServerKilledMidRunEndsInBoundedTimeWithAMessage) {
  StartLedgerd({"--shards=2"});
  const auto start = std::chrono::steady_clock::now();
  auto loadtest = StartLoadtest({"--duration=3s", "--resolve_for=0", "--deadline=1s",
                                 "--concurrency=16", "--accounts=100", "--progress"});
  ASSERT_TRUE(loadtest->WaitForOutput("OK/s")) << loadtest->output();
  ledgerd_->Kill();
  ledgerd_.reset();
  // 3 s of measurement, at most 1 s for the calls in flight, 5 s without an answer while
  // verifying: well under 20 s.
  EXPECT_EQ(Finish(*loadtest, std::chrono::seconds(20)), 5) << output_;
  EXPECT_LT(SecondsSince(start), 20.0);
  EXPECT_THAT(output_, HasSubstr("verification: INCOMPLETE (read 0 of "));
  EXPECT_THAT(output_, HasSubstr("balances, then stopped: no answer from ledgerd at " + target_ +
                                 " for 5s (UNAVAILABLE: "));
  EXPECT_THAT(output_, HasSubstr("ledger-loadtest: verification incomplete: "));
  EXPECT_THAT(json_, HasSubstr("\"verification\":\"INCOMPLETE\""));
  // Verification showed progress while it waited.
  EXPECT_THAT(output_, HasSubstr("] 0 of "));
  EXPECT_THAT(output_, HasSubstr("balances read; no answer from ledgerd for "));
}

TEST_F(LoadtestTest, ServerKilledMidRunStopsSettlingAndSaysWhy) {
  StartLedgerd({"--shards=2"});
  const auto start = std::chrono::steady_clock::now();
  auto loadtest = StartLoadtest({"--duration=3s", "--resolve_for=60s", "--deadline=1s",
                                 "--concurrency=16", "--accounts=100", "--progress"});
  ASSERT_TRUE(loadtest->WaitForOutput("OK/s")) << loadtest->output();
  ledgerd_->Kill();
  ledgerd_.reset();
  // Not the 60 s of --resolve_for: 5 s without any answer while settling ends it.
  EXPECT_EQ(Finish(*loadtest, std::chrono::seconds(20)), 5) << output_;
  EXPECT_LT(SecondsSince(start), 20.0);
  EXPECT_THAT(output_, HasSubstr("verification: INCOMPLETE (settling ambiguous calls stopped: no "
                                 "answer from ledgerd at " +
                                 target_ + " for 5s (UNAVAILABLE: "));
  EXPECT_THAT(output_, HasSubstr("Connection refused"));
  EXPECT_THAT(output_, HasSubstr("ambiguous calls settled (0 applied, 0 not applied); no answer "
                                 "from ledgerd for "));
  EXPECT_GT(JsonNumber(json_, "unresolved"), 0) << json_;
}

TEST_F(LoadtestTest, SigintMidRunPrintsThePartialReportAndExits130) {
  StartLedgerd({"--shards=2"});
  auto loadtest = StartLoadtest({"--duration=60s", "--concurrency=8", "--progress"});
  ASSERT_TRUE(loadtest->WaitForOutput("OK/s")) << loadtest->output();
  const auto start = std::chrono::steady_clock::now();
  loadtest->Signal(SIGINT);
  EXPECT_EQ(Finish(*loadtest, std::chrono::seconds(10)), 130) << output_;
  EXPECT_LT(SecondsSince(start), 10.0);
  EXPECT_THAT(output_, HasSubstr("INTERRUPTED by SIGINT: partial report, measured until the "
                                 "signal\nmeasured "));
  EXPECT_THAT(output_, HasSubstr("\nlatency OK "));
  EXPECT_THAT(output_, HasSubstr("\nverification: SKIPPED (interrupted; the report covers what "
                                 "was measured)\n"));
  EXPECT_THAT(json_, HasSubstr("\"interrupted\":\"SIGINT\""));
  EXPECT_GT(JsonNumber(json_, "measured_calls"), 0) << json_;
  EXPECT_GT(JsonNumber(json_, "OK"), 0) << json_;
}

TEST_F(LoadtestTest, SigtermMidRunExits143) {
  StartLedgerd({"--shards=2"});
  auto loadtest = StartLoadtest({"--duration=60s", "--concurrency=8", "--progress"});
  ASSERT_TRUE(loadtest->WaitForOutput("OK/s")) << loadtest->output();
  loadtest->Signal(SIGTERM);
  EXPECT_EQ(Finish(*loadtest, std::chrono::seconds(10)), 143) << output_;
  EXPECT_THAT(output_, HasSubstr("INTERRUPTED by SIGTERM: partial report"));
}

TEST_F(LoadtestTest, SigintWhileSettlingStopsThereAndExits130) {
  StartLedgerd({"--shards=2"});
  auto loadtest = StartLoadtest(
      {"--duration=2s", "--resolve_for=60s", "--deadline=1s", "--concurrency=8", "--progress"});
  ASSERT_TRUE(loadtest->WaitForOutput("OK/s")) << loadtest->output();
  ledgerd_->Signal(SIGSTOP);  // Calls now time out: ambiguous, and unsettled while it sleeps.
  EXPECT_TRUE(loadtest->WaitForOutput("[settle ")) << loadtest->output();
  const auto start = std::chrono::steady_clock::now();
  loadtest->Signal(SIGINT);
  EXPECT_EQ(Finish(*loadtest, std::chrono::seconds(10)), 130) << output_;
  EXPECT_LT(SecondsSince(start), 3.0);  // The calls in flight end by their 1 s deadline.
  ledgerd_->Signal(SIGCONT);
  EXPECT_THAT(output_, HasSubstr("INTERRUPTED by SIGINT: partial report, the measurement was "
                                 "complete\n"));
  EXPECT_THAT(output_, HasSubstr("verification: SKIPPED (settling ambiguous calls stopped: "
                                 "interrupted by SIGINT)\n"));
}

TEST_F(LoadtestTest, SecondSigintExitsAtOnceWhileCallsHang) {
  StartLedgerd({"--shards=2"});
  auto loadtest =
      StartLoadtest({"--duration=60s", "--concurrency=8", "--deadline=60s", "--progress"});
  ASSERT_TRUE(loadtest->WaitForOutput("OK/s")) << loadtest->output();
  ledgerd_->Signal(SIGSTOP);  // Calls in flight now wait for their 60 s deadline.
  loadtest->Signal(SIGINT);
  EXPECT_TRUE(loadtest->WaitForOutput("ledger-loadtest: interrupted; stopping"));
  const auto start = std::chrono::steady_clock::now();
  loadtest->Signal(SIGINT);
  EXPECT_EQ(Finish(*loadtest, std::chrono::seconds(5)), 130) << output_;
  EXPECT_LT(SecondsSince(start), 5.0);
  EXPECT_THAT(output_, HasSubstr("ledger-loadtest: interrupted again; exiting at once"));
  ledgerd_->Signal(SIGCONT);
}

TEST_F(LoadtestTest, RequestsStopsAtExactlyThatManyCalls) {
  StartLedgerd({"--shards=2"});
  for (const std::vector<std::string>& flags : std::vector<std::vector<std::string>>{
           {"--concurrency=1"}, {"--concurrency=64"}, {"--rate=4000"}}) {
    std::vector<std::string> all = {"--requests=1000", "--duration=0s", "--accounts=100"};
    all.push_back(flags[0]);
    ASSERT_EQ(RunLoadtest(all), 0) << flags[0] << ": " << output_;
    EXPECT_EQ(JsonNumber(json_, "measured_calls"), 1000) << flags[0] << ": " << json_;
    EXPECT_THAT(output_, HasSubstr(" s: 1000 calls, ")) << flags[0];
    EXPECT_THAT(output_, HasSubstr("verification: PASS")) << flags[0];
  }
}

TEST_F(LoadtestTest, ProgressShowsTheRealRateFromTheFirstLine) {
  StartLedgerd({"--shards=2"});
  auto loadtest = StartLoadtest({"--duration=1s", "--warmup=2s", "--concurrency=8", "--progress"});
  EXPECT_EQ(Finish(*loadtest), 0) << output_;
  // The first progress line, one second in, already shows the real rate of the warm-up.
  const size_t first = output_.find("\n[");
  ASSERT_NE(first, std::string::npos) << output_;
  const std::string line = output_.substr(first + 1, output_.find('\n', first + 1) - first - 1);
  EXPECT_THAT(line, ::testing::StartsWith("[  1.")) << output_;
  const size_t label = line.find("] warm-up ");
  ASSERT_NE(label, std::string::npos) << output_;
  const double rate = std::atof(line.c_str() + label + std::string("] warm-up ").size());
  EXPECT_GT(rate, 100) << line;
}

}  // namespace
}  // namespace ledger
