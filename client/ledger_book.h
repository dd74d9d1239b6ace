// Defines `LedgerBook`, the load-test client's own account of what it did to each account, and
// the check that the server's balances agree with it: no money lost or invented, and transfers
// conserve money (they move it, never make or lose it).
#ifndef LEDGER_CLIENT_LEDGER_BOOK_H_
#define LEDGER_CLIENT_LEDGER_BOOK_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/call_kind.h"
#include "client/call_outcome.h"
#include "grpcpp/support/status_code_enum.h"

namespace ledger {

struct VerificationResult {
  bool pass = true;
  std::vector<std::string> mismatches;  // The first few, for a person.
  int64_t accounts_checked = 0;
  int64_t balance_sum = 0;  // What the server holds.
  // Acknowledged deposits minus acknowledged withdrawals (acknowledged transfers add 0).
  int64_t acknowledged_net = 0;
  int64_t ambiguous_deposits = 0;  // Sum of deposits whose outcome is unknown.
  int64_t ambiguous_withdrawals = 0;
  int64_t ambiguous_transfers = 0;  // Sum of transfers whose outcome is unknown.
};

// Thread-safe: Record from any thread (lock-free: one relaxed add per call); Verify and
// TouchedAccounts once the calls have finished.
class LedgerBook {
 public:
  explicit LedgerBook(size_t accounts)
      : size_(accounts), accounts_(std::make_unique<Account[]>(accounts)) {}

  // Records a finished Deposit or Withdraw (Balance calls change nothing and are not recorded).
  void Record(size_t account, CallKind op, int64_t amount, CallEffect effect);

  // Settles a call that Record counted as ambiguous (kUnknown), once a retry with the same
  // request_id has told whether it was applied.
  void Resolve(size_t account, CallKind op, int64_t amount, bool applied);

  // Records a finished Transfer of `amount` from `from` to `to`: OK moved it (both sides), a
  // definite error moved nothing, an unknown outcome may have done either (or be in flight).
  void RecordTransfer(size_t from, size_t to, int64_t amount, CallEffect effect);

  // Settles a transfer that RecordTransfer counted as ambiguous, once GetTransfer or a retry
  // with the same transfer_id has told whether it was applied (COMMITTED) or not (REFUSED).
  void ResolveTransfer(size_t from, size_t to, int64_t amount, bool applied);

  // Checks `balances` (index: account; nullopt: NOT_FOUND, which means 0) against the book:
  // each lies within [net − ambiguous withdrawals and transfers out, net + ambiguous deposits
  // and transfers in], exactly net when nothing was ambiguous. Conservation: the sum of balances
  // lies within [acknowledged net − ambiguous withdrawals − ambiguous transfers, acknowledged
  // net + ambiguous deposits]: a transfer moves money and never changes the sum, except that
  // one not yet settled may still be in flight (debited, not yet credited), which lowers it.
  VerificationResult Verify(const std::vector<std::optional<int64_t>>& balances,
                            const std::vector<std::string>& names) const;

  // Accounts with at least one recorded call.
  std::vector<size_t> TouchedAccounts() const;

 private:
  struct Account {
    std::atomic<bool> touched{false};
    std::atomic<int64_t> net{0};
    std::atomic<int64_t> ambiguous_deposits{0};
    std::atomic<int64_t> ambiguous_withdrawals{0};
    std::atomic<int64_t> ambiguous_transfers_in{0};
    std::atomic<int64_t> ambiguous_transfers_out{0};
  };

  const size_t size_;
  const std::unique_ptr<Account[]> accounts_;
  // Sum of the amounts of transfers whose outcome is unknown: the conservation check's slack.
  std::atomic<int64_t> ambiguous_transfers_{0};
};

}  // namespace ledger

#endif  // LEDGER_CLIENT_LEDGER_BOOK_H_
