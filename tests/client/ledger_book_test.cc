#include "client/ledger_book.h"

#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;

const std::vector<std::string> kBookAccounts = {"a", "b", "c"};

TEST(LedgerBookTest, ExactBalancesPassWhenNothingWasAmbiguous) {
  LedgerBook book(3);
  book.Record(0, CallKind::kDeposit, 100, CallEffect::kApplied);
  book.Record(0, CallKind::kWithdraw, 30, CallEffect::kApplied);
  book.Record(0, CallKind::kWithdraw, 500, CallEffect::kNotApplied);
  book.Record(1, CallKind::kDeposit, 7,
              CallEffect::kNotApplied);                         // Shed: not applied.
  book.Record(2, CallKind::kBalance, 0, CallEffect::kApplied);  // Not recorded.
  const VerificationResult result = book.Verify({70, std::nullopt, std::nullopt}, kBookAccounts);
  EXPECT_TRUE(result.pass);
  EXPECT_EQ(result.accounts_checked, 2);
  EXPECT_EQ(result.balance_sum, 70);
  EXPECT_EQ(result.acknowledged_net, 70);
}

TEST(LedgerBookTest, ABalanceOffByOneFailsAndNamesTheAccount) {
  LedgerBook book(3);
  book.Record(0, CallKind::kDeposit, 100, CallEffect::kApplied);
  const VerificationResult result = book.Verify({101, std::nullopt, std::nullopt}, kBookAccounts);
  EXPECT_FALSE(result.pass);
  ASSERT_FALSE(result.mismatches.empty());
  EXPECT_THAT(result.mismatches[0], HasSubstr("a: server balance 101, expected 100"));
}

TEST(LedgerBookTest, AmbiguousCallsWidenTheAllowedRangeBothWays) {
  LedgerBook book(3);
  book.Record(0, CallKind::kDeposit, 100, CallEffect::kApplied);
  book.Record(0, CallKind::kDeposit, 50, CallEffect::kUnknown);
  book.Record(0, CallKind::kWithdraw, 20, CallEffect::kUnknown);
  for (int64_t balance : {80, 100, 130, 150}) {
    EXPECT_TRUE(book.Verify({balance, std::nullopt, std::nullopt}, kBookAccounts).pass) << balance;
  }
  for (int64_t balance : {79, 151}) {
    EXPECT_FALSE(book.Verify({balance, std::nullopt, std::nullopt}, kBookAccounts).pass) << balance;
  }
}

TEST(LedgerBookTest, ResolvedAmbiguousCallsMakeVerificationExactAgain) {
  LedgerBook book(3);
  book.Record(0, CallKind::kDeposit, 100, CallEffect::kApplied);
  book.Record(0, CallKind::kDeposit, 50, CallEffect::kUnknown);
  book.Record(0, CallKind::kWithdraw, 20, CallEffect::kUnknown);
  book.Resolve(0, CallKind::kDeposit, 50, /*applied=*/true);
  book.Resolve(0, CallKind::kWithdraw, 20, /*applied=*/false);
  const VerificationResult exact = book.Verify({150, std::nullopt, std::nullopt}, kBookAccounts);
  EXPECT_TRUE(exact.pass);
  EXPECT_EQ(exact.acknowledged_net, 150);
  EXPECT_EQ(exact.ambiguous_deposits, 0);
  EXPECT_EQ(exact.ambiguous_withdrawals, 0);
  // The range the ambiguity allowed (130 to 150) has closed to exactly 150.
  EXPECT_FALSE(book.Verify({130, std::nullopt, std::nullopt}, kBookAccounts).pass);
}

TEST(LedgerBookTest, MissingAccountCountsAsZero) {
  LedgerBook book(3);
  book.Record(1, CallKind::kWithdraw, 5, CallEffect::kNotApplied);
  EXPECT_TRUE(book.Verify({std::nullopt, std::nullopt, std::nullopt}, kBookAccounts).pass);
  book.Record(1, CallKind::kDeposit, 5, CallEffect::kApplied);
  EXPECT_FALSE(book.Verify({std::nullopt, std::nullopt, std::nullopt}, kBookAccounts).pass);
}

// Transfers (issue 15): a, b and c start with 100 each.
void DepositHundredEach(LedgerBook& book) {
  for (size_t account = 0; account < 3; ++account) {
    book.Record(account, CallKind::kDeposit, 100, CallEffect::kApplied);
  }
}

TEST(LedgerBookTransferTest, AnOkTransferMovesTheAmountExactly) {
  LedgerBook book(3);
  DepositHundredEach(book);
  book.RecordTransfer(0, 1, 30, CallEffect::kApplied);
  const VerificationResult result = book.Verify({70, 130, 100}, kBookAccounts);
  EXPECT_TRUE(result.pass);
  EXPECT_EQ(result.balance_sum, 300);
  EXPECT_EQ(result.acknowledged_net, 300);  // Transfers add nothing to the sum.
  EXPECT_EQ(result.ambiguous_transfers, 0);
  // Off by one on either side fails, naming the account.
  const VerificationResult off = book.Verify({71, 130, 100}, kBookAccounts);
  EXPECT_FALSE(off.pass);
  ASSERT_FALSE(off.mismatches.empty());
  EXPECT_THAT(off.mismatches[0], HasSubstr("a: server balance 71, expected 70"));
  EXPECT_FALSE(book.Verify({70, 131, 100}, kBookAccounts).pass);
}

