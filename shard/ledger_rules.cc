#include "shard/ledger_rules.h"

#include <cstdint>

#include "base/check.h"

namespace ledger {
namespace {

bool IsAccountIdByte(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == ':' || c == '@' || c == '-';
}

Decision Deposit(int64_t balance, int64_t amount) {
  int64_t after = 0;
  if (__builtin_add_overflow(balance, amount, &after)) {
    return {Outcome::kOverflow, balance};
  }
  return {Outcome::kOk, after};
}

Decision Withdraw(int64_t balance, int64_t amount, const LedgerPolicy& policy) {
  int64_t after = 0;
  // A subtraction that overflows int64 lands far below any floor -overdraft_limit can express.
  if (__builtin_sub_overflow(balance, amount, &after) || after < -policy.overdraft_limit) {
    return {Outcome::kInsufficientFunds, balance};
  }
  return {Outcome::kOk, after};
}

}  // namespace

absl::string_view OpName(Op op) {
  switch (op) {
    case Op::kDeposit:
      return "deposit";
    case Op::kWithdraw:
      return "withdraw";
    case Op::kBalance:
      return "balance";
    case Op::kTransfer:
      return "transfer";
    case Op::kTransferCredit:
      return "transfer_credit";
    case Op::kTransferSettle:
      return "transfer_settle";
  }
  return "unknown";
}

absl::string_view OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kOk:
      return "ok";
    case Outcome::kInvalidAccountId:
      return "invalid_account_id";
    case Outcome::kInvalidAmount:
      return "invalid_amount";
    case Outcome::kAccountNotFound:
      return "account_not_found";
    case Outcome::kInsufficientFunds:
      return "insufficient_funds";
    case Outcome::kOverflow:
      return "overflow";
    case Outcome::kMailboxFull:
      return "mailbox_full";
    case Outcome::kShuttingDown:
      return "shutting_down";
    case Outcome::kCallerGone:
      return "caller_gone";
    case Outcome::kInternal:
      return "internal";
    case Outcome::kInvalidRequestId:
      return "invalid_request_id";
    case Outcome::kRequestIdReused:
      return "request_id_reused";
    case Outcome::kStorageFailed:
      return "storage_failed";
    case Outcome::kSameAccount:
      return "same_account";
    case Outcome::kCounterpartyNotFound:
      return "counterparty_not_found";
    case Outcome::kTransferIdReused:
      return "transfer_id_reused";
    case Outcome::kTransferPending:
      return "transfer_pending";
    case Outcome::kInvalidTransferId:
      return "invalid_transfer_id";
  }
  return "unknown";
}

Outcome ValidateAccountId(absl::string_view account_id) {
  if (account_id.empty() || account_id.size() > kAccountIdMaxBytes) {
    return Outcome::kInvalidAccountId;
  }
  for (char c : account_id) {
    if (!IsAccountIdByte(c)) return Outcome::kInvalidAccountId;
  }
  return Outcome::kOk;
}

Outcome ValidateRequestId(absl::string_view request_id) {
  if (request_id.size() > kRequestIdMaxBytes) return Outcome::kInvalidRequestId;
  for (char c : request_id) {
    if (c < 0x20 || c > 0x7E) return Outcome::kInvalidRequestId;
  }
  return Outcome::kOk;
}

Outcome ValidateTransferId(absl::string_view transfer_id) {
  if (transfer_id.empty() || ValidateRequestId(transfer_id) != Outcome::kOk) {
    return Outcome::kInvalidTransferId;
  }
  return Outcome::kOk;
}

Outcome ValidateAmount(int64_t amount) {
  return amount > 0 ? Outcome::kOk : Outcome::kInvalidAmount;
}

Decision ApplyOperation(Op op, std::optional<int64_t> balance, int64_t amount,
                        const LedgerPolicy& policy) {
  LEDGER_CHECK(policy.overdraft_limit >= 0);
  if (op != Op::kBalance && ValidateAmount(amount) != Outcome::kOk) {
    return {Outcome::kInvalidAmount, balance.value_or(0)};
  }
  if (!balance.has_value() && op != Op::kDeposit) {
    return {Outcome::kAccountNotFound, 0};
  }
  const int64_t current = balance.value_or(0);
  switch (op) {
    case Op::kDeposit:
      return Deposit(current, amount);
    case Op::kWithdraw:
      return Withdraw(current, amount, policy);
    case Op::kBalance:
      return {Outcome::kOk, current};
    case Op::kTransfer:
    case Op::kTransferCredit:
    case Op::kTransferSettle:
      break;  // Decided by ShardCore: each side is a withdrawal or a deposit under these rules.
  }
  return {Outcome::kInternal, current};
}

}  // namespace ledger
