// ConcurrencyLimit: AIMD on the calls a client keeps open.
#include "client/concurrency_limit.h"

#include "gtest/gtest.h"

namespace ledger {
namespace {

TEST(ConcurrencyLimitTest, StartsAtTheMaximumAndStaysThereWhileAccepted) {
  ConcurrencyLimit limit(/*min=*/1, /*max=*/400);
  for (int i = 0; i < 10'000; ++i) limit.OnAnswer(true);
  EXPECT_EQ(limit.limit(), 400);
  EXPECT_TRUE(limit.Allows(399));
  EXPECT_FALSE(limit.Allows(400));
}

TEST(ConcurrencyLimitTest, ARefusalCutsOnceARoundTripNotOncePerRefusal) {
  ConcurrencyLimit limit(1, 400, 0.9);
  limit.OnAnswer(false);
  EXPECT_DOUBLE_EQ(limit.limit(), 360);
  // The refusals of calls sent under the old limit: no further cut for ~360 answers.
  for (int i = 0; i < 300; ++i) limit.OnAnswer(false);
  EXPECT_DOUBLE_EQ(limit.limit(), 360);
  for (int i = 0; i < 60; ++i) limit.OnAnswer(false);
  EXPECT_DOUBLE_EQ(limit.limit(), 324);
}

TEST(ConcurrencyLimitTest, GrowsBackByAboutOnePerRoundTripOfAcceptedAnswers) {
  ConcurrencyLimit limit(1, 400, 0.5);
  limit.OnAnswer(false);
  ASSERT_DOUBLE_EQ(limit.limit(), 200);
  for (int i = 0; i < 200; ++i) limit.OnAnswer(true);  // One round trip at 200 open.
  EXPECT_NEAR(limit.limit(), 201, 0.01);
}

TEST(ConcurrencyLimitTest, NeverBelowTheMinimum) {
  ConcurrencyLimit limit(8, 400, 0.5);
  for (int i = 0; i < 100'000; ++i) limit.OnAnswer(false);
  EXPECT_EQ(limit.limit(), 8);
  EXPECT_TRUE(limit.Allows(7));
}

}  // namespace
}  // namespace ledger
