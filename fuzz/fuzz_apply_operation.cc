// Fuzzes `ApplyOperation` (shard/ledger_rules.h) over structured input: an operation, an account
// that exists or not with any balance, any amount and any overdraft limit >= 0. Each decision is
// checked against an independent model of the documented contract computed in 128-bit
// arithmetic, so neither overflow nor a wrong order of precedence can hide.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>

#include "fuzz/fuzz_check.h"
#include "shard/ledger_rules.h"

namespace ledger {
namespace {

// 128 bits hold every sum and difference of two int64s exactly.
__extension__ typedef __int128 Wide;
constexpr Wide kInt64Max = std::numeric_limits<int64_t>::max();

// The contract of ledger_rules.h, rule by rule in its order of precedence.
Decision Expected(Op op, std::optional<int64_t> balance, int64_t amount, int64_t overdraft_limit) {
  if (op != Op::kBalance && amount <= 0) return {Outcome::kInvalidAmount, balance.value_or(0)};
  if (!balance.has_value() && op != Op::kDeposit) return {Outcome::kAccountNotFound, 0};
  const int64_t current = balance.value_or(0);
  switch (op) {
    case Op::kDeposit: {
      const Wide after = Wide{current} + amount;
      if (after > kInt64Max) return {Outcome::kOverflow, current};
      return {Outcome::kOk, static_cast<int64_t>(after)};
    }
    case Op::kWithdraw: {
      const Wide after = Wide{current} - amount;
      if (after < -Wide{overdraft_limit}) return {Outcome::kInsufficientFunds, current};
      return {Outcome::kOk, static_cast<int64_t>(after)};
    }
    case Op::kBalance:
      return {Outcome::kOk, current};
    case Op::kTransfer:
    case Op::kTransferCredit:
    case Op::kTransferSettle:
      break;  // Not ApplyOperation's: the target never picks them.
  }
  __builtin_trap();
}

}  // namespace
}  // namespace ledger

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using ledger::Op;
  using ledger::Outcome;
  FuzzedDataProvider input(data, size);
  const Op op = input.PickValueInArray({Op::kDeposit, Op::kWithdraw, Op::kBalance});
  std::optional<int64_t> balance;
  if (input.ConsumeBool()) balance = input.ConsumeIntegral<int64_t>();
  const int64_t amount = input.ConsumeIntegral<int64_t>();
  // A negative limit is refused at start-up (ApplyOperation checks it and aborts), so it is not
  // an input the rules must survive.
  const ledger::LedgerPolicy policy{.overdraft_limit = input.ConsumeIntegralInRange<int64_t>(
                                        0, std::numeric_limits<int64_t>::max())};

  const ledger::Decision got = ledger::ApplyOperation(op, balance, amount, policy);
  const ledger::Decision want = ledger::Expected(op, balance, amount, policy.overdraft_limit);
  FUZZ_CHECK(got.outcome == want.outcome);
  FUZZ_CHECK(got.balance == want.balance);

  // The money properties themselves, stated directly rather than through the model.
  const ledger::Wide current = balance.value_or(0);
  if (got.outcome == Outcome::kOk && op == Op::kDeposit) {
    FUZZ_CHECK(got.balance == current + amount);
  }
  if (got.outcome == Outcome::kOk && op == Op::kWithdraw) {
    FUZZ_CHECK(got.balance == current - amount);
    FUZZ_CHECK(got.balance >= -policy.overdraft_limit);
  }
  if (got.outcome != Outcome::kOk) {
    // A refusal never moves money: it reports the balance it found (0 for no account).
    FUZZ_CHECK(got.balance == (got.outcome == Outcome::kAccountNotFound ? 0 : current));
  }
  return 0;
}
