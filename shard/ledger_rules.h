// Defines the ledger's rules: the operations, their named outcomes, request validation and
// `ApplyOperation`, the one pure function that decides every balance change.
//
// Everything here is a pure function of its arguments: no state, no I/O, no locks. The shard
// thread applies the result; the gRPC front end validates with the same functions before it
// enqueues, so bad input never reaches a shard.
#ifndef LEDGER_SHARD_LEDGER_RULES_H_
#define LEDGER_SHARD_LEDGER_RULES_H_

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace ledger {

// kTransfer is a client's Transfer, sent to the shard of its source account. A transfer across
// shards adds two steps between shards (docs/architecture.md, "Transfers"): kTransferCredit, to
// the destination's shard, and kTransferSettle, back to the source's with the credit's result.
enum class Op : uint8_t {
  kDeposit,
  kWithdraw,
  kBalance,
  kTransfer,
  kTransferCredit,
  kTransferSettle
};
inline constexpr int kOpCount = 6;

// Lower-case name of an operation, as used in logs and metric labels.
absl::string_view OpName(Op op);

// Every outcome of a ledger call. The mapping to gRPC status codes lives in exactly one place,
// server/status_mapping.cc.
enum class Outcome : uint8_t {
  kOk,
  kInvalidAccountId,   // account_id empty, too long or has a disallowed byte.
  kInvalidAmount,      // amount <= 0.
  kAccountNotFound,    // Balance or Withdraw of an account never deposited to.
  kInsufficientFunds,  // Withdraw would take the balance below -overdraft_limit.
  kOverflow,           // Deposit would overflow int64.
  kMailboxFull,        // shed at admission: the shard's mailbox was full; nothing applied.
  kShuttingDown,       // the shard's mailbox is closed; nothing applied.
  kCallerGone,         // the caller cancelled or its deadline passed while queued; skipped.
  kInternal,           // an unexpected fault while handling this one message; nothing applied.
  kInvalidRequestId,   // request_id longer than kRequestIdMaxBytes or not printable ASCII.
  kRequestIdReused,    // request_id already recorded for a different operation or amount.
  kStorageFailed,      // the batch could not be written to disk; nothing applied.
  // Transfers.
  kSameAccount,           // from and to are the same account.
  kCounterpartyNotFound,  // the transfer's destination account was never opened.
  kTransferIdReused,      // transfer_id recorded for a transfer with other fields.
  kTransferPending,       // a retry of a transfer still in flight between shards.
  kInvalidTransferId,     // transfer_id empty, too long or not printable ASCII.
};

absl::string_view OutcomeName(Outcome outcome);

inline constexpr size_t kAccountIdMaxBytes = 128;

// kOk when `account_id` is 1 to kAccountIdMaxBytes bytes of [A-Za-z0-9._:@-], else
// kInvalidAccountId.
Outcome ValidateAccountId(absl::string_view account_id);

inline constexpr size_t kRequestIdMaxBytes = 128;

// kOk when `request_id` is empty (the call is not deduplicated) or 1 to kRequestIdMaxBytes bytes
// of printable ASCII (0x20 to 0x7E), else kInvalidRequestId.
Outcome ValidateRequestId(absl::string_view request_id);

// kOk when `transfer_id` is 1 to kRequestIdMaxBytes bytes of printable ASCII, else
// kInvalidTransferId: a transfer's id is required.
Outcome ValidateTransferId(absl::string_view transfer_id);

// kOk when `amount` > 0, else kInvalidAmount.
Outcome ValidateAmount(int64_t amount);

// Rules that are set once per server; validated at start-up.
struct LedgerPolicy {
  // How far below zero a Withdraw may take a balance. Must be >= 0.
  int64_t overdraft_limit = 0;
};

// The decision for one operation on one account.
struct Decision {
  Outcome outcome = Outcome::kOk;
  // The balance after the operation when outcome is kOk (the unchanged balance for kBalance);
  // the balance that made the operation fail otherwise (0 for a missing account).
  int64_t balance = 0;
};

// Decides one operation. `balance` is the account's current balance, or nullopt when the account
// has never been opened. Checks, in this order of precedence:
//   1. kDeposit/kWithdraw: amount > 0                               else kInvalidAmount
//   2. the account exists (kDeposit opens it, from balance 0)       else kAccountNotFound
//   3. kDeposit: balance + amount <= INT64_MAX                      else kOverflow
//   4. kWithdraw: balance - amount >= -overdraft_limit              else kInsufficientFunds
// The account id is validated before this is called; `amount` is ignored for kBalance. Only
// kDeposit, kWithdraw and kBalance: a transfer applies the rules of kWithdraw to its source and of
// kDeposit to its destination (shard/shard_core_transfers.cc).
Decision ApplyOperation(Op op, std::optional<int64_t> balance, int64_t amount,
                        const LedgerPolicy& policy);

}  // namespace ledger

#endif  // LEDGER_SHARD_LEDGER_RULES_H_
