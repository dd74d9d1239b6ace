#include "base/stable_hash.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ledger {
namespace {

TEST(Fnv1a64Test, MatchesPublishedTestVectors) {
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ULL);
}

TEST(JumpConsistentHashTest, OneBucketTakesEveryKey) {
  for (uint64_t key : {0ULL, 1ULL, 0xFFFFFFFFFFFFFFFFULL}) EXPECT_EQ(JumpConsistentHash(key, 1), 0);
}

// Pinned values, computed independently with a Python transcription of the paper's algorithm: if
// these change, every persisted shard layout and per-shard report changes.
TEST(ShardOfTest, IsPinnedAcrossBuilds) {
  EXPECT_EQ(ShardOf("alice", 2), 0);
  EXPECT_EQ(ShardOf("bob", 2), 0);
  EXPECT_EQ(ShardOf("erin", 2), 1);
  EXPECT_EQ(ShardOf("alice", 16), 4);
  EXPECT_EQ(ShardOf("bob", 16), 12);
}

TEST(ShardOfTest, SpreadsAccountsEvenly) {
  constexpr int kShards = 8;
  constexpr int kAccounts = 80'000;
  std::vector<int> counts(kShards, 0);
  for (int i = 0; i < kAccounts; ++i) ++counts[ShardOf(absl::StrCat("acct-", i), kShards)];
  for (int count : counts) {
    EXPECT_GT(count, kAccounts / kShards * 9 / 10);
    EXPECT_LT(count, kAccounts / kShards * 11 / 10);
  }
}

TEST(ShardOfTest, GrowingByOneShardMovesOnlyItsShareOfAccounts) {
  constexpr int kAccounts = 20'000;
  int moved = 0;
  for (int i = 0; i < kAccounts; ++i) {
    const std::string id = absl::StrCat("acct-", i);
    const int before = ShardOf(id, 4);
    const int after = ShardOf(id, 5);
    if (before != after) {
      ++moved;
      EXPECT_EQ(after, 4) << id;  // A moved account only ever moves to the new shard.
    }
  }
  EXPECT_GT(moved, kAccounts / 5 * 9 / 10);
  EXPECT_LT(moved, kAccounts / 5 * 11 / 10);
}

}  // namespace
}  // namespace ledger
