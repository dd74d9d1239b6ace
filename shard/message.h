// Defines `Message`, what the front end hands a shard for one call or one step of a transfer,
// `Reply`, the shard's answer, and `Completion`, the front end's callback through which the shard
// answers it.
//
// Each kind of message is a struct of its own (DepositCall, ..., SettleStep, BatchPart), held in
// Message::kind, so that a field means one thing: a transfer's destination is `TransferCall::to`,
// its source on the destination's shard `CreditStep::from`. The same for the answers that carry
// more than a balance (Reply::detail). A handler reads its kind with Message::Get<Kind>().
#ifndef LEDGER_SHARD_MESSAGE_H_
#define LEDGER_SHARD_MESSAGE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <variant>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/check.h"
#include "shard/ledger_rules.h"
#include "shard/ledger_store.h"

namespace ledger {

using SteadyClock = std::chrono::steady_clock;

// kRequestIdReused: what the request_id was first used for.
struct ReusedRequestId {
  Op op = Op::kDeposit;
  int64_t amount = 0;
};

// kTransferIdReused, when the shard knows it: the transfer the id was first used for.
struct ReusedTransferId {
  std::shared_ptr<const TransferRecord> record = nullptr;
};

// The steps of a transfer (TransferCall, CreditStep, SettleStep), beyond the balance of the
// message's account.
struct TransferReply {
  // The destination's balance (see TransferRecord::to_balance).
  int64_t to_balance = 0;
  // TransferCall across shards: the source is debited (durably, once the reply is given) and the
  // transfer is pending: the credit goes next.
  bool debited = false;
  // CreditStep: when the destination credited or refused it.
  absl::Time credited_at = absl::InfinitePast();
};

// The shard's answer to one message.
struct Reply {
  Outcome outcome = Outcome::kOk;
  // See Decision::balance; 0 for outcomes that never reached the rules. For a replayed request,
  // the balance recorded when it was first applied. For a transfer's steps, the balance of the
  // message's account (the source's, or for a CreditStep the destination's).
  int64_t balance = 0;
  // True when this is the recorded reply of an earlier message with the same request_id or
  // transfer_id: nothing was applied now.
  bool replayed = false;
  // What this answer carries beyond a balance: nothing, or one of the kinds above.
  std::variant<std::monostate, ReusedRequestId, ReusedTransferId, TransferReply> detail =
      std::monostate{};

