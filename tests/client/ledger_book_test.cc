#include "client/ledger_book.h"

#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;

const std::vector<std::string> kNames = {"a", "b", "c"};

TEST(LedgerBookTest, ExactBalancesPassWhenNothingWasAmbiguous) {
  LedgerBook book(3);
  book.Record(0, Op::kDeposit, 100, grpc::StatusCode::OK);
  book.Record(0, Op::kWithdraw, 30, grpc::StatusCode::OK);
  book.Record(0, Op::kWithdraw, 500, grpc::StatusCode::FAILED_PRECONDITION);
  book.Record(1, Op::kDeposit, 7, grpc::StatusCode::RESOURCE_EXHAUSTED);  // Shed: not applied.
  book.Record(2, Op::kBalance, 0, grpc::StatusCode::OK);                  // Not recorded.
  const VerificationResult result = book.Verify({70, std::nullopt, std::nullopt}, kNames);
  EXPECT_TRUE(result.pass);
  EXPECT_EQ(result.accounts_checked, 2);
  EXPECT_EQ(result.balance_sum, 70);
  EXPECT_EQ(result.acknowledged_net, 70);
}

TEST(LedgerBookTest, ABalanceOffByOneFailsAndNamesTheAccount) {
  LedgerBook book(3);
  book.Record(0, Op::kDeposit, 100, grpc::StatusCode::OK);
  const VerificationResult result = book.Verify({101, std::nullopt, std::nullopt}, kNames);
  EXPECT_FALSE(result.pass);
  ASSERT_FALSE(result.mismatches.empty());
  EXPECT_THAT(result.mismatches[0], HasSubstr("a: server balance 101, expected 100"));
}

TEST(LedgerBookTest, AmbiguousCallsWidenTheAllowedRangeBothWays) {
  LedgerBook book(3);
  book.Record(0, Op::kDeposit, 100, grpc::StatusCode::OK);
  book.Record(0, Op::kDeposit, 50, grpc::StatusCode::DEADLINE_EXCEEDED);
  book.Record(0, Op::kWithdraw, 20, grpc::StatusCode::UNAVAILABLE);
  for (int64_t balance : {80, 100, 130, 150}) {
    EXPECT_TRUE(book.Verify({balance, std::nullopt, std::nullopt}, kNames).pass) << balance;
  }
  for (int64_t balance : {79, 151}) {
    EXPECT_FALSE(book.Verify({balance, std::nullopt, std::nullopt}, kNames).pass) << balance;
  }
}

TEST(LedgerBookTest, ResolvedAmbiguousCallsMakeVerificationExactAgain) {
  LedgerBook book(3);
  book.Record(0, Op::kDeposit, 100, grpc::StatusCode::OK);
  book.Record(0, Op::kDeposit, 50, grpc::StatusCode::DEADLINE_EXCEEDED);
  book.Record(0, Op::kWithdraw, 20, grpc::StatusCode::UNAVAILABLE);
  book.Resolve(0, Op::kDeposit, 50, /*applied=*/true);
  book.Resolve(0, Op::kWithdraw, 20, /*applied=*/false);
  const VerificationResult exact = book.Verify({150, std::nullopt, std::nullopt}, kNames);
  EXPECT_TRUE(exact.pass);
  EXPECT_EQ(exact.acknowledged_net, 150);
  EXPECT_EQ(exact.ambiguous_deposits, 0);
  EXPECT_EQ(exact.ambiguous_withdrawals, 0);
  // The range the ambiguity allowed (130 to 150) has closed to exactly 150.
  EXPECT_FALSE(book.Verify({130, std::nullopt, std::nullopt}, kNames).pass);
}

TEST(LedgerBookTest, MissingAccountCountsAsZero) {
  LedgerBook book(3);
  book.Record(1, Op::kWithdraw, 5, grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(book.Verify({std::nullopt, std::nullopt, std::nullopt}, kNames).pass);
  book.Record(1, Op::kDeposit, 5, grpc::StatusCode::OK);
  EXPECT_FALSE(book.Verify({std::nullopt, std::nullopt, std::nullopt}, kNames).pass);
}

TEST(EffectOfTest, ClassifiesEveryOutcomeTheContractNames) {
  EXPECT_EQ(EffectOf(Op::kDeposit, grpc::StatusCode::OK), Effect::kApplied);
  for (auto code : {grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::FAILED_PRECONDITION,
                    grpc::StatusCode::OUT_OF_RANGE, grpc::StatusCode::NOT_FOUND,
                    grpc::StatusCode::RESOURCE_EXHAUSTED, grpc::StatusCode::INTERNAL}) {
    EXPECT_EQ(EffectOf(Op::kWithdraw, code), Effect::kNotApplied) << code;
  }
  for (auto code : {grpc::StatusCode::DEADLINE_EXCEEDED, grpc::StatusCode::CANCELLED,
                    grpc::StatusCode::UNAVAILABLE}) {
    EXPECT_EQ(EffectOf(Op::kDeposit, code), Effect::kUnknown) << code;
  }
  EXPECT_EQ(EffectOf(Op::kBalance, grpc::StatusCode::OK), Effect::kNotApplied);
}

}  // namespace
}  // namespace ledger
