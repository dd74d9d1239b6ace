#include "server/status_mapping.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/error_status.h"

namespace ledger {
namespace {

// Why `id` breaks `rule`: too long, or the first byte `validate` refuses on its own.
std::string DescribeInvalidId(absl::string_view rule, absl::string_view id, size_t max_bytes,
                              Outcome (*validate)(absl::string_view)) {
  if (id.size() > max_bytes) return absl::StrCat(rule, "; got ", id.size(), " bytes");
  for (size_t i = 0; i < id.size(); ++i) {
    if (validate(id.substr(i, 1)) != Outcome::kOk) {
      return absl::StrFormat("%s; byte %d is 0x%02X, which is not allowed", rule, i,
                             static_cast<unsigned char>(id[i]));
    }
  }
  return std::string(rule);
}

std::string DescribeInvalidAccountId(absl::string_view id) {
  constexpr absl::string_view kRule = "account_id must be 1 to 128 bytes of A-Z a-z 0-9 . _ : @ -";
  if (id.empty()) return absl::StrCat(kRule, "; got an empty id");
  return DescribeInvalidId(kRule, id, kAccountIdMaxBytes, ValidateAccountId);
}

std::string DescribeInvalidRequestId(absl::string_view id) {
  return DescribeInvalidId(
      "request_id must be empty or 1 to 128 bytes of printable ASCII (0x20 to 0x7E)", id,
      kRequestIdMaxBytes, ValidateRequestId);
}

}  // namespace

namespace {

// The status for `reply`, without saying whether it was replayed.
grpc::Status StatusFor(const Reply& reply, const CallFacts& facts);

}  // namespace

grpc::Status ToPlainStatus(const Reply& reply, const CallFacts& facts) {
  grpc::Status status = StatusFor(reply, facts);
  if (!reply.replayed || status.ok()) return status;
  return {status.error_code(),
          absl::StrCat(status.error_message(), " (the recorded result of an earlier call with ",
                       facts.op == Op::kTransfer ? "transfer_id" : "request_id", " \"",
                       facts.request_id, "\"; nothing was applied now)")};
}

v1::ErrorReason ReasonFor(const Reply& reply, const CallFacts& facts) {
  const bool transfer = facts.op == Op::kTransfer;
  switch (reply.outcome) {
    case Outcome::kOk:
      return v1::ERROR_REASON_UNSPECIFIED;
    case Outcome::kInvalidAccountId:
      return v1::INVALID_ACCOUNT_ID;
    case Outcome::kInvalidAmount:
      return v1::INVALID_AMOUNT;
    case Outcome::kAccountNotFound:
      return v1::ACCOUNT_NOT_FOUND;
    case Outcome::kInsufficientFunds:
      return v1::INSUFFICIENT_FUNDS;
    case Outcome::kOverflow:
      return v1::BALANCE_OVERFLOW;
    case Outcome::kMailboxFull:
      return facts.part_size > facts.mailbox_capacity ? v1::PART_TOO_LARGE : v1::MAILBOX_FULL;
    case Outcome::kShuttingDown:
      return v1::SHUTTING_DOWN;
    case Outcome::kCallerGone:
      return v1::CALLER_GONE;
    case Outcome::kInvalidRequestId:
      return v1::INVALID_REQUEST_ID;
    case Outcome::kRequestIdReused:
      return v1::REQUEST_ID_REUSED;
    case Outcome::kStorageFailed:
      return v1::OUTCOME_UNKNOWN;
    // A transfer's own outcomes; from any other call they are a fault (StatusFor: INTERNAL).
    case Outcome::kSameAccount:
      return transfer ? v1::SAME_ACCOUNT : v1::INTERNAL_FAULT;
    case Outcome::kCounterpartyNotFound:
      return transfer ? v1::COUNTERPARTY_NOT_FOUND : v1::INTERNAL_FAULT;
    case Outcome::kTransferIdReused:
      return transfer ? v1::TRANSFER_ID_REUSED : v1::INTERNAL_FAULT;
    case Outcome::kTransferPending:
      return transfer ? v1::TRANSFER_PENDING : v1::INTERNAL_FAULT;
    case Outcome::kInvalidTransferId:
      return transfer ? v1::INVALID_TRANSFER_ID : v1::INTERNAL_FAULT;
    case Outcome::kInternal:
      return v1::INTERNAL_FAULT;
  }
  return v1::INTERNAL_FAULT;
}

namespace {

// ErrorInfo.metadata for `reason`: the values the message names. Only ids that passed validation
// appear (an invalid one may not be UTF-8, which a proto3 string must be): for an invalid field,
// its name.
ErrorMetadata MetadataFor(v1::ErrorReason reason, const Reply& reply, const CallFacts& facts) {
  const bool transfer = facts.op == Op::kTransfer;
  const absl::string_view id_key = transfer ? "transfer_id" : "request_id";
  ErrorMetadata metadata;
  auto add = [&metadata](absl::string_view key, const auto& value) {
    metadata.emplace_back(std::string(key), absl::StrCat(value));
  };
  switch (reason) {
    case v1::INVALID_ACCOUNT_ID:
      add("field", !transfer                                             ? "account_id"
                   : ValidateAccountId(facts.account_id) != Outcome::kOk ? "from_account_id"
                                                                         : "to_account_id");
      break;
    case v1::INVALID_AMOUNT:
      add("field", "amount");
      add("amount", facts.amount);
      break;
    case v1::INVALID_REQUEST_ID:
    case v1::INVALID_TRANSFER_ID:
      add("field", id_key);
      break;
    case v1::SAME_ACCOUNT:
    case v1::ACCOUNT_NOT_FOUND:
      add("account_id", facts.account_id);
      break;
    case v1::COUNTERPARTY_NOT_FOUND:
      add("account_id", facts.counterparty);
      break;
    case v1::INSUFFICIENT_FUNDS:
      add("account_id", facts.account_id);
      add("balance", reply.balance);
      add("amount", facts.amount);
      add("overdraft_limit", facts.overdraft_limit);
      break;
    case v1::BALANCE_OVERFLOW:
      add("account_id", transfer ? facts.counterparty : facts.account_id);
      add("balance", transfer ? reply.transfer().to_balance : reply.balance);
      add("amount", facts.amount);
      break;
    case v1::REQUEST_ID_REUSED:
      add("account_id", facts.account_id);
      [[fallthrough]];
    case v1::TRANSFER_ID_REUSED:
    case v1::TRANSFER_PENDING:
      add(id_key, facts.request_id);
      break;
    case v1::MAILBOX_FULL:
    case v1::PART_TOO_LARGE:
      add("shard", facts.shard);
      add("mailbox_capacity", facts.mailbox_capacity);
      if (facts.part_size > 0) add("part_size", facts.part_size);
      break;
    case v1::OUTCOME_UNKNOWN:
      add("shard", facts.shard);
      if (!facts.request_id.empty()) add(id_key, facts.request_id);
      break;
    case v1::CALLER_GONE:
    case v1::INTERNAL_FAULT:
      add("shard", facts.shard);
      break;
    default:
      break;
  }
  if (reply.replayed) add("replayed", "true");
  return metadata;
}

}  // namespace

grpc::Status ToGrpcStatus(const Reply& reply, const CallFacts& facts) {
  grpc::Status plain = ToPlainStatus(reply, facts);
  if (plain.ok()) return plain;
  const v1::ErrorReason reason = ReasonFor(reply, facts);
  return ErrorStatus(plain.error_code(), reason, plain.error_message(),
                     MetadataFor(reason, reply, facts),
                     reason == v1::MAILBOX_FULL ? facts.retry_delay : std::nullopt);
}

namespace {

// A Transfer's own outcomes, and the rules' outcomes in a transfer's words; nullopt for the
// outcomes a transfer shares with every call (shed, shutting down, caller gone, internal).
std::optional<grpc::Status> TransferStatusFor(const Reply& reply, const CallFacts& facts) {
  const absl::string_view from = facts.account_id;
  const absl::string_view to = facts.counterparty;
  switch (reply.outcome) {
    case Outcome::kInvalidTransferId:
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          facts.request_id.empty()
              ? std::string("transfer_id is required: 1 to 128 bytes of printable ASCII, unique "
                            "per transfer, so that a transfer whose outcome is unknown can be "
                            "retried (or looked up with GetTransfer) safely")
              : DescribeInvalidId("transfer_id must be 1 to 128 bytes of printable ASCII (0x20 to "
                                  "0x7E)",
                                  facts.request_id, kRequestIdMaxBytes, ValidateRequestId));
    case Outcome::kInvalidAccountId: {
      const bool from_invalid = ValidateAccountId(from) != Outcome::kOk;
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat(from_invalid ? "from_" : "to_",
                                       DescribeInvalidAccountId(from_invalid ? from : to)));
    }
    case Outcome::kSameAccount:
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("from_account_id and to_account_id are both ", from,
                                       ": a transfer moves money between two different accounts"));
    case Outcome::kAccountNotFound:
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("from_account_id ", from,
                                       " not found: it has never received a deposit. Nothing "
                                       "was applied"));
    case Outcome::kCounterpartyNotFound:
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("to_account_id ", to,
                                       " not found: it has never received a deposit. Nothing "
                                       "was applied"));
    case Outcome::kInsufficientFunds:
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat("insufficient funds in ", from, ": balance ", reply.balance,
                                       ", transfer ", facts.amount, ", overdraft limit ",
                                       facts.overdraft_limit, ". Nothing was applied"));
    case Outcome::kOverflow:
      return grpc::Status(
          grpc::StatusCode::OUT_OF_RANGE,
          absl::StrCat("the transfer would overflow the balance of ", to, ": balance ",
                       reply.transfer().to_balance, ", transfer ", facts.amount,
                       ", maximum balance ", std::numeric_limits<int64_t>::max(),
                       " (less what transfers from it still in flight may refund). Nothing was "
                       "applied"));
    case Outcome::kTransferIdReused: {
      std::string was = "a different transfer";
      const auto* reused = std::get_if<ReusedTransferId>(&reply.detail);
      if (reused != nullptr && reused->record != nullptr) {
        const TransferRecord& recorded = *reused->record;
        was = absl::StrCat("a transfer of ", recorded.amount, " from ", recorded.from, " to ",
                           recorded.to);
      }
      return grpc::Status(
          grpc::StatusCode::ALREADY_EXISTS,
          absl::StrCat("transfer_id \"", facts.request_id, "\" was already used for ", was,
                       "; this call is a transfer of ", facts.amount, " from ", from, " to ", to,
                       ". Nothing was applied: use a new transfer_id for a new transfer"));
    }
    case Outcome::kTransferPending:
      return grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat("transfer \"", facts.request_id, "\" is still pending: ", from,
                       " is debited and the credit to ", to,
                       " is not yet confirmed. It ends COMMITTED or REFUSED on its own (also "
                       "across a restart); retry with the same transfer_id, or ask GetTransfer"));
    case Outcome::kStorageFailed:
      return grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat("storage failed while writing this transfer on shard ", facts.shard,
                       ": outcome unknown (a failed write can still reach the disk). Retry with "
                       "the same transfer_id \"",
                       facts.request_id, "\" or ask GetTransfer"));
    default:
      return std::nullopt;
  }
}

