// A follower whose filesystem fills while the cluster takes writes (issue 32's fault suite): the
// leader and the other follower, a majority, go on acknowledging; the full one finds it cannot
// write its Raft log (libraft would never write those entries again), waits for room, restarts,
// takes the leader's state, catches up, and every replica ends with the same log. Each replica's
// data directory (its RocksDB store, its mirror of committed entries and libraft's log) is a tmpfs
// of its own, mounted as root.
#include <sys/mount.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
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
#include "tests/wait_until.h"

namespace ledger {
namespace {

using testing_util::LedgerdCluster;
using testing_util::Subprocess;
using testing_util::WaitUntil;

// Three replicas, each with its data directory on a tmpfs of its own.
class ClusterDiskTest : public ::testing::Test, protected LedgerdCluster {
 protected:
  explicit ClusterDiskTest(const std::vector<std::string>& flags)
      : LedgerdCluster({.flags = flags}) {}
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a tmpfs for each replica";
    // Each data directory, made by `ledgerd init`, moved onto a tmpfs of its own.
    for (int i = 0; i < 3; ++i) {
      const std::string dir = node(i).data_dir();
      const std::string made = dir + ".made";
      std::filesystem::rename(dir, made);
      std::filesystem::create_directories(dir);
      ASSERT_EQ(std::system(("mount -t tmpfs -o size=512m tmpfs " + dir).c_str()), 0);
      mounted_[i] = true;
      std::filesystem::copy(made, dir, std::filesystem::copy_options::recursive);
    }
    ASSERT_NO_FATAL_FAILURE(StartAll());
  }
  void TearDown() override {
    // Stopped first: a mount in use cannot go.
    for (int i = 0; i < 3; ++i) {
      if (node(i).running()) node(i).Stop();
      if (mounted_[i]) {
        EXPECT_EQ(umount2(node(i).data_dir().c_str(), MNT_DETACH), 0);
      }
    }
  }

  // Fills replica i's filesystem to the last byte. Appends to the fillers of an earlier call:
  // rewriting them would free their room for a moment, and a replica waiting for room would
  // see it (and start again on a disk full by the time it opens its log).
  void FillDisk(int i) {
    const int ignored =
        std::system(("dd if=/dev/zero of=" + Filler(i) +
                     " bs=1M oflag=append conv=notrunc 2>/dev/null; "
                     "dd if=/dev/zero of=" +
                     Filler(i) + ".tail bs=4k oflag=append conv=notrunc 2>/dev/null")
                        .c_str());
    (void)ignored;  // dd fails once the disk is full, which is the point.
    const std::filesystem::space_info space = std::filesystem::space(node(i).data_dir());
    ASSERT_LT(space.available, 8192u);
  }
  void FreeDisk(int i) {
    std::filesystem::remove(Filler(i));
    std::filesystem::remove(Filler(i) + ".tail");
  }
  std::string Filler(int i) { return node(i).data_dir() + "/filler"; }

