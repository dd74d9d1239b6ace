// ledgerctl watch against a real ledgerd: what it prints (text and --json), the filter, the last
// position on SIGINT and the resume from it, and a restart of ledgerd in the middle.
#include <signal.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/exit_codes.h"
#include "client/ledgerctl_output.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "ledger/v1/ledger.pb.h"
#include "tests/e2e/ledgerctl_fixture.h"
#include "tests/e2e/subprocess.h"
#include "tests/scratch_dir.h"
#include "tests/test_paths.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;
using testing_util::Subprocess;

class LedgerctlWatchTest : public testing_util::LedgerctlTest {
 protected:
  // ledgerctl watch with `args`, its stdout and stderr apart (stderr to `stderr_path`).
  std::unique_ptr<Subprocess> Watch(const std::vector<std::string>& args) {
    // exec: the signals the test sends reach ledgerctl, not the shell.
    std::string command = "exec " + testing_util::LedgerctlPath() + " " + target_ + " watch";
    for (const std::string& arg : args) command += " '" + arg + "'";
    command += " 2>" + scratch_.Sub("stderr");
    return std::make_unique<Subprocess>(std::vector<std::string>{"/bin/sh", "-c", command});
  }
  std::string Stderr() const {
    std::ifstream file(scratch_.Sub("stderr"));
    return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  }
  testing_util::ScratchDir scratch_;
};

// The JSON lines of `output`, each a WatchEvent.
std::vector<v1::WatchEvent> Events(const std::string& output) {
  std::vector<v1::WatchEvent> events;
  for (absl::string_view line : absl::StrSplit(output, '\n', absl::SkipEmpty())) {
    v1::WatchEvent event;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(std::string(line), &event).ok())
        << line;
    events.push_back(event);
  }
  return events;
}

TEST_F(LedgerctlWatchTest, PrintsEachOperationAsJsonAndTheLastPositionOnSigint) {
  ASSERT_NO_FATAL_FAILURE(StartLedgerd());
  ASSERT_EQ(Run({"deposit", "alice", "100", "--request_id=r1"}).exit_code, 0);
  ASSERT_EQ(Run({"deposit", "bob", "5"}).exit_code, 0);
  ASSERT_EQ(Run({"transfer", "alice", "bob", "30", "--transfer_id=t1"}).exit_code, 0);
  std::unique_ptr<Subprocess> watch = Watch({"--json"});
  ASSERT_TRUE(watch->WaitForOutput("\"transfer_id\":\"t1\"}}\n{")) << watch->output();
  watch->Signal(SIGINT);
  EXPECT_EQ(watch->WaitForExit(), 0) << watch->output();
  const std::vector<v1::WatchEvent> events = Events(watch->output());
  ASSERT_EQ(events.size(), 4u) << watch->output();
  EXPECT_EQ(events[0].account_id(), "alice");
  EXPECT_EQ(events[0].entry().request_id(), "r1");
  EXPECT_EQ(events[0].entry().balance_after(), 100);
  EXPECT_EQ(events[2].entry().operation(), v1::OPERATION_TRANSFER_OUT);
  EXPECT_EQ(events[3].entry().operation(), v1::OPERATION_TRANSFER_IN);
  EXPECT_EQ(events[3].account_id(), "bob");
  EXPECT_EQ(events[3].entry().balance_after(), 35);
  EXPECT_EQ(events[3].entry().counterparty_account_id(), "alice");
  EXPECT_EQ(events[2].position(), events[3].position());  // One transfer on one shard or not.
  EXPECT_LT(events[0].position(), events[1].position());
  EXPECT_EQ(Stderr(), absl::StrCat("{\"last_position\":\"", events[3].position(), "\"}\n"));

  // Resumed from that position, it prints only what came after.
  ASSERT_EQ(Run({"withdraw", "alice", "1", "--request_id=after"}).exit_code, 0);
  std::unique_ptr<Subprocess> resumed =
      Watch({"--json", absl::StrCat("--from=", events[3].position())});
  ASSERT_TRUE(resumed->WaitForOutput("\"request_id\":\"after\"")) << resumed->output();
  resumed->Signal(SIGTERM);
  EXPECT_EQ(resumed->WaitForExit(), 0);
  const std::vector<v1::WatchEvent> after = Events(resumed->output());
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].entry().operation(), v1::OPERATION_WITHDRAW);
  EXPECT_EQ(after[0].entry().balance_after(), 69);
}

