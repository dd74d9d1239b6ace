#include "client/workload.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ledger {
namespace {

TEST(ParseOperationMixTest, ReadsWeightsAndRefusesNonsense) {
  absl::StatusOr<OperationMix> mix = ParseOperationMix("deposit=70,withdraw=25,balance=5");
  ASSERT_TRUE(mix.ok());
  EXPECT_EQ(mix->deposit, 70);
  EXPECT_EQ(mix->withdraw, 25);
  EXPECT_EQ(mix->balance, 5);
  EXPECT_EQ(ParseOperationMix("deposit=1")->withdraw, 0);
  for (const char* bad : {"", "deposit=x", "deposit=-1", "transfer=5", "deposit=0,balance=0"}) {
    EXPECT_FALSE(ParseOperationMix(bad).ok()) << bad;
  }
}

TEST(AccountDistributionTest, ZipfConcentratesDrawsOnTheFirstAccounts) {
  constexpr size_t kAccounts = 1000;
  constexpr int kDraws = 100'000;
  auto uniform = AccountDistribution::Create("uniform", kAccounts);
  auto zipf = AccountDistribution::Create("zipf:1.2", kAccounts);
  ASSERT_TRUE(uniform.ok());
  ASSERT_TRUE(zipf.ok());
  std::mt19937_64 random(7);
  int uniform_hot = 0;
  int zipf_hot = 0;
  for (int i = 0; i < kDraws; ++i) {
    const size_t u = uniform->Next(random);
    const size_t z = zipf->Next(random);
    ASSERT_LT(u, kAccounts);
    ASSERT_LT(z, kAccounts);
    uniform_hot += u < 10;
    zipf_hot += z < 10;
  }
  EXPECT_NEAR(uniform_hot, kDraws / 100, kDraws / 300);  // 1% of accounts, ~1% of draws.
  EXPECT_GT(zipf_hot, kDraws / 2);                       // Zipf 1.2: most draws hit the top 10.
  for (const char* bad : {"zipf", "zipf:0", "zipf:-1", "zipf:x", "normal"}) {
    EXPECT_FALSE(AccountDistribution::Create(bad, kAccounts).ok()) << bad;
  }
  EXPECT_FALSE(AccountDistribution::Create("uniform", 0).ok());
}

TEST(WorkloadTest, FollowsTheMixAndTheAmountRange) {
  auto accounts = AccountDistribution::Create("uniform", 10);
  Workload workload(OperationMix{1, 0, 1}, &*accounts, 5, 9, 1);
  int deposits = 0;
  for (int i = 0; i < 10'000; ++i) {
    const PlannedCall call = workload.Next();
    ASSERT_NE(call.op, Op::kWithdraw);
    if (call.op == Op::kDeposit) {
      ++deposits;
      ASSERT_GE(call.amount, 5);
      ASSERT_LE(call.amount, 9);
    }
  }
  EXPECT_NEAR(deposits, 5000, 300);
}

}  // namespace
}  // namespace ledger
