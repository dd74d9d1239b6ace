// The ledgerd binary with a data directory: killed with SIGKILL under load and restarted (the
// load test then settles its ambiguous calls, transfers included, and verifies every balance and
// the conservation sum exactly), and refusing a data directory that is not its own.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/ledger_dir.h"
#include "tests/e2e/ledgerd_process.h"
#include "tests/e2e/loadtest_report.h"
#include "tests/e2e/subprocess.h"
#include "tests/http_get.h"
#include "tests/metrics_text.h"
#include "tests/scratch_dir.h"
#include "tests/test_paths.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;
using testing_util::JsonNumber;
using testing_util::ScratchDir;
using testing_util::Subprocess;

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

class CrashTest : public testing::Test {
 protected:
  CrashTest() : CrashTest({"--shards=2"}) {}
  explicit CrashTest(std::vector<std::string> flags) : ledgerd_(std::move(flags)) {}

  // Checkpoints the running ledgerd has done (its /metrics); -1 when the scrape fails.
  int64_t Checkpoints() const {
    const std::optional<testing_util::HttpResponse> scrape =
        testing_util::HttpGet(ledgerd_.metrics_port(), "/metrics");
    if (!scrape.has_value()) return -1;
    return static_cast<int64_t>(
        testing_util::SampleValue(scrape->body, "ledger_log_checkpoints_total").value_or(-1));
  }

  // Deposits and withdrawals the running ledgerd has answered OK, alone or in Apply calls (from
  // its /metrics); 0 when the scrape fails.
  int64_t AcknowledgedWrites() const {
    const std::optional<testing_util::HttpResponse> scrape =
        testing_util::HttpGet(ledgerd_.metrics_port(), "/metrics");
    if (!scrape.has_value()) return 0;
    int64_t acknowledged = 0;
    for (const char* method : {"Deposit", "Withdraw"}) {
      acknowledged += static_cast<int64_t>(
          testing_util::SampleValue(
              scrape->body,
              std::string("ledger_requests_total{code=\"OK\",method=\"") + method + "\"}")
              .value_or(0));
    }
    // An Apply call's operations, each answered OK (balances among them: a small share).
    acknowledged += static_cast<int64_t>(
        testing_util::SampleValue(scrape->body, "ledger_apply_results_total{code=\"OK\"}")
            .value_or(0));
    return acknowledged;
  }

  void KillUnderLoad(const std::vector<std::string>& load_flags, int64_t writes);

  bool expect_checkpoints_ = false;

  ScratchDir scratch_;  // The load test's reports.
  // Restarted on the same data directory and gRPC port after each kill: the load test keeps its
  // target.
  testing_util::LedgerdProcess ledgerd_;
};

// Three cycles of load, each killed with SIGKILL once ledgerd has acknowledged `writes` writes of
// it; the load test (with `load_flags`) settles what the kill left unknown and verifies exactly.
void CrashTest::KillUnderLoad(const std::vector<std::string>& load_flags, int64_t writes) {
  constexpr int kCycles = 3;
  ASSERT_TRUE(ledgerd_.Start());
  const int port = ledgerd_.grpc_port();
  for (int cycle = 0; cycle < kCycles; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    const int64_t acknowledged_before = AcknowledgedWrites();
    const std::string json_path = scratch_.Sub("report-" + std::to_string(cycle) + ".json");
    std::vector<std::string> command = {
        testing_util::LoadtestPath(), "--target=127.0.0.1:" + std::to_string(port), "--duration=3s",
        "--warmup=0s", "--accounts=300", "--deadline=2s", "--resolve_for=60s",
        // Transfers too: the kill lands between their steps as well.
        "--mix=deposit=45,withdraw=20,balance=5,transfer=30",
        "--run_id=crash" + std::to_string(cycle), "--json_file=" + json_path};
    command.insert(command.end(), load_flags.begin(), load_flags.end());
    Subprocess loadtest(command);
    // The kill lands under load: once this ledgerd has acknowledged writes of this cycle's load
    // that must survive it, while the load test keeps calling.
    ASSERT_TRUE(testing_util::WaitUntil(
        [&] { return AcknowledgedWrites() >= acknowledged_before + writes; },
        "ledgerd has acknowledged writes of this cycle's load", testing_util::kEventTimeout,
        std::chrono::milliseconds(20)))
        << loadtest.output();
    if (expect_checkpoints_) {
      // The kill lands among checkpoints: flushes, segment deletions, segments made and rolled.
      // The applier checkpoints behind the acknowledged writes, later on a loaded machine.
      EXPECT_TRUE(testing_util::WaitUntil([&] { return Checkpoints() > 0; },
                                          "ledgerd has checkpointed", testing_util::kEventTimeout,
                                          std::chrono::milliseconds(20)));
    }
    ledgerd_.Signal(SIGKILL);
    ASSERT_EQ(ledgerd_.WaitForExit(std::chrono::seconds(10)), std::nullopt)  // Died by signal.
        << ledgerd_.log();
    ASSERT_TRUE(ledgerd_.Restart());
    ASSERT_EQ(ledgerd_.grpc_port(), port);
    EXPECT_THAT(ledgerd_.log(), HasSubstr("recovered "));

    const std::optional<int> exit_code = loadtest.WaitForExit(std::chrono::seconds(120));
    const std::string report = ReadFile(json_path);
    EXPECT_EQ(exit_code, 0) << loadtest.output();
    EXPECT_THAT(report, HasSubstr("\"verification\":\"PASS\"")) << loadtest.output();
    // The kill left calls whose outcome was unknown; retries settled every one of them, so the
    // check was exact: each balance equals what was acknowledged, the sum equals the net.
    EXPECT_GT(JsonNumber(report, "calls"), 0) << report;
    EXPECT_EQ(JsonNumber(report, "unresolved"), 0) << report;
    EXPECT_GT(JsonNumber(report, "OK"), 0) << report;
    // Transfers were acknowledged, and verified with the rest.
    EXPECT_GT(JsonNumber(report, "transfers\":{\"ok"), 0) << report;
    if (std::find(load_flags.begin(), load_flags.end(), "--watch") != load_flags.end()) {
      // The stream followed the run across the kill: it was opened again from the last position
      // it had processed, and the balances rebuilt from it equal every balance read.
      EXPECT_THAT(report, HasSubstr("\"watch\":{\"verdict\":\"PASS\"")) << loadtest.output();
      EXPECT_GE(JsonNumber(report, "reconnects"), 1) << report;
      EXPECT_GT(JsonNumber(report, "events"), 0) << report;
    }
  }
}