  // The transfer fields; all defaults for an answer that has none.
  TransferReply transfer() const {
    const TransferReply* found = std::get_if<TransferReply>(&detail);
    return found == nullptr ? TransferReply{} : *found;
  }
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

// The kinds of message. Every string_view is a view, not a copy: NOTE the bytes must stay valid
// until the message's `completion->Complete` is called (the gRPC request object, or the
// transfer's flight, satisfies this: it lives until then).

// Op::kDeposit: a client's Deposit of `amount` (> 0) into the message's account.
struct DepositCall {
  int64_t amount = 0;
  // Empty, or the caller's idempotency key (validated).
  absl::string_view request_id = {};
};

// Op::kWithdraw: a client's Withdraw of `amount` (> 0) from the message's account.
struct WithdrawCall {
  int64_t amount = 0;
  absl::string_view request_id = {};  // As DepositCall's.
};

// Op::kBalance: a client's Balance of the message's account.
struct BalanceCall {};

// Op::kTransfer: a client's Transfer, on the shard of its source (the message's account).
struct TransferCall {
  absl::string_view transfer_id = {};
  absl::string_view to = {};
  int64_t amount = 0;
  // The destination is on this same shard, so both sides are decided here at once.
  bool local = false;
  // Only carry on a pending transfer that no flight carries (its debit's write was answered as
  // failed, yet reached the disk); never decide it anew. Sent by the coordinator after a failed
  // debit, so that such a transfer ends without a retry or a restart.
  bool resume_only = false;
};

// Op::kTransferCredit: a transfer's credit, on the shard of its destination (the message's
// account), sent once the source is debited.
struct CreditStep {
  absl::string_view transfer_id = {};
  absl::string_view from = {};
  int64_t amount = 0;
};

// Op::kTransferSettle: back on the source's shard (the message's account), the credit's result.
struct SettleStep {
  absl::string_view transfer_id = {};
  absl::string_view to = {};
  int64_t amount = 0;
  Outcome credit_outcome = Outcome::kOk;
  int64_t credit_balance = 0;
  absl::Time credited_at = absl::InfinitePast();
};

struct Message;

// A batch call's part for one shard (see Shard::TrySendPart): the carrier message points at the
// part's `size` operations, each a complete message of its own with its own completion, decided
// in order. The carrier itself is never decided or completed (it has no account or completion).
// The operations must stay valid until each has been completed.
struct BatchPart {
  const Message* operations = nullptr;
  uint32_t size = 0;
};

// In Op's order, so that a kind's index is its Op; BatchPart last, an Op of none.
using MessageKind = std::variant<DepositCall, WithdrawCall, BalanceCall, TransferCall, CreditStep,
                                 SettleStep, BatchPart>;
static_assert(std::variant_size_v<MessageKind> == kOpCount + 1);
// Whether `Kind` stands at `op`'s index of MessageKind, as Message::op() assumes.
template <Op op, typename Kind>
inline constexpr bool kKindAt =
    std::is_same_v<std::variant_alternative_t<static_cast<size_t>(op), MessageKind>, Kind>;
static_assert(kKindAt<Op::kDeposit, DepositCall> && kKindAt<Op::kWithdraw, WithdrawCall> &&
              kKindAt<Op::kBalance, BalanceCall> && kKindAt<Op::kTransfer, TransferCall> &&
              kKindAt<Op::kTransferCredit, CreditStep> && kKindAt<Op::kTransferSettle, SettleStep>);
static_assert(std::is_trivially_copyable_v<MessageKind>);

// One message for a shard. Plain data: cheap to move through the mailbox.
struct Message {
  // The account this shard owns that the message is about.
  absl::string_view account_id = {};
  Completion* completion = nullptr;
  MessageKind kind = BalanceCall{};
  // Set by the shard's TrySend; the start of the mailbox wait.
  SteadyClock::time_point enqueued_at = {};
  // Set by the shard: this message frees a mailbox cell when it is answered. False for all but
  // the first operation of a part, which share their carrier's cell.
  bool holds_cell = true;

  bool is_part() const { return std::holds_alternative<BatchPart>(kind); }
  // The operation; never asked of a BatchPart carrier.
  Op op() const {
    LEDGER_CHECK(!is_part());
    return static_cast<Op>(kind.index());
  }
  // The message's kind, which must be `Kind`.
  template <typename Kind>
  const Kind& Get() const {
    const Kind* found = std::get_if<Kind>(&kind);
    LEDGER_CHECK(found != nullptr);
    return *found;
  }
  // DepositCall's and WithdrawCall's request_id; empty for every other kind.
  absl::string_view request_id() const {
    if (const auto* deposit = std::get_if<DepositCall>(&kind)) return deposit->request_id;
    if (const auto* withdraw = std::get_if<WithdrawCall>(&kind)) return withdraw->request_id;
    return {};
  }
};

// A client's Deposit, Withdraw or Balance of `account_id` (amount and request_id as in the
// calls' structs; a Balance takes neither). For the front end and tests.
Message MakeAccountCall(Op op, absl::string_view account_id, int64_t amount,
                        absl::string_view request_id, Completion* completion);

// How many mailbox cells the answered `messages` free.
inline size_t CellsHeld(const std::vector<Message>& messages) {
  size_t cells = 0;
  for (const Message& message : messages) cells += message.holds_cell ? 1 : 0;
  return cells;
}

}  // namespace ledger

#endif  // LEDGER_SHARD_MESSAGE_H_