grpc::Status StatusFor(const Reply& reply, const CallFacts& facts) {
  if (facts.op == Op::kTransfer) {
    if (std::optional<grpc::Status> status = TransferStatusFor(reply, facts)) return *status;
  }
  const int64_t balance = reply.balance;
  switch (reply.outcome) {
    case Outcome::kOk:
      return grpc::Status::OK;
    case Outcome::kInvalidAccountId:
      return {grpc::StatusCode::INVALID_ARGUMENT, DescribeInvalidAccountId(facts.account_id)};
    case Outcome::kInvalidAmount:
      return {grpc::StatusCode::INVALID_ARGUMENT,
              absl::StrCat("amount must be greater than 0 (minor units, e.g. cents); got ",
                           facts.amount)};
    case Outcome::kAccountNotFound:
      return {grpc::StatusCode::NOT_FOUND,
              absl::StrCat("account ", facts.account_id,
                           " not found: it has never received a deposit")};
    case Outcome::kInsufficientFunds:
      return {grpc::StatusCode::FAILED_PRECONDITION,
              absl::StrCat("insufficient funds: balance ", balance, ", requested ", facts.amount,
                           ", overdraft limit ", facts.overdraft_limit)};
    case Outcome::kOverflow:
      return {
          grpc::StatusCode::OUT_OF_RANGE,
          absl::StrCat("deposit would overflow the balance: balance ", balance, ", deposit ",
                       facts.amount, ", maximum balance ", std::numeric_limits<int64_t>::max())};
    case Outcome::kMailboxFull:
      if (facts.part_size > facts.mailbox_capacity) {
        // No back-off makes room for more than the whole mailbox: only a smaller part fits.
        return {grpc::StatusCode::RESOURCE_EXHAUSTED,
                absl::StrCat("this Apply call's part for shard ", facts.shard, " (",
                             facts.part_size, " operations) is larger than its mailbox (capacity ",
                             facts.mailbox_capacity,
                             " operations) and was refused whole; nothing was applied: split the "
                             "call into smaller ones, a retry of the same call is refused again")};
      }
      return {grpc::StatusCode::RESOURCE_EXHAUSTED,
              absl::StrCat("shard ", facts.shard, " is overloaded: mailbox full (capacity ",
                           facts.mailbox_capacity, " operations)",
                           facts.part_size == 0
                               ? ""
                               : absl::StrCat("; this Apply call's part for it (", facts.part_size,
                                              " operations) was refused whole"),
                           "; nothing was applied, retry after a back-off")};
    case Outcome::kShuttingDown:
      return {grpc::StatusCode::UNAVAILABLE,
              "server is shutting down; nothing was applied, retry against another instance"};
    case Outcome::kCallerGone:
      return {grpc::StatusCode::CANCELLED,
              absl::StrCat("call was cancelled or its deadline passed while queued for shard ",
                           facts.shard, "; it was not applied")};
    case Outcome::kInvalidRequestId:
      return {grpc::StatusCode::INVALID_ARGUMENT, DescribeInvalidRequestId(facts.request_id)};
    case Outcome::kRequestIdReused: {
      // The shard says what the request_id was first used for; a reply without it (none is
      // made today) still gets the same code and advice.
      const auto* reused = std::get_if<ReusedRequestId>(&reply.detail);
      const std::string was = reused == nullptr
                                  ? std::string("a different operation")
                                  : absl::StrCat("a ", OpName(reused->op), " of ", reused->amount);
      return {grpc::StatusCode::ALREADY_EXISTS,
              absl::StrCat("request_id \"", facts.request_id, "\" was already used on account ",
                           facts.account_id, " for ", was, "; this call is a ", OpName(facts.op),
                           " of ", facts.amount,
                           ". Nothing was applied: use a new request_id for a new operation")};
    }
    case Outcome::kStorageFailed:
      return {
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat("storage failed while writing this call on shard ", facts.shard,
                       ": outcome unknown (a failed write can still reach the disk). ",
                       facts.request_id.empty()
                           ? "This call carried no request_id, so a retry could apply it twice: "
                             "read the balance or History before retrying"
                           : absl::StrCat("Retry with the same request_id \"", facts.request_id,
                                          "\" to apply it exactly once or learn its result"))};
    case Outcome::kSameAccount:
    case Outcome::kCounterpartyNotFound:
    case Outcome::kTransferIdReused:
    case Outcome::kTransferPending:
    case Outcome::kInvalidTransferId:
    case Outcome::kInternal:
      break;
  }
  return {grpc::StatusCode::INTERNAL,
          absl::StrCat("internal error in shard ", facts.shard, " while handling ",
                       OpName(facts.op), "; nothing was applied, see the server log")};
}

}  // namespace

}  // namespace ledger
