// SimLog, the simulator's log, fails and recovers as LocalLog does: a failed append poisons it,
// Repair removes the failed entry for good, a restart keeps a whole one or drops a torn one, and
// DropBefore lets go of whole segments only; a lost leadership is the next leader's to decide.
#include "sim/sim_log.h"

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace ledger::sim {
namespace {

std::vector<std::pair<uint64_t, std::string>> Entries(const SimLog& log) {
  std::vector<std::pair<uint64_t, std::string>> entries;
  EXPECT_TRUE(log.ReadFrom(log.first_position(),
                           [&](uint64_t position, absl::string_view payload) {
                             entries.emplace_back(position, std::string(payload));
                             return absl::OkStatus();
                           })
                  .ok());
  return entries;
}

TEST(SimLogTest, AppendsAreNumberedFromOneAndReadBackInOrder) {
  std::mt19937_64 rng(1);
  SimLog log(&rng);
  EXPECT_EQ(log.last_position(), 0u);
  EXPECT_EQ(*log.Append("a"), 1u);
  EXPECT_EQ(*log.Append("bb"), 2u);
  EXPECT_EQ(log.last_position(), 2u);
  EXPECT_EQ(log.DiskBytes(), 3);
  const std::vector<std::pair<uint64_t, std::string>> expected = {{1, "a"}, {2, "bb"}};
  EXPECT_EQ(Entries(log), expected);
}

TEST(SimLogTest, AFailedAppendStopsWritesUntilRepairRemovesItsEntry) {
  std::mt19937_64 rng(1);
  SimLog log(&rng);
  ASSERT_TRUE(log.Append("a").ok());
  log.PlanAppend(AppendFault::kSyncFails);
  EXPECT_EQ(log.Append("lost").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(log.poisoned().code(), absl::StatusCode::kUnavailable);
  // Never retried as if it were safe: every append fails until the repair.
  EXPECT_EQ(log.Append("b").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(log.last_position(), 1u);
  ASSERT_TRUE(log.Repair().ok());
  EXPECT_TRUE(log.poisoned().ok());
  EXPECT_EQ(*log.Append("b"), 2u);
  // A restart after the repair finds nothing of the failed entry.
  const SimLogRecovery recovery = log.Reopen();
  EXPECT_FALSE(recovery.had_failed_entry);
  const std::vector<std::pair<uint64_t, std::string>> expected = {{1, "a"}, {2, "b"}};
  EXPECT_EQ(Entries(log), expected);
}

// A lost leadership (RaftLog) is no failure a repair can undo: the next leader commits the entry
// in flight or not. Repair refuses, every append fails until the restart, and the restart finds
// the entry committed (at the next position) or not, both as the seed falls.
TEST(SimLogTest, ALostLeadershipRefusesRepairAndTheRestartLearnsWhatTheNextLeaderDecided) {
  std::mt19937_64 rng(5);
  int committed = 0;
  int dropped = 0;
  for (int round = 0; round < 40; ++round) {
    SimLog log(&rng);
    ASSERT_TRUE(log.Append("a").ok());
    log.PlanAppend(AppendFault::kLeadershipLost);
    EXPECT_EQ(log.Append("sent").status().code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(log.Repair().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(log.poisoned().code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(log.Append("b").status().code(), absl::StatusCode::kUnavailable);
    const SimLogRecovery recovery = log.Reopen();
    EXPECT_TRUE(recovery.had_failed_entry);
    EXPECT_TRUE(recovery.leadership_lost);
    EXPECT_TRUE(log.poisoned().ok());
    if (recovery.kept) {
      ++committed;
      const std::vector<std::pair<uint64_t, std::string>> expected = {{1, "a"}, {2, "sent"}};
      EXPECT_EQ(Entries(log), expected);
    } else {
      ++dropped;
      EXPECT_EQ(log.last_position(), 1u);
    }
    // And it writes on after the restart.
    const uint64_t next = log.last_position() + 1;
    EXPECT_EQ(*log.Append("c"), next);
  }
  EXPECT_GT(committed, 0);
  EXPECT_GT(dropped, 0);
}

// Entries sent behind the lost one (a replica's writes in flight) are undecided with it: Raft
// commits in order, so the restart finds a prefix of them, never one without those before it.
TEST(SimLogTest, EntriesSentBehindALostLeadershipAreKeptAsAPrefix) {
  std::mt19937_64 rng(11);
  std::vector<int> prefixes(4, 0);
  for (int round = 0; round < 80; ++round) {
    SimLog log(&rng);
    ASSERT_TRUE(log.Append("a").ok());
    log.PlanAppend(AppendFault::kLeadershipLost);
    ASSERT_FALSE(log.Append("lost").ok());
    EXPECT_EQ(log.AppendBehindLostLeadership("behind-1").code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(log.AppendBehindLostLeadership("behind-2").code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(log.last_position(), 1u);  // Nothing is committed before the restart.
    const SimLogRecovery recovery = log.Reopen();
    EXPECT_TRUE(recovery.leadership_lost);
    EXPECT_EQ(recovery.undecided_entries, 3u);
    ASSERT_LE(recovery.kept_entries, 3u);
    EXPECT_EQ(recovery.kept, recovery.kept_entries > 0);
    std::vector<std::pair<uint64_t, std::string>> expected = {{1, "a"}};
    const std::vector<std::string> sent = {"lost", "behind-1", "behind-2"};
    for (size_t k = 0; k < recovery.kept_entries; ++k) expected.emplace_back(k + 2, sent[k]);
    EXPECT_EQ(Entries(log), expected);
    ++prefixes[recovery.kept_entries];
  }
  for (size_t kept = 0; kept < prefixes.size(); ++kept) EXPECT_GT(prefixes[kept], 0) << kept;
}

// After any other failure an entry behind it was never sent: nothing of it survives.
TEST(SimLogTest, AnEntryBehindAFailedWriteIsNeverKept) {
  std::mt19937_64 rng(2);
  SimLog log(&rng);
  log.PlanAppend(AppendFault::kWriteFails);
  ASSERT_FALSE(log.Append("torn").ok());
  EXPECT_FALSE(log.AppendBehindLostLeadership("behind").ok());
  const SimLogRecovery recovery = log.Reopen();
  EXPECT_EQ(recovery.undecided_entries, 1u);
  EXPECT_EQ(recovery.kept_entries, 0u);
  EXPECT_EQ(log.last_position(), 0u);
}

TEST(SimLogTest, ARestartKeepsAWholeFailedSyncOrDropsItTornButAlwaysDropsAFailedWrite) {
  std::mt19937_64 rng(3);
  int kept = 0;
  int torn = 0;
  for (int round = 0; round < 40; ++round) {
    SimLog log(&rng);
    ASSERT_TRUE(log.Append("a").ok());
    log.PlanAppend(AppendFault::kSyncFails);
    ASSERT_FALSE(log.Append("maybe").ok());
    const SimLogRecovery recovery = log.Reopen();
    EXPECT_TRUE(recovery.had_failed_entry);
    EXPECT_TRUE(log.poisoned().ok());
    if (recovery.kept) {
      ++kept;
      EXPECT_EQ(log.last_position(), 2u);
      EXPECT_EQ(Entries(log).back().second, "maybe");
    } else {
      ++torn;
      EXPECT_EQ(log.last_position(), 1u);
      EXPECT_GE(recovery.torn_bytes, 1);
      EXPECT_LE(recovery.torn_bytes, 5);
    }
    // A write that failed part way is never whole.
    log.PlanAppend(AppendFault::kWriteFails);
    ASSERT_FALSE(log.Append("never").ok());
    const uint64_t before = log.last_position();
    EXPECT_FALSE(log.Reopen().kept);
    EXPECT_EQ(log.last_position(), before);
  }
  EXPECT_EQ(kept + torn, 40);
  EXPECT_GT(kept, 0);
  EXPECT_GT(torn, 0);
}

TEST(SimLogTest, DropBeforeLetsGoOfWholeSegmentsBehindTheOneAppendedTo) {
  std::mt19937_64 rng(1);
  SimLog log(&rng);
  for (int i = 1; i <= 20; ++i) ASSERT_TRUE(log.Append(std::to_string(i)).ok());
  // Segments of 8: [1, 8], [9, 16], [17, 24] (appended to).
  EXPECT_EQ(log.SegmentCount(), 3u);
  EXPECT_EQ(*log.DropBefore(12), 1);  // [9, 16] still holds 12 and later.
  EXPECT_EQ(log.first_position(), 9u);
  EXPECT_EQ(*log.DropBefore(100), 1);  // Never the segment appended to.
  EXPECT_EQ(log.first_position(), 17u);
  EXPECT_EQ(log.last_position(), 20u);
  EXPECT_EQ(Entries(log).front(), (std::pair<uint64_t, std::string>{17, "17"}));
  EXPECT_EQ(log.SegmentCount(), 1u);
}

TEST(SimLogTest, ARepairThatKeepsTheFailedEntryIsTheBugItIsPlantedAs) {
  std::mt19937_64 rng(1);
  SimLog log(&rng, SimLogBugForTesting::kRepairKeepsTheFailedEntry);
  log.PlanAppend(AppendFault::kWriteFails);
  ASSERT_FALSE(log.Append("failed").ok());
  ASSERT_TRUE(log.Repair().ok());
  EXPECT_EQ(*log.Append("next"), 2u);
  EXPECT_EQ(Entries(log).front().second, "failed");
}

}  // namespace
}  // namespace ledger::sim
