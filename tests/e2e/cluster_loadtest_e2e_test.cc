// ledger-loadtest in front of three ledgerd replicas (--target naming all three):
//  - the leader is killed (SIGKILL) two seconds into the run and started again two seconds
//    later, as a follower;
//  - or it is paused (SIGSTOP), which keeps its connections up while it answers nothing, under
//    an open loop with the adaptive throttle on.
// The load test leaves it for the others, follows the NOT_LEADER refusals to the new leader,
// keeps acknowledging operations after the failover, settles the calls the fault left unknown,
// and verifies every balance from the new leader: no money lost or invented.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/loadtest_report.pb.h"
#include "gtest/gtest.h"
#include "tests/e2e/ledgerd_cluster.h"
#include "tests/e2e/loadtest_report.h"
#include "tests/e2e/subprocess.h"
#include "tests/test_paths.h"

namespace ledger {
namespace {

using testing_util::LedgerdCluster;
using testing_util::Subprocess;

// The run's timeline: the kill, then the restart, each this long after the previous event (the
// load test's start, then the kill), within a measured run of kRunSeconds.
constexpr auto kBeforeKill = std::chrono::seconds(2);
constexpr auto kKilledFor = std::chrono::seconds(2);
constexpr int kRunSeconds = 7;

void PrintFailover(const loadtest::Report& report, const std::string& output);

// The OK operations of seconds [first, last) of the report's timeline.
long long OkBetween(const loadtest::Report& report, int first, int last) {
  long long total = 0;
  for (int i = first; i < last && i < report.ok_by_second_size(); ++i) {
    total += report.ok_by_second(i);
  }
  return total;
}

// Where the load test writes its report; removed with the test.
struct ReportFile {
  ~ReportFile() { std::filesystem::remove(path); }
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("cluster-loadtest-" + std::to_string(getpid()) + ".json"))
                               .string();
};

class ClusterLoadtestTest : public ::testing::Test, protected LedgerdCluster {
 protected:
  ReportFile report_file_;
  const std::string& json_path_ = report_file_.path;
};

// The leader keeps 1 (the default) or 3 group commits in flight (--raft_writes_in_flight): the
// writes in flight at the kill are outcome unknown, and are settled like any other.
class ClusterLoadtestKillTest : public ::testing::TestWithParam<int>, protected LedgerdCluster {
 protected:
  ClusterLoadtestKillTest()
      // Each replica checkpoints on its own schedule: without retention, the new leader may have
      // deleted the segment holding the watcher's last position (seen in CI: 1881 processed,
      // 1895 the oldest kept), which is the documented POSITION_NOT_KEPT, not what this tests.
      : LedgerdCluster({.flags = {absl::StrCat("--raft_writes_in_flight=", GetParam()),
                                  "--watch_retention=256MiB"}}) {}

