#include "shard/ledger_rules.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ledger {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

struct RuleCase {
  const char* name;
  Op op;
  std::optional<int64_t> balance;
  int64_t amount;
  int64_t overdraft_limit;
  Outcome outcome;
  int64_t balance_after;
};

class ApplyOperationTest : public testing::TestWithParam<RuleCase> {};

TEST_P(ApplyOperationTest, DecidesOutcomeAndBalance) {
  const RuleCase& c = GetParam();
  const Decision decision =
      ApplyOperation(c.op, c.balance, c.amount, LedgerPolicy{.overdraft_limit = c.overdraft_limit});
  EXPECT_EQ(decision.outcome, c.outcome) << OutcomeName(decision.outcome);
  EXPECT_EQ(decision.balance, c.balance_after);
}

INSTANTIATE_TEST_SUITE_P(
    Table, ApplyOperationTest,
    testing::Values(
        RuleCase{"DepositOpensAccount", Op::kDeposit, std::nullopt, 1500, 0, Outcome::kOk, 1500},
        RuleCase{"DepositAdds", Op::kDeposit, 100, 50, 0, Outcome::kOk, 150},
        RuleCase{"DepositZeroIsInvalid", Op::kDeposit, 100, 0, 0, Outcome::kInvalidAmount, 100},
        RuleCase{"DepositNegativeIsInvalid", Op::kDeposit, 100, -1, 0, Outcome::kInvalidAmount,
                 100},
        RuleCase{"DepositReachingMaxIsOk", Op::kDeposit, kMax - 10, 10, 0, Outcome::kOk, kMax},
        RuleCase{"DepositOneOverMaxOverflows", Op::kDeposit, kMax - 10, 11, 0, Outcome::kOverflow,
                 kMax - 10},
        RuleCase{"DepositMaxTwiceOverflows", Op::kDeposit, kMax, kMax, 0, Outcome::kOverflow, kMax},
        RuleCase{"DepositMaxIntoNewAccount", Op::kDeposit, std::nullopt, kMax, 0, Outcome::kOk,
                 kMax},
        RuleCase{"DepositIntoOverdrawnAccount", Op::kDeposit, -100, 30, 100, Outcome::kOk, -70},
        RuleCase{"WithdrawToZeroIsOk", Op::kWithdraw, 1000, 1000, 0, Outcome::kOk, 0},
        RuleCase{"WithdrawOneBelowZeroFails", Op::kWithdraw, 1000, 1001, 0,
                 Outcome::kInsufficientFunds, 1000},
        RuleCase{"WithdrawExactlyToOverdraftLimit", Op::kWithdraw, 100, 600, 500, Outcome::kOk,
                 -500},
        RuleCase{"WithdrawOnePastOverdraftLimit", Op::kWithdraw, 100, 601, 500,
                 Outcome::kInsufficientFunds, 100},
        RuleCase{"WithdrawFromMissingAccountIsNotFound", Op::kWithdraw, std::nullopt, 1, 1000,
                 Outcome::kAccountNotFound, 0},
        RuleCase{"WithdrawZeroIsInvalid", Op::kWithdraw, 100, 0, 0, Outcome::kInvalidAmount, 100},
        RuleCase{"WithdrawMinValueIsInvalid", Op::kWithdraw, 100, kMin, 0, Outcome::kInvalidAmount,
                 100},
        RuleCase{"WithdrawUnderflowWithHugeLimitFails", Op::kWithdraw, kMin + 5, 10, kMax,
                 Outcome::kInsufficientFunds, kMin + 5},
        RuleCase{"WithdrawToMaxOverdraftIsOk", Op::kWithdraw, 0, kMax, kMax, Outcome::kOk, -kMax},
        RuleCase{"BalanceOfMissingAccountIsNotFound", Op::kBalance, std::nullopt, 0, 0,
                 Outcome::kAccountNotFound, 0},
        RuleCase{"BalanceIgnoresAmount", Op::kBalance, 42, -7, 0, Outcome::kOk, 42},
        RuleCase{"InvalidAmountBeatsMissingAccount", Op::kWithdraw, std::nullopt, 0, 0,
                 Outcome::kInvalidAmount, 0}),
    [](const testing::TestParamInfo<RuleCase>& info) { return std::string(info.param.name); });

TEST(ValidateAccountIdTest, AcceptsEveryAllowedByteAndTheLengthLimits) {
  EXPECT_EQ(ValidateAccountId("a"), Outcome::kOk);
  EXPECT_EQ(ValidateAccountId("AZaz09._:@-"), Outcome::kOk);
  EXPECT_EQ(ValidateAccountId(std::string(kAccountIdMaxBytes, 'x')), Outcome::kOk);
}

TEST(ValidateAccountIdTest, RejectsEmptyTooLongAndDisallowedBytes) {
  EXPECT_EQ(ValidateAccountId(""), Outcome::kInvalidAccountId);
  EXPECT_EQ(ValidateAccountId(std::string(kAccountIdMaxBytes + 1, 'x')),
            Outcome::kInvalidAccountId);
  const std::vector<absl::string_view> bad_ids = {
      "a b",       "a/b",         "tab\t",
      "new\nline", "caf\xC3\xA9", "\x7F",
      "a+b",       "a#b",         absl::string_view("a\0b", 3)};
  for (absl::string_view id : bad_ids) {
    EXPECT_EQ(ValidateAccountId(id), Outcome::kInvalidAccountId) << id;
  }
}

TEST(ValidateAmountTest, AcceptsOnlyPositiveAmounts) {
  EXPECT_EQ(ValidateAmount(1), Outcome::kOk);
  EXPECT_EQ(ValidateAmount(kMax), Outcome::kOk);
  EXPECT_EQ(ValidateAmount(0), Outcome::kInvalidAmount);
  EXPECT_EQ(ValidateAmount(-1), Outcome::kInvalidAmount);
  EXPECT_EQ(ValidateAmount(kMin), Outcome::kInvalidAmount);
}

}  // namespace
}  // namespace ledger
