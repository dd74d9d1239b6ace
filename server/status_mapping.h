// Defines the one mapping from a shard's `Outcome` to the gRPC status a caller receives, with a
// message that says what was wrong in words a person can act on.
#ifndef LEDGER_SERVER_STATUS_MAPPING_H_
#define LEDGER_SERVER_STATUS_MAPPING_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"
#include "ledger/v1/ledger.pb.h"
#include "shard/ledger_rules.h"
#include "shard/message.h"

namespace ledger {

// What the front end knows about a call, for the words of its status message.
struct CallFacts {
  Op op = Op::kBalance;
  absl::string_view account_id;
  int64_t amount = 0;
  int32_t shard = -1;  // -1 before a shard was chosen.
  size_t mailbox_capacity = 0;
  int64_t overdraft_limit = 0;
  // The request_id; for a Transfer, its transfer_id.
  absl::string_view request_id;
  // Transfer only: the destination account (account_id is the source).
  absl::string_view counterparty = {};
  // An operation of an Apply call: the number of operations of its shard's part.
  size_t part_size = 0;
  // A full mailbox's refusal: how long the client should wait (the RetryInfo it carries).
  std::optional<std::chrono::milliseconds> retry_delay = std::nullopt;
};

// OK for kOk; otherwise the status code documented in ledger.proto, a message that names the
// offending value, and in the status's details the reason (ReasonFor) with its metadata
// (server/error_status.h). `balance` is the Reply's balance.
grpc::Status ToGrpcStatus(const Reply& reply, const CallFacts& facts);

// The same code and message without the details, for an Apply operation's ApplyResult, which
// carries the reason in a field of its own.
grpc::Status ToPlainStatus(const Reply& reply, const CallFacts& facts);

// The machine-readable reason for `reply`'s outcome: ERROR_REASON_UNSPECIFIED for kOk.
v1::ErrorReason ReasonFor(const Reply& reply, const CallFacts& facts);
inline grpc::Status ToGrpcStatus(Outcome outcome, int64_t balance, const CallFacts& facts) {
  return ToGrpcStatus(Reply{.outcome = outcome, .balance = balance}, facts);
}

}  // namespace ledger

#endif  // LEDGER_SERVER_STATUS_MAPPING_H_
