#include "server/status_mapping.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

grpc::Status ToGrpcStatus(const Reply& reply, const CallFacts& facts) {
  grpc::Status status = StatusFor(reply, facts);
  if (!reply.replayed || status.ok()) return status;
  return {status.error_code(),
          absl::StrCat(status.error_message(),
                       " (the recorded result of an earlier call with request_id \"",
                       facts.request_id, "\"; nothing was applied now)")};
}

namespace {

grpc::Status StatusFor(const Reply& reply, const CallFacts& facts) {
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
      return {
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("shard ", facts.shard, " is overloaded: mailbox full (capacity ",
                       facts.mailbox_capacity, "); nothing was applied, retry after a back-off")};
    case Outcome::kShuttingDown:
      return {grpc::StatusCode::UNAVAILABLE,
              "server is shutting down; nothing was applied, retry against another instance"};
    case Outcome::kCallerGone:
      return {grpc::StatusCode::CANCELLED,
              absl::StrCat("call was cancelled or its deadline passed while queued for shard ",
                           facts.shard, "; it was not applied")};
    case Outcome::kInvalidRequestId:
      return {grpc::StatusCode::INVALID_ARGUMENT, DescribeInvalidRequestId(facts.request_id)};
    case Outcome::kRequestIdReused:
      return {grpc::StatusCode::ALREADY_EXISTS,
              absl::StrCat("request_id \"", facts.request_id, "\" was already used on account ",
                           facts.account_id, " for a ", OpName(reply.recorded_op), " of ",
                           reply.recorded_amount, "; this call is a ", OpName(facts.op), " of ",
                           facts.amount,
                           ". Nothing was applied: use a new request_id for a new operation")};
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
    case Outcome::kInternal:
      break;
  }
  return {grpc::StatusCode::INTERNAL,
          absl::StrCat("internal error in shard ", facts.shard, " while handling ",
                       OpName(facts.op), "; nothing was applied, see the server log")};
}

}  // namespace

}  // namespace ledger