  std::array<bool, 3> mounted_{};
  const std::string json_path_ = (std::filesystem::temp_directory_path() /
                                  ("cluster-disk-" + std::to_string(getpid()) + ".json"))
                                     .string();
};

// libraft's snapshots as configured by default (every 65,536 entries or 64 MiB): a snapshot
// removes the segments it covers, and with one every few entries a full follower would free
// room as fast as it filled it.
class ClusterFullDiskTest : public ClusterDiskTest {
 protected:
  // libraft's segments of 8 MiB (its own default): with ledgerd's 64 MiB, the two it prepares
  // ahead before the disk fills would hold more than these runs write.
  ClusterFullDiskTest() : ClusterDiskTest({"--log_segment_mib=8"}) {}
};

TEST_F(ClusterFullDiskTest, AFollowerWhoseDiskFillsCatchesUpOnceThereIsRoomAgain) {
  const int leader = WaitForServing();
  ASSERT_GE(leader, 0);
  const int full = (leader + 1) % 3;
  ASSERT_NO_FATAL_FAILURE(FillDisk(full));
  const std::optional<double> filled_at = LogPosition(full);
  ASSERT_TRUE(filled_at.has_value());

  // Runs of 8 s of Apply calls of 500 operations, each verified exactly, until a write of its
  // Raft log fails: tens of MiB of entries, past the segments libraft set aside before the disk
  // filled (one run in a plain build; a sanitizer's is slower). When varies: the follower frees
  // some room as it goes, removing what its snapshots cover.
  bool write_failed = false;
  for (int run = 0; run < 8 && !write_failed; ++run) {
    Subprocess loadtest({testing_util::LoadtestPath(), "--target=" + Targets(),
                         "--json_file=" + json_path_, "--server_shards=2", "--warmup=0s",
                         "--duration=8s", "--concurrency=4", "--batch=500", "--accounts=200",
                         "--deadline=5s", "--mix=deposit=5,withdraw=3,transfer=1"});
    const int exit_code = loadtest.WaitForExit(std::chrono::seconds(90)).value_or(-1);
    const std::string output = loadtest.output();
    ASSERT_EQ(exit_code, 0) << output;
    const loadtest::Report report = testing_util::ReadLoadtestReport(json_path_);
    testing_util::ExpectVerifiedExactly(report, output);
    std::filesystem::remove(json_path_);
    write_failed = node(full).WaitForLog("could not write its Raft log", std::chrono::seconds(2));
  }
  ASSERT_TRUE(write_failed) << node(full).log();
  ASSERT_TRUE(node(full).WaitForLog("waits for room to restart")) << node(full).log();
  // The leader and the other follower go on without it.
  ASSERT_NO_FATAL_FAILURE(FillDisk(full));
  for (int n = 0; n < 200; ++n) {
    v1::DepositResponse response;
    ASSERT_TRUE(Deposit(leader, "full", 1, absl::StrCat("full-", n), &response).ok()) << n;
    ASSERT_EQ(response.balance(), n + 1);
  }
  const std::optional<double> newest = LogPosition(leader);
  ASSERT_TRUE(newest.has_value());

  FreeDisk(full);
  EXPECT_TRUE(WaitUntil([&] { return LogPosition(full).value_or(0) >= *newest; },
                        "the follower catches up once there is room"))
      << node(full).log();
  // It restarted once there was room (from its own log, or from the leader's state when it had
  // fallen behind the leader's snapshot); the log it took may end where that state does, so a
  // few more writes give every replica's log entries to compare.
  EXPECT_TRUE(node(full).WaitForLog("has room again")) << node(full).log();
  for (int n = 0; n < 3; ++n) DepositOnLeader("after", 1, absl::StrCat("after-", n));
  StopAllAndExpectEqualLogs();
}

// Snapshots every 16 entries (libraft keeps 128 behind one), so that a follower down for 200
// deposits is behind the leader's log.
class ClusterMountPointTest : public ClusterDiskTest {
 protected:
  ClusterMountPointTest() : ClusterDiskTest({"--raft_snapshot_entries=16"}) {}
};

// A data directory that is a mount point cannot be renamed, nor can anything be renamed out of
// it: the leader's state is fetched and swapped in inside it (storage/data_directory_swap.h).
TEST_F(ClusterMountPointTest, AFollowerWhoseDataDirectoryIsAMountPointTakesTheLeadersState) {
  EXPECT_EQ(DepositOnLeader("gus", 1, "g-0"), 1);
  const int leader = WaitForServing();
  ASSERT_GE(leader, 0);
  const int behind = (leader + 1) % 3;
  // The leader reaches the follower that stays (just after the start it may have heard from
  // one only): the two are a majority without the one killed.
  const std::optional<double> first = LogPosition(leader);
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(WaitUntil(
      [&] { return LogPosition(0) >= first && LogPosition(1) >= first && LogPosition(2) >= first; },
      "every replica holds the first deposit"));
  node(behind).Kill();
  for (int n = 1; n <= 200; ++n) DepositOnLeader("gus", 1, absl::StrCat("g-", n));
  ASSERT_TRUE(node(behind).Restart());
  EXPECT_TRUE(node(behind).WaitForLog("the leader's state is now")) << node(behind).log();
  const std::optional<double> newest = LogPosition(leader);
  ASSERT_TRUE(newest.has_value());
  EXPECT_TRUE(WaitUntil([&] { return LogPosition(behind).value_or(0) >= *newest; },
                        "the follower catches up"))
      << node(behind).log();
  // Nothing of the swap is left behind in it.
  for (const char* left : {"state_transfer", "swap_ready", "swap_moving", "swap_replaced"}) {
    EXPECT_FALSE(std::filesystem::exists(node(behind).data_dir() + "/" + left)) << left;
  }
  EXPECT_EQ(DepositOnLeader("gus", 1, "g-201"), 202);
  StopAllAndExpectEqualLogs();
}

}  // namespace
}  // namespace ledger