TEST_F(LedgerctlWatchTest, PrintsATableForAPersonAndFollowsOnlyTheAccountsNamed) {
  ASSERT_NO_FATAL_FAILURE(StartLedgerd());
  ASSERT_EQ(Run({"deposit", "alice", "100", "--request_id=r1"}).exit_code, 0);
  ASSERT_EQ(Run({"deposit", "carol", "7", "--request_id=r2"}).exit_code, 0);
  std::unique_ptr<Subprocess> watch = Watch({"--account=carol,dave"});
  ASSERT_TRUE(watch->WaitForOutput(" r2\n")) << watch->output();
  watch->Signal(SIGINT);
  EXPECT_EQ(watch->WaitForExit(), 0);
  const std::vector<std::string> lines = absl::StrSplit(watch->output(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << watch->output();
  EXPECT_THAT(lines[0], ::testing::StartsWith("POSITION  ACCOUNT"));
  EXPECT_THAT(lines[1], ::testing::MatchesRegex("2 +carol +1 +[-0-9T:.]+Z deposit +7 +7  r2"));
  EXPECT_THAT(Stderr(), HasSubstr("watch stopped after position 2; resume with --from=2"));
}

TEST_F(LedgerctlWatchTest, ARestartOfLedgerdIsFollowedWithoutAGapOrARepeat) {
  ASSERT_NO_FATAL_FAILURE(StartLedgerd());
  ASSERT_EQ(Run({"deposit", "alice", "1", "--request_id=before"}).exit_code, 0);
  std::unique_ptr<Subprocess> watch = Watch({"--json"});
  ASSERT_TRUE(watch->WaitForOutput("\"request_id\":\"before\"")) << watch->output();
  ASSERT_EQ(ledgerd_->Stop(), 0);
  ASSERT_TRUE(ledgerd_->Restart());
  ASSERT_EQ(Run({"deposit", "alice", "2", "--request_id=after"}).exit_code, 0);
  ASSERT_TRUE(watch->WaitForOutput("\"request_id\":\"after\"")) << watch->output();
  watch->Signal(SIGINT);
  EXPECT_EQ(watch->WaitForExit(), 0);
  const std::vector<v1::WatchEvent> events = Events(watch->output());
  ASSERT_EQ(events.size(), 2u) << watch->output();
  EXPECT_EQ(events[1].entry().sequence(), 2u);
  EXPECT_EQ(events[1].entry().balance_after(), 3);
  EXPECT_THAT(Stderr(), HasSubstr("opening it again after position"));
}

TEST_F(LedgerctlWatchTest, WithBalancesPrintsTheBalancesThenOnlyTheOperationsAfterThem) {
  ASSERT_NO_FATAL_FAILURE(StartLedgerd());
  ASSERT_EQ(Run({"deposit", "erin", "4", "--request_id=r0"}).exit_code, 0);
  ASSERT_EQ(Run({"deposit", "carol", "7", "--request_id=r1"}).exit_code, 0);
  ASSERT_EQ(Run({"deposit", "carol", "3", "--request_id=r2"}).exit_code, 0);
  std::unique_ptr<Subprocess> watch = Watch({"--json", "--with_balances", "--account=dave,carol"});
  ASSERT_TRUE(watch->WaitForOutput("\"account_id\":\"carol\"")) << watch->output();
  ASSERT_EQ(Run({"deposit", "carol", "5", "--request_id=r3"}).exit_code, 0);
  ASSERT_TRUE(watch->WaitForOutput("\"request_id\":\"r3\"")) << watch->output();
  watch->Signal(SIGINT);
  EXPECT_EQ(watch->WaitForExit(), 0);
  const std::vector<std::string> lines = absl::StrSplit(watch->output(), '\n', absl::SkipEmpty());
  ASSERT_GE(lines.size(), 3u) << watch->output();
  // The balances as of one position the server applied (the newest when the watch started,
  // unless its applier had not reached it yet), in the order named.
  ctl::WatchBalanceLine dave;
  ctl::WatchBalanceLine carol;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(lines[0], &dave).ok()) << lines[0];
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(lines[1], &carol).ok()) << lines[1];
  EXPECT_EQ(dave.account_id(), "dave");
  EXPECT_FALSE(dave.opened());
  EXPECT_EQ(carol.account_id(), "carol");
  EXPECT_EQ(dave.position(), carol.position());
  ASSERT_GE(carol.position(), 1u);
  ASSERT_LE(carol.position(), 3u);
  EXPECT_EQ(carol.opened(), carol.position() >= 2);
  EXPECT_EQ(carol.sequence(), carol.position() - 1);
  EXPECT_EQ(carol.balance(), carol.position() == 3 ? 10 : carol.position() == 2 ? 7 : 0);
  // Then exactly carol's operations after that position: none missed, none repeated.
  std::string rest;
  for (size_t i = 2; i < lines.size(); ++i) rest += lines[i] + "\n";
  const std::vector<v1::WatchEvent> events = Events(rest);
  ASSERT_EQ(events.size(), 3 - carol.sequence()) << watch->output();
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_GT(events[i].position(), carol.position());
    EXPECT_EQ(events[i].account_id(), "carol");
    EXPECT_EQ(events[i].entry().sequence(), carol.sequence() + 1 + i);
  }
  EXPECT_EQ(events.back().entry().balance_after(), 15);
  EXPECT_EQ(events.back().position(), 4u);
  EXPECT_EQ(Stderr(), "{\"last_position\":\"4\"}\n");

  // For a person: the balances' table, then the operations' table (erin's one operation is at
  // position 1, before any position the balances can be at).
  std::unique_ptr<Subprocess> table = Watch({"--with_balances", "--account=erin,dave"});
  ASSERT_TRUE(table->WaitForOutput("REQUEST ID")) << table->output();
  table->Signal(SIGINT);
  EXPECT_EQ(table->WaitForExit(), 0);
  const std::vector<std::string> rows = absl::StrSplit(table->output(), '\n');
  ASSERT_EQ(rows.size(), 7u) << table->output();
  EXPECT_THAT(rows[0], ::testing::MatchesRegex("BALANCES AS OF POSITION [1-4]"));
  EXPECT_THAT(rows[1], ::testing::MatchesRegex("ACCOUNT +BALANCE +SEQ"));
  EXPECT_THAT(rows[2], ::testing::MatchesRegex("erin +4 +1"));
  EXPECT_THAT(rows[3], ::testing::MatchesRegex("dave +\\(not opened\\)"));
  EXPECT_EQ(rows[4], "");
  EXPECT_THAT(rows[5], ::testing::StartsWith("POSITION  ACCOUNT"));
  EXPECT_EQ(rows[6], "");
  EXPECT_THAT(Stderr(), HasSubstr("watch stopped after position "));
}

