#include "client/ledger_book.h"

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace ledger {

void LedgerBook::Record(size_t account, CallKind op, int64_t amount, CallEffect effect) {
  if (op == CallKind::kBalance) return;
  // A transfer has two accounts: RecordTransfer. Reaching here with one is a bug of the caller.
  LEDGER_CHECK(op == CallKind::kDeposit || op == CallKind::kWithdraw);
  Account& book = accounts_[account];
  book.touched.store(true, std::memory_order_relaxed);
  if (effect == CallEffect::kApplied) {
    book.net.fetch_add(op == CallKind::kDeposit ? amount : -amount, std::memory_order_relaxed);
  } else if (effect == CallEffect::kUnknown || effect == CallEffect::kPending) {
    (op == CallKind::kDeposit ? book.ambiguous_deposits : book.ambiguous_withdrawals)
        .fetch_add(amount, std::memory_order_relaxed);
  }
}

void LedgerBook::Resolve(size_t account, CallKind op, int64_t amount, bool applied) {
  LEDGER_CHECK(op == CallKind::kDeposit || op == CallKind::kWithdraw);
  Account& book = accounts_[account];
  (op == CallKind::kDeposit ? book.ambiguous_deposits : book.ambiguous_withdrawals)
      .fetch_sub(amount, std::memory_order_relaxed);
  if (applied) {
    book.net.fetch_add(op == CallKind::kDeposit ? amount : -amount, std::memory_order_relaxed);
  }
}

void LedgerBook::RecordTransfer(size_t from, size_t to, int64_t amount, CallEffect effect) {
  LEDGER_CHECK_NE(from, to);
  Account& source = accounts_[from];
  Account& destination = accounts_[to];
  source.touched.store(true, std::memory_order_relaxed);
  destination.touched.store(true, std::memory_order_relaxed);
  switch (effect) {
    case CallEffect::kApplied:
      source.net.fetch_sub(amount, std::memory_order_relaxed);
      destination.net.fetch_add(amount, std::memory_order_relaxed);
      break;
    case CallEffect::kUnknown:
    case CallEffect::kPending:  // Settled like an unknown one: it ends on its own.
      source.ambiguous_transfers_out.fetch_add(amount, std::memory_order_relaxed);
      destination.ambiguous_transfers_in.fetch_add(amount, std::memory_order_relaxed);
      ambiguous_transfers_.fetch_add(amount, std::memory_order_relaxed);
      break;
    case CallEffect::kNotApplied:
      break;
  }
}

void LedgerBook::ResolveTransfer(size_t from, size_t to, int64_t amount, bool applied) {
  LEDGER_CHECK_NE(from, to);
  Account& source = accounts_[from];
  Account& destination = accounts_[to];
  source.ambiguous_transfers_out.fetch_sub(amount, std::memory_order_relaxed);
  destination.ambiguous_transfers_in.fetch_sub(amount, std::memory_order_relaxed);
  ambiguous_transfers_.fetch_sub(amount, std::memory_order_relaxed);
  if (applied) {
    source.net.fetch_sub(amount, std::memory_order_relaxed);
    destination.net.fetch_add(amount, std::memory_order_relaxed);
  }
}

std::vector<size_t> LedgerBook::TouchedAccounts() const {
  std::vector<size_t> touched;
  for (size_t i = 0; i < size_; ++i) {
    if (accounts_[i].touched.load(std::memory_order_relaxed)) touched.push_back(i);
  }
  return touched;
}

VerificationResult LedgerBook::Verify(const std::vector<std::optional<int64_t>>& balances,
                                      const std::vector<std::string>& names) const {
  constexpr size_t kMismatchesShown = 10;
  VerificationResult result;
  for (size_t i = 0; i < size_ && i < balances.size(); ++i) {
    const Account& book = accounts_[i];
    if (!book.touched.load(std::memory_order_relaxed)) continue;
    ++result.accounts_checked;
    const int64_t balance = balances[i].value_or(0);
    const int64_t net = book.net.load(std::memory_order_relaxed);
    const int64_t ambiguous_deposits = book.ambiguous_deposits.load(std::memory_order_relaxed);
    const int64_t ambiguous_withdrawals =
        book.ambiguous_withdrawals.load(std::memory_order_relaxed);
    result.balance_sum += balance;
    result.acknowledged_net += net;
    result.ambiguous_deposits += ambiguous_deposits;
    result.ambiguous_withdrawals += ambiguous_withdrawals;
    const int64_t lowest =
        net - ambiguous_withdrawals - book.ambiguous_transfers_out.load(std::memory_order_relaxed);
    const int64_t highest =
        net + ambiguous_deposits + book.ambiguous_transfers_in.load(std::memory_order_relaxed);
    if (balance < lowest || balance > highest) {
      result.pass = false;
      if (result.mismatches.size() < kMismatchesShown) {
        result.mismatches.push_back(absl::StrCat(
            names[i], ": server balance ", balance, ", expected ",
            lowest == highest ? absl::StrCat(lowest) : absl::StrCat(lowest, " to ", highest),
            " (acknowledged net ", net, ")"));
      }
    }
  }
  result.ambiguous_transfers = ambiguous_transfers_.load(std::memory_order_relaxed);
  // Transfers move money between accounts and add nothing to the sum, but one still in flight
  // has left its source and not yet reached its destination.
  const int64_t lowest =
      result.acknowledged_net - result.ambiguous_withdrawals - result.ambiguous_transfers;
  const int64_t highest = result.acknowledged_net + result.ambiguous_deposits;
  if (result.balance_sum < lowest || result.balance_sum > highest) {
    result.pass = false;
    result.mismatches.push_back(absl::StrCat(
        "conservation: balances sum to ", result.balance_sum, ", expected ",
        lowest == highest ? absl::StrCat(lowest) : absl::StrCat(lowest, " to ", highest),
        " (acknowledged deposits minus withdrawals; transfers add nothing)"));
  }
  return result;
}

}  // namespace ledger
