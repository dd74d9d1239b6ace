// CatchUpWindow (storage/raft_catch_up.h): the fixed count behind a snapshot, more for a
// follower being caught up while its entries fit the byte budget, and only what it still needs
// remembered.
#include "storage/raft_catch_up.h"

#include "gtest/gtest.h"

namespace ledger::storage {
namespace {

TEST(CatchUpWindowTest, WithNoFollowerBeingCaughtUpItKeepsTheFixedCount) {
  CatchUpWindow window(/*floor=*/4, /*max_bytes=*/1000);
  for (uint64_t p = 1; p <= 100; ++p) window.Committed(p, 10);
  EXPECT_EQ(window.TrailingFor(100, std::nullopt), 4u);
  // Only what the kept entries need is remembered: positions 97 to 100.
  EXPECT_EQ(window.remembered(), 4u);
}

TEST(CatchUpWindowTest, AFollowerBeingCaughtUpKeepsEveryEntryFromItsLastOne) {
  CatchUpWindow window(/*floor=*/4, /*max_bytes=*/1000);
  for (uint64_t p = 1; p <= 100; ++p) window.Committed(p, 10);
  // It holds 60: libraft keeps 60 to 100 (41 entries, 400 bytes after 60), so it sends 61 on
  // with 60's term.
  EXPECT_EQ(window.TrailingFor(100, 60), 41u);
  for (uint64_t p = 101; p <= 150; ++p) window.Committed(p, 10);
  EXPECT_EQ(window.TrailingFor(150, 60), 91u);
  // Caught up within the fixed count: back to it.
  EXPECT_EQ(window.TrailingFor(150, 148), 4u);
}

TEST(CatchUpWindowTest, BeyondTheByteBudgetTheFollowerIsLetGoAndForgotten) {
  CatchUpWindow window(/*floor=*/4, /*max_bytes=*/1000);
  for (uint64_t p = 1; p <= 100; ++p) window.Committed(p, 10);
  EXPECT_EQ(window.TrailingFor(100, 1), 100u);  // 990 bytes after position 1: within.
  window.Committed(101, 500);
  EXPECT_EQ(window.TrailingFor(101, 1), 4u);  // 1,490 bytes: beyond.
  // Forgotten: asked again for the same follower, nothing is known that far back.
  EXPECT_EQ(window.TrailingFor(101, 50), 4u);
  EXPECT_EQ(window.remembered(), 4u);
}

TEST(CatchUpWindowTest, RaftsOwnEntriesAndReplaysCountNothing) {
  CatchUpWindow window(/*floor=*/2, /*max_bytes=*/100);
  window.Committed(10, 30);  // The window starts here: 9 and before are unknown.
  window.Committed(12, 30);  // 11 was Raft's own (no payload).
  window.Committed(12, 30);  // A replay: ignored.
  window.Committed(11, 30);  // Older: ignored.
  window.Committed(13, 30);
  EXPECT_EQ(window.TrailingFor(13, 10), 4u);  // 90 bytes after 9: 10 to 13 kept.
  CatchUpWindow fresh(/*floor=*/2, /*max_bytes=*/100);
  fresh.Committed(10, 30);
  fresh.Committed(13, 30);
  EXPECT_EQ(fresh.TrailingFor(13, 5), 2u);  // From before the window began: unknown.
}

TEST(CatchUpWindowTest, BeforeAnyCommitItKeepsTheFixedCount) {
  CatchUpWindow window(/*floor=*/128, /*max_bytes=*/100);
  EXPECT_EQ(window.TrailingFor(1000, 10), 128u);
  EXPECT_EQ(window.TrailingFor(50, std::nullopt), 128u);
}

}  // namespace
}  // namespace ledger::storage