TEST_F(LedgerctlWatchTest, WithBalancesNeedsAccountsAndNoFrom) {
  ASSERT_NO_FATAL_FAILURE(StartLedgerd());
  testing_util::LedgerctlResult result = Run({"watch", "--with_balances"});
  EXPECT_EQ(result.exit_code, kExitUsage) << result.output;
  EXPECT_THAT(result.output, HasSubstr("--with_balances needs the accounts to read (--account)"));
  result = Run({"watch", "--with_balances", "--account=carol", "--from=3"});
  EXPECT_EQ(result.exit_code, kExitUsage) << result.output;
  EXPECT_THAT(result.output, HasSubstr("drop --from"));
  result = Run({"balance", "carol", "--with_balances"});
  EXPECT_EQ(result.exit_code, kExitUsage) << result.output;
  EXPECT_THAT(result.output, HasSubstr("apply to watch only"));
}

TEST_F(LedgerctlWatchTest, APositionTheServerNoLongerKeepsEndsItWithTheReason) {
  ASSERT_NO_FATAL_FAILURE(StartLedgerd({"--log_segment_mib=1"}));
  // About 3 MB of log: segments that a clean stop's checkpoint deletes.
  Subprocess load({testing_util::LoadtestPath(), "--target=" + ledgerd_->target(), "--requests=200",
                   "--batch=100", "--warmup=0s", "--mix=deposit=100", "--concurrency=4"});
  ASSERT_EQ(load.WaitForExit(std::chrono::seconds(120)), 0) << load.output();
  ASSERT_EQ(ledgerd_->Stop(), 0);
  ASSERT_TRUE(ledgerd_->Restart());
  const testing_util::LedgerctlResult result = Run({"watch", "--from=0"});
  EXPECT_EQ(result.exit_code, kExitRejected) << result.output;
  EXPECT_THAT(result.output, HasSubstr("OUT_OF_RANGE: the log after position 0 is no longer kept"));
  EXPECT_THAT(result.output, HasSubstr("watch stopped after position 0"));
}

}  // namespace
}  // namespace ledger
