#include "client/workload.h"

#include <random>
#include <string>
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
  EXPECT_EQ(mix->transfer, 0);
  EXPECT_EQ(ParseOperationMix("deposit=1")->withdraw, 0);
  for (const char* bad : {"", "deposit=x", "deposit=-1", "transfer=-5", "transfers=5",
                          "deposit=0,balance=0,transfer=0", "deposit=2147483647,transfer=1"}) {
    EXPECT_FALSE(ParseOperationMix(bad).ok()) << bad;
  }
}

TEST(ParseOperationMixTest, ReadsATransferWeight) {
  absl::StatusOr<OperationMix> mix = ParseOperationMix("deposit=4,withdraw=3,balance=2,transfer=1");
  ASSERT_TRUE(mix.ok()) << mix.status();
  EXPECT_EQ(mix->deposit, 4);
  EXPECT_EQ(mix->withdraw, 3);
  EXPECT_EQ(mix->balance, 2);
  EXPECT_EQ(mix->transfer, 1);
  EXPECT_EQ(mix->total(), 10);
  absl::StatusOr<OperationMix> only = ParseOperationMix("transfer=1");
  ASSERT_TRUE(only.ok());
  EXPECT_EQ(only->total(), 1);
}

TEST(ParseTransferScopeTest, ReadsTheThreeScopesAndRefusesOthers) {
  EXPECT_EQ(*ParseTransferScope("any"), TransferScope::kAny);
  EXPECT_EQ(*ParseTransferScope("same_shard"), TransferScope::kSameShard);
  EXPECT_EQ(*ParseTransferScope("cross_shard"), TransferScope::kCrossShard);
  for (const char* bad : {"", "same", "cross-shard", "ANY"}) {
    EXPECT_FALSE(ParseTransferScope(bad).ok()) << bad;
  }
}

// Accounts 0..5 on shards 0, 1, 0, 1, 2, 0.
const std::vector<int32_t> kShardOf = {0, 1, 0, 1, 2, 0};

TEST(TransferPartnersTest, RefusesAScopeNoAccountCanSatisfy) {
  EXPECT_FALSE(TransferPartners::Create(TransferScope::kAny, 1, {}).ok());
  EXPECT_TRUE(TransferPartners::Create(TransferScope::kAny, 2, {}).ok());
  // same_shard and cross_shard need to know the shards.
  EXPECT_FALSE(TransferPartners::Create(TransferScope::kSameShard, 6, {}).ok());
  EXPECT_FALSE(TransferPartners::Create(TransferScope::kCrossShard, 6, {}).ok());
  // Three accounts on three shards: none shares one.
  EXPECT_FALSE(TransferPartners::Create(TransferScope::kSameShard, 3, {0, 1, 2}).ok());
  // All on one shard: none crosses.
  EXPECT_FALSE(TransferPartners::Create(TransferScope::kCrossShard, 3, {0, 0, 0}).ok());
  EXPECT_TRUE(TransferPartners::Create(TransferScope::kSameShard, 6, kShardOf).ok());
  EXPECT_TRUE(TransferPartners::Create(TransferScope::kCrossShard, 6, kShardOf).ok());
}

// Draws many transfers and returns how many were in scope and never to their own source.
int TransfersInScope(TransferScope scope, const std::string& distribution, int draws) {
  auto accounts = AccountDistribution::Create(distribution, kShardOf.size());
  auto partners = TransferPartners::Create(scope, kShardOf.size(), kShardOf);
  EXPECT_TRUE(partners.ok()) << partners.status();
  Workload workload(OperationMix{0, 0, 0, 1}, &*accounts, 1, 10, 3, &*partners);
  int in_scope = 0;
  for (int i = 0; i < draws; ++i) {
    const PlannedCall call = workload.Next();
    EXPECT_EQ(call.op, CallKind::kTransfer);
    EXPECT_GE(call.amount, 1);
    EXPECT_LE(call.amount, 10);
    EXPECT_LT(call.to_account, kShardOf.size());
    const bool same = kShardOf[call.account] == kShardOf[call.to_account];
    in_scope += call.account != call.to_account &&
                (scope == TransferScope::kAny || (scope == TransferScope::kSameShard) == same);
  }
  return in_scope;
}

TEST(WorkloadTransferTest, EveryTransferHasTwoAccountsInItsScope) {
  constexpr int kDraws = 5000;
  for (const char* distribution : {"uniform", "zipf:3"}) {
    SCOPED_TRACE(distribution);
    EXPECT_EQ(TransfersInScope(TransferScope::kAny, distribution, kDraws), kDraws);
    EXPECT_EQ(TransfersInScope(TransferScope::kSameShard, distribution, kDraws), kDraws);
    EXPECT_EQ(TransfersInScope(TransferScope::kCrossShard, distribution, kDraws), kDraws);
  }
}

TEST(WorkloadTransferTest, ASourceWithoutAPartnerIsReplacedByOneThatHasOne) {
  // Account 4 is alone on shard 2: a same-shard transfer can never start from it.
  auto partners = TransferPartners::Create(TransferScope::kSameShard, 6, kShardOf);
  ASSERT_TRUE(partners.ok());
  EXPECT_FALSE(partners->HasPartner(4));
  EXPECT_TRUE(partners->HasPartner(1));
  std::mt19937_64 random(5);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_NE(partners->AnySource(random), 4u);
    ASSERT_EQ(partners->AnyPartner(1, random), 3u);  // Shard 1's other account.
    const size_t partner = partners->AnyPartner(0, random);
    ASSERT_TRUE(partner == 2 || partner == 5) << partner;
  }
}

TEST(WorkloadTransferTest, TheMixSetsTheShareOfTransfers) {
  auto accounts = AccountDistribution::Create("uniform", 10);
  auto partners = TransferPartners::Create(TransferScope::kAny, 10, {});
  Workload workload(OperationMix{1, 0, 0, 1}, &*accounts, 1, 1, 9, &*partners);
  int transfers = 0;
  for (int i = 0; i < 10'000; ++i) transfers += workload.Next().op == CallKind::kTransfer;
  EXPECT_NEAR(transfers, 5000, 300);
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
    ASSERT_NE(call.op, CallKind::kWithdraw);
    if (call.op == CallKind::kDeposit) {
      ++deposits;
      ASSERT_GE(call.amount, 5);
      ASSERT_LE(call.amount, 9);
    }
  }
  EXPECT_NEAR(deposits, 5000, 300);
}

}  // namespace
}  // namespace ledger
