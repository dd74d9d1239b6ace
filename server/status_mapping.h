// Defines the one mapping from a shard's `Outcome` to the gRPC status a caller receives, with a
// message that says what was wrong in words a person can act on.
#ifndef LEDGER_SERVER_STATUS_MAPPING_H_
#define LEDGER_SERVER_STATUS_MAPPING_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"
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
};

// OK for kOk; otherwise the status code documented in ledger.proto and a message that names the
// offending value. `balance` is the Reply's balance.
grpc::Status ToGrpcStatus(const Reply& reply, const CallFacts& facts);
inline grpc::Status ToGrpcStatus(Outcome outcome, int64_t balance, const CallFacts& facts) {
  return ToGrpcStatus(Reply{.outcome = outcome, .balance = balance}, facts);
}

}  // namespace ledger

#endif  // LEDGER_SERVER_STATUS_MAPPING_H_