TEST_F(CrashTest, AWatcherAcrossSigkillRebuildsEveryBalanceExactly) {
  KillUnderLoad({"--concurrency=32", "--watch"}, 200);
}

TEST_F(CrashTest, EveryAcknowledgedCallSurvivesSigkillAndNothingIsAppliedTwice) {
  KillUnderLoad({"--concurrency=32"}, 200);
}

// The same with Apply calls of 50 operations: the kill lands between a call's parts, and between
// the journal writes of one part, so a call can be acknowledged on one shard and unknown on the
// other; every operation is settled and verified on its own.
TEST_F(CrashTest, EveryAcknowledgedOperationOfABatchSurvivesSigkillAndNothingIsAppliedTwice) {
  KillUnderLoad({"--concurrency=8", "--batch=50"}, 1000);
}

// The same with 1 MiB log segments: a segment fills every few hundred group commits, so the kill
// lands among checkpoints (RocksDB flushes, segments deleted behind them, spares made and
// renamed into the log), and each start replays the log from the last checkpoint.
class CrashAmongCheckpointsTest : public CrashTest {
 protected:
  CrashAmongCheckpointsTest() : CrashTest({"--shards=2", "--log_segment_mib=1"}) {
    expect_checkpoints_ = true;
  }
};

TEST_F(CrashAmongCheckpointsTest, EveryAcknowledgedOperationSurvivesSigkillAmongCheckpoints) {
  // About 250 bytes of log an operation: 6,000 fill a 1 MiB segment and half the next before
  // each kill. The load lasts 6 s, so that a slow machine (ASan, after a crash's replay) still
  // acknowledges them before it ends: 12,000 in 3 s timed out once in CI.
  KillUnderLoad({"--concurrency=8", "--batch=50", "--duration=6s"}, 6000);
}

TEST(DataDirectoryTest, LedgerdRefusesADirectoryThatIsNotItsOwnAndLeavesItAlone) {
  ScratchDir scratch;
  std::ofstream(scratch.Sub("accounts.csv")) << "alice,100\n";
  Subprocess ledgerd({testing_util::LedgerdPath(), "--listen=127.0.0.1:0",
                      "--metrics_listen=", "--data_dir=" + scratch.path()});
  EXPECT_EQ(ledgerd.WaitForExit(), 1);
  EXPECT_THAT(ledgerd.output(),
              HasSubstr("ledgerd: data directory " + scratch.path() +
                        ": it holds files (such as \"accounts.csv\") but no ledgerd database (no "
                        "RocksDB CURRENT file)"));
  EXPECT_EQ(ReadFile(scratch.Sub("accounts.csv")), "alice,100\n");
}

TEST(DataDirectoryTest, LedgerdRefusesACorruptDatabase) {
  ScratchDir scratch;
  const std::string data_dir = scratch.Sub("data");
  testing_util::InitLedgerDir(data_dir);
  std::ofstream(data_dir + "/CURRENT", std::ios::trunc) << "MANIFEST-999999\n";
  Subprocess ledgerd({testing_util::LedgerdPath(), "--listen=127.0.0.1:0",
                      "--metrics_listen=", "--data_dir=" + data_dir});
  EXPECT_EQ(ledgerd.WaitForExit(), 1);
  EXPECT_THAT(ledgerd.output(), HasSubstr("ledgerd: refusing data directory " + data_dir +
                                          ": RocksDB cannot open it; it may be corrupt or "
                                          "incomplete"));
}

}  // namespace
}  // namespace ledger
