// Defines `Message`, what the front end hands a shard for one call, and `Completion`, the
// front end's callback through which the shard answers it.
#ifndef LEDGER_SHARD_MESSAGE_H_
#define LEDGER_SHARD_MESSAGE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "shard/ledger_rules.h"
#include "shard/ledger_store.h"

namespace ledger {

using SteadyClock = std::chrono::steady_clock;

// The shard's answer to one message.
struct Reply {
  Outcome outcome = Outcome::kOk;
  // See Decision::balance; 0 for outcomes that never reached the rules. For a replayed request,
  // the balance recorded when it was first applied.
  int64_t balance = 0;
  // kRequestIdReused only: what the request_id was first used for.
  Op recorded_op = Op::kDeposit;
  int64_t recorded_amount = 0;
  // True when this is the recorded reply of an earlier message with the same request_id:
  // nothing was applied now.
  bool replayed = false;
  // Transfers: the destination's balance (see TransferRecord::to_balance).
  int64_t to_balance = 0;
  // kTransfer across shards: the source is debited (durably, once the reply is given) and the
  // transfer is pending: the credit goes next.
  bool debited = false;
  // kTransferCredit: when the destination credited or refused it.
  absl::Time credited_at = absl::InfinitePast();
  // kTransferIdReused only: the transfer the id was first used for.
  std::shared_ptr<const TransferRecord> recorded_transfer = nullptr;
};

// Implemented by the front end for each call it enqueues.
// Called one thread at a time, never concurrently: CallerGone by the thread deciding the message
// (the holder of its shard's drain token); Complete by whoever answers it: that thread, or with a
// store the commit pipeline's journal or completion thread once the message's write is durable.
class Completion {
 public:
  // True when the caller has cancelled or its deadline has passed; the shard then skips the
  // message (and still calls Complete with kCallerGone).
  virtual bool CallerGone() const = 0;

  // Called exactly once per accepted message, after the message was applied or skipped. The
  // implementation may delete itself; the shard never touches the message again.
  virtual void Complete(const Reply& reply) = 0;

 protected:
  ~Completion() = default;
};

// One call for a shard. Plain data: cheap to move through the mailbox.
struct Message {
  Op op = Op::kBalance;
  int64_t amount = 0;
  // NOTE: a view, not a copy. The bytes must stay valid until `completion->Complete` is called
  // (the gRPC request object satisfies this: it lives until the call finishes).
  absl::string_view account_id;
  Completion* completion = nullptr;
  // Set by the shard's TrySend; the start of the mailbox wait.
  SteadyClock::time_point enqueued_at;
  // Empty, or the caller's idempotency key (validated); the same lifetime rule as account_id.
  // For the transfer ops, the transfer_id.
  absl::string_view request_id;
  // Transfer ops: the other account (kTransfer, kTransferSettle: the destination; kTransferCredit:
  // the source), same lifetime rule.
  absl::string_view counterparty = {};
  // kTransfer: the destination is on this same shard, so both sides are decided here at once.
  bool local_transfer = false;
  // kTransfer: only carry on a pending transfer that no flight carries (its debit's write was
  // answered as failed, yet reached the disk); never decide it anew. Sent by the coordinator
  // after a failed debit, so that such a transfer ends without a retry or a restart.
  bool resume_only = false;
  // kTransferSettle: the destination's answer to the credit.
  Outcome credit_outcome = Outcome::kOk;
  int64_t credit_balance = 0;
  absl::Time credited_at = absl::InfinitePast();
  // A batch call's part for this shard (see Shard::TrySendPart): the carrier message points at
  // the part's `part_size` operations, each a complete message of its own with its own
  // completion, decided in order. The carrier itself is never decided or completed. The
  // operations must stay valid until each has been completed.
  const Message* part = nullptr;
  uint32_t part_size = 0;
  // Set by the shard: this message frees a mailbox cell when it is answered. False for all but
  // the first operation of a part, which share their carrier's cell.
  bool holds_cell = true;
};

// How many mailbox cells the answered `messages` free.
inline size_t CellsHeld(const std::vector<Message>& messages) {
  size_t cells = 0;
  for (const Message& message : messages) cells += message.holds_cell ? 1 : 0;
  return cells;
}

}  // namespace ledger

#endif  // LEDGER_SHARD_MESSAGE_H_
