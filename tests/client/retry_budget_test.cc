#include "client/retry_budget.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ledger {
namespace {

// Offers a retry after every first attempt (every call shed): the worst case for an overload.
int RetriesGranted(RetryBudget& budget, int first_attempts) {
  int granted = 0;
  for (int i = 0; i < first_attempts; ++i) {
    budget.OnFirstAttempt();
    if (budget.TryRetry()) ++granted;
  }
  return granted;
}

TEST(RetryBudgetTest, RetriesAreCappedAtTheFractionOfFirstAttempts) {
  RetryBudget budget(0.1);
  EXPECT_EQ(RetriesGranted(budget, 1000), 100);
}

TEST(RetryBudgetTest, TheBucketStartsEmpty) {
  RetryBudget budget(0.1);
  EXPECT_FALSE(budget.TryRetry());
  for (int i = 0; i < 9; ++i) budget.OnFirstAttempt();
  EXPECT_FALSE(budget.TryRetry()) << "9 first attempts earn 0.9 tokens: no whole one";
  budget.OnFirstAttempt();
  EXPECT_TRUE(budget.TryRetry());
  EXPECT_FALSE(budget.TryRetry());
}

TEST(RetryBudgetTest, AZeroBudgetDeniesEveryRetry) {
  RetryBudget budget(0);
  EXPECT_EQ(RetriesGranted(budget, 1000), 0);
}

TEST(RetryBudgetTest, AfterACalmSpellABurstIsAtMostTheCap) {
  RetryBudget budget(0.5, /*max_tokens=*/10);
  for (int i = 0; i < 1000; ++i) budget.OnFirstAttempt();  // 500 earned, 10 kept.
  int burst = 0;
  while (budget.TryRetry()) ++burst;
  EXPECT_EQ(burst, 10);
}

TEST(RetryBudgetTest, ABudgetOfOneAllowsOneRetryPerFirstAttempt) {
  RetryBudget budget(1);
  EXPECT_EQ(RetriesGranted(budget, 50), 50);
  EXPECT_FALSE(budget.TryRetry());
}

TEST(RetryBudgetTest, ConcurrentCallersNeverGetMoreThanTheFraction) {
  RetryBudget budget(0.25);
  std::atomic<int> granted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] { granted += RetriesGranted(budget, 10000); });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_LE(granted.load(), 10000);  // 0.25 of 40,000 first attempts.
  while (budget.TryRetry()) granted.fetch_add(1);
  EXPECT_EQ(granted.load(), 10000) << "every earned token is spent exactly once";
}

}  // namespace
}  // namespace ledger