  ReportFile report_file_;
  const std::string& json_path_ = report_file_.path;
};
INSTANTIATE_TEST_SUITE_P(WritesInFlight, ClusterLoadtestKillTest, ::testing::Values(1, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat(info.param, "InFlight");
                         });

TEST_P(ClusterLoadtestKillTest, ALeaderKilledMidRunIsFollowedAndNoMoneyIsLostOrInvented) {
  ASSERT_NO_FATAL_FAILURE(StartAll());
  const int old_leader = WaitForServing();
  ASSERT_GE(old_leader, 0);
  Subprocess loadtest({testing_util::LoadtestPath(), "--target=" + Targets(),
                       "--json_file=" + json_path_, "--server_shards=2", "--warmup=0s",
                       "--duration=" + std::to_string(kRunSeconds) + "s", "--concurrency=16",
                       "--channels=2", "--accounts=200", "--deadline=2s", "--progress",
                       "--mix=deposit=5,withdraw=3,balance=1,transfer=1", "--watch"});
  std::this_thread::sleep_for(kBeforeKill);
  node(old_leader).Kill();
  std::this_thread::sleep_for(kKilledFor);
  ASSERT_TRUE(node(old_leader).Restart());
  const int exit_code = loadtest.WaitForExit(std::chrono::seconds(60)).value_or(-1);
  const std::string output = loadtest.output();
  ASSERT_EQ(exit_code, 0) << output;
  const loadtest::Report report = testing_util::ReadLoadtestReport(json_path_);

  // Exact: every acknowledged operation is in the balances read from the leader, and every
  // operation the kill left unknown was settled.
  testing_util::ExpectVerifiedExactly(report, output);
  // Served before the kill, and again after the failover (the last seconds of the run).
  ASSERT_GE(report.ok_by_second_size(), kRunSeconds - 1) << output;
  EXPECT_GT(OkBetween(report, 0, 2), 0) << output;
  EXPECT_GT(OkBetween(report, kRunSeconds - 2, kRunSeconds + 1), 0) << output;
  // The killed leader's followers refused until they knew the new leader (or the run started on
  // a follower): each refusal was followed, and none was an error.
  EXPECT_GT(report.leader().refusals(), 0) << output;
  EXPECT_GT(report.leader().followed(), 0) << output;
  EXPECT_EQ(report.codes().count("INTERNAL"), 0) << output;
  // The verification read from the leader: the one that serves now, not the one killed.
  const int leader = WaitForServing();
  ASSERT_GE(leader, 0);
  EXPECT_NE(leader, old_leader);
  EXPECT_EQ(report.leader().address(), Address(leader)) << output;
  // The Watch stream followed the leader too: opened again at the new one from the last position
  // it had processed (positions are Raft's indexes, the same on every replica), and the balances
  // rebuilt from it equal those read.
  EXPECT_EQ(report.watch().verdict(), "PASS") << report.watch().note() << "\n" << output;
  EXPECT_GE(report.watch().reconnects(), 1) << output;
  EXPECT_GT(report.watch().events(), 0) << output;

  PrintFailover(report, output);
}

// Paused, the leader answers nothing on connections that stay up: every call there waits out its
// deadline. The load test must leave it (a deadline while the server answered nothing is no
// server), and its adaptive throttle must not count those calls as the server refusing load, or
// it would go on refusing most of its own calls long after the new leader serves.
TEST_F(ClusterLoadtestTest, ALeaderPausedMidRunIsLeftAndTheOfferedRateIsServedAgain) {
  constexpr int kRate = 300;
  constexpr int kPausedRunSeconds = 12;
  ASSERT_NO_FATAL_FAILURE(StartAll());
  const int old_leader = WaitForServing();
  ASSERT_GE(old_leader, 0);
  Subprocess loadtest(
      {testing_util::LoadtestPath(), "--target=" + Targets(), "--json_file=" + json_path_,
       "--server_shards=2", "--warmup=0s", "--duration=" + std::to_string(kPausedRunSeconds) + "s",
       absl::StrCat("--rate=", kRate), "--concurrency=8", "--channels=2", "--accounts=200",
       "--deadline=1s", "--progress", "--mix=deposit=5,withdraw=3,balance=1,transfer=1"});
  std::this_thread::sleep_for(kBeforeKill);
  node(old_leader).Signal(SIGSTOP);
  const int exit_code = loadtest.WaitForExit(std::chrono::seconds(90)).value_or(-1);
  node(old_leader).Signal(SIGCONT);
  const std::string output = loadtest.output();
  ASSERT_EQ(exit_code, 0) << output;
  const loadtest::Report report = testing_util::ReadLoadtestReport(json_path_);
  testing_util::ExpectVerifiedExactly(report, output);
  ASSERT_GE(report.ok_by_second_size(), kPausedRunSeconds - 1) << output;
  EXPECT_GT(OkBetween(report, 0, 2), 0) << output;
  // The last four seconds, well after the failover (about a second): at least half the offered
  // rate answered OK (about 80% of the calls are writes that succeed; the rest may be refused
  // for an overdraft or a missing account).
  EXPECT_GE(OkBetween(report, kPausedRunSeconds - 4, kPausedRunSeconds), kRate * 4 / 2) << output;
  PrintFailover(report, output);
}

void PrintFailover(const loadtest::Report& report, const std::string& output) {
  std::cout << "failover: longest time without an OK operation " << report.longest_ok_gap_ms()
            << " ms (until " << report.longest_ok_gap_end_s() << " s); NOT_LEADER refusals "
            << report.leader().refusals() << ", followed " << report.leader().followed()
            << ", calls ended NOT_LEADER " << report.leader().calls() << "; ambiguous "
            << report.ambiguous().calls() << "; OK by second:";
  for (const int64_t ok : report.ok_by_second()) std::cout << " " << ok;
  std::cout << "\n" << output << "\n";
}

}  // namespace
}  // namespace ledger