TEST(LedgerBookTransferTest, ADefiniteErrorMovesNothing) {
  LedgerBook book(3);
  DepositHundredEach(book);
  for (int i = 0; i < 6; ++i) book.RecordTransfer(0, 2, 500, CallEffect::kNotApplied);
  EXPECT_TRUE(book.Verify({100, 100, 100}, kBookAccounts).pass);
  EXPECT_FALSE(book.Verify({-400, 100, 600}, kBookAccounts).pass);
}

TEST(LedgerBookTransferTest, AnAmbiguousTransferAllowsEitherOutcomeOrMoneyInFlight) {
  LedgerBook book(3);
  DepositHundredEach(book);
  book.RecordTransfer(0, 1, 30, CallEffect::kUnknown);
  EXPECT_TRUE(book.Verify({100, 100, 100}, kBookAccounts).pass);  // Not applied.
  EXPECT_TRUE(book.Verify({70, 130, 100}, kBookAccounts).pass);   // Applied.
  EXPECT_TRUE(book.Verify({70, 100, 100}, kBookAccounts).pass);   // Pending: debited, in flight.
  const VerificationResult widened = book.Verify({70, 100, 100}, kBookAccounts);
  EXPECT_EQ(widened.ambiguous_transfers, 30);
  // Never more than the amount, never a credit without its debit.
  EXPECT_FALSE(book.Verify({69, 131, 100}, kBookAccounts).pass);
  EXPECT_FALSE(book.Verify({100, 130, 100}, kBookAccounts).pass);
  // Nor on the third account.
  EXPECT_FALSE(book.Verify({70, 130, 99}, kBookAccounts).pass);
}

TEST(LedgerBookTransferTest, AnAmbiguousTransferSettledCommittedIsExact) {
  LedgerBook book(3);
  DepositHundredEach(book);
  book.RecordTransfer(0, 1, 30, CallEffect::kUnknown);
  book.ResolveTransfer(0, 1, 30, /*applied=*/true);
  const VerificationResult result = book.Verify({70, 130, 100}, kBookAccounts);
  EXPECT_TRUE(result.pass);
  EXPECT_EQ(result.ambiguous_transfers, 0);
  EXPECT_FALSE(book.Verify({100, 100, 100}, kBookAccounts).pass);
  EXPECT_FALSE(book.Verify({70, 100, 100}, kBookAccounts).pass);
}

TEST(LedgerBookTransferTest, AnAmbiguousTransferSettledRefusedIsExact) {
  LedgerBook book(3);
  DepositHundredEach(book);
  book.RecordTransfer(2, 0, 50, CallEffect::kUnknown);
  book.ResolveTransfer(2, 0, 50, /*applied=*/false);
  EXPECT_TRUE(book.Verify({100, 100, 100}, kBookAccounts).pass);
  EXPECT_FALSE(book.Verify({150, 100, 50}, kBookAccounts).pass);
  EXPECT_FALSE(book.Verify({100, 100, 50}, kBookAccounts).pass);
}

TEST(LedgerBookTransferTest, ConservationCatchesMoneyInventedOnAnAmbiguousAccount) {
  // Each account alone lies within its range, but together they hold more than was deposited:
  // only the conservation check can see it.
  LedgerBook book(3);
  DepositHundredEach(book);
  book.RecordTransfer(0, 1, 30, CallEffect::kUnknown);
  book.RecordTransfer(1, 2, 30, CallEffect::kUnknown);
  const VerificationResult result = book.Verify({100, 130, 130}, kBookAccounts);
  EXPECT_FALSE(result.pass);
  ASSERT_EQ(result.mismatches.size(), 1u);
  EXPECT_THAT(result.mismatches[0],
              HasSubstr("conservation: balances sum to 360, expected 240 to 300"));
  // Both applied, or both in flight, conserve.
  EXPECT_TRUE(book.Verify({70, 100, 130}, kBookAccounts).pass);
  EXPECT_TRUE(book.Verify({70, 70, 100}, kBookAccounts).pass);
}

TEST(LedgerBookTransferTest, ConservationHoldsWithDepositsWithdrawalsAndTransfers) {
  LedgerBook book(3);
  book.Record(0, CallKind::kDeposit, 500, CallEffect::kApplied);
  book.Record(1, CallKind::kDeposit, 200, CallEffect::kApplied);
  book.RecordTransfer(0, 2, 120, CallEffect::kApplied);
  book.RecordTransfer(1, 0, 50, CallEffect::kApplied);
  book.Record(2, CallKind::kWithdraw, 20, CallEffect::kApplied);
  book.RecordTransfer(2, 1, 1000, CallEffect::kNotApplied);
  const VerificationResult result = book.Verify({430, 150, 100}, kBookAccounts);
  EXPECT_TRUE(result.pass);
  EXPECT_EQ(result.accounts_checked, 3);
  EXPECT_EQ(result.balance_sum, 680);
  EXPECT_EQ(result.acknowledged_net, 680);  // 500 + 200 - 20.
}

TEST(LedgerBookTransferTest, ATransferTouchesBothAccounts) {
  LedgerBook book(3);
  book.RecordTransfer(0, 2, 5, CallEffect::kNotApplied);
  EXPECT_THAT(book.TouchedAccounts(), ::testing::ElementsAre(0, 2));
}

}  // namespace
}  // namespace ledger
