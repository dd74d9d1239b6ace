// Defines `Shard`, one account actor: a bounded mailbox, the accounts it alone owns, and the
// thread that applies its messages one at a time.
#ifndef LEDGER_SHARD_SHARD_H_
#define LEDGER_SHARD_SHARD_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/option_bound.h"
#include "shard/commit_pipeline.h"
#include "shard/drain_token.h"
#include "shard/ledger_rules.h"
#include "shard/ledger_store.h"
#include "shard/mailbox.h"
#include "shard/message.h"
#include "shard/shard_core.h"
#include "shard/shard_observer.h"

namespace ledger {

// Bounds checked at start-up (TigerBeetle style: every queue and batch has a named limit).
inline constexpr size_t kMailboxCapacityMax = size_t{1} << 24;
inline constexpr size_t kMaxBatchMax = 65536;
inline constexpr size_t kDefaultMaxBatch = 256;
inline constexpr size_t kDefaultMailboxCapacity = 16384;
inline constexpr OptionBound kMailboxCapacityBound{"--mailbox_capacity", 1,
                                                   static_cast<int64_t>(kMailboxCapacityMax)};
inline constexpr OptionBound kMaxBatchBound{"--max_batch", 1, static_cast<int64_t>(kMaxBatchMax)};
inline constexpr OptionBound kOverdraftLimitBound{"--overdraft_limit", 0,
                                                  std::numeric_limits<int64_t>::max()};
// The most work a sending thread does for a shard before it hands the rest to the shard thread:
// it bounds how long a gRPC thread is kept from its own calls.
inline constexpr size_t kInlineBatchMax = 64;
inline constexpr int kInlineBatchesMax = 4;

struct ShardOptions {
  int32_t index = 0;
  // Operations the shard may hold, queued or awaiting their write: 1 to kMailboxCapacityMax. A
  // message counts 1, a batch call's part its number of operations.
  size_t mailbox_capacity = kDefaultMailboxCapacity;
  // Operations drained per wake-up: 1 to kMaxBatchMax. A batch call's part is never split, so a
  // batch may hold more when its first message is a larger part.
  size_t max_batch = kDefaultMaxBatch;
  LedgerPolicy policy;
  // When true, a thread whose TrySend finds the shard idle applies the shard's messages itself
  // (at most kInlineBatchesMax batches of kInlineBatchMax), instead of waking the shard thread;
  // the shard thread then drains only backlogs handed to it. When false, only the shard thread
  // ever applies messages. See docs/architecture.md, "Who runs a shard".
  bool inline_execution = true;
  // Fault injection: slows every handler by this much. Zero in production. Requires
  // inline_execution == false: a sleep must never run on a sender's (gRPC) thread.
  absl::Duration debug_handler_delay = absl::ZeroDuration();
  // Not owned; must outlive the shard. Null discards everything.
  ShardObserver* observer = nullptr;
  // Not owned; must outlive the shard. Null keeps accounts in memory only: no journal, and
  // request_ids are not deduplicated. With a store, a batch is decided in memory (inline too)
  // and its messages are answered once the commit pipeline has made its changes durable; disk
  // reads that deciding needs run on the shard thread, never a sender's.
  LedgerStore* store = nullptr;
  // Not owned; must outlive the shard. The pipeline that writes this shard's batches (with a
  // store only; the router's, shared by every shard). Null with a store: the shard runs a
  // pipeline of its own.
  CommitPipeline* pipeline = nullptr;
  // How long a request_id's recorded outcome is replayed; after that the id is new again.
  absl::Duration idempotency_ttl = absl::Hours(24);
  // Wall-clock time for journal entries and idempotency records; empty means absl::Now. Tests
  // inject a clock to expire records.
  std::function<absl::Time()> clock;
};

// InvalidArgument naming the first option out of range, else OK.
absl::Status ValidateShardOptions(const ShardOptions& options);

// Thread-safe: TrySend, MailboxDepth and the accessors may be called from any thread; Start and
// Stop from one controlling thread. The accounts, the batch and the mailbox's consumer side live
// in a ShardCore touched only by the thread holding the drain token (`drain_`, a capability that
// clang -Wthread-safety checks): the shard thread, or with inline_execution a sender that found
// the shard idle. Never by two threads at once.
//
// With a store, a message counts against the mailbox capacity from TrySend until it is answered
// (queued, decided and waiting for its write), so a shard whose disk falls behind refuses new
// messages at once.
//
// Lifecycle: construct, Start, any number of TrySend, Stop (mandatory before destruction).
// Stop closes the mailbox, waits until every message accepted before it is applied and
// answered, and joins the shard thread.
class Shard final : public CommitLane {
 public:
  // Requires ValidateShardOptions(options).ok().
  explicit Shard(ShardOptions options);
  // The same, with test hooks (shard/shard_core.h).
  Shard(ShardOptions options, ShardTestHooks hooks);
  ~Shard();

  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  // Before Start only: adds an account recovered from the store. The router calls it for the
  // accounts this shard owns.
  void LoadAccount(std::string account_id, AccountState state);

  // Before Start only: adds a transfer recovered as pending, whose source account this shard owns.
  void LoadPendingTransfer(const std::string& transfer_id, const TransferRecord& record);

  // Starts the shard thread (and the shard's own pipeline, if it has one). A shared pipeline
  // must be started by its owner.
  void Start();
  // Any thread; idempotent. From now on TrySend answers kClosed; accepted messages still run.
  void CloseMailbox() { mailbox_.Close(); }
  // From now on, every message not yet decided is answered kShuttingDown without being applied
  // (a definite answer, unlike a cancelled call): how a shutdown that ran out of grace ends.
  // Messages already decided are still written and answered with their real outcome. Any
  // thread.
  void AbandonUndecided() { abandoning_.store(true, std::memory_order_release); }
  // Closes the mailbox, waits until every accepted message is applied, written and answered,
  // joins. Requires the pipeline still running.
  void Stop();

  // Any thread; never waits for another thread. Stamps `message.enqueued_at`. On kFull (counted
  // as shed) or kClosed the message was not queued and its completion will not be called: the
  // caller answers it. On kAccepted with inline_execution, the message (and others queued) may
  // already have been decided, or even answered, on this thread when TrySend returns.
  [[nodiscard]] SendOutcome TrySend(Message&& message);
  // Like TrySend, for a batch call's part: `operations[0..count)` (count >= 1), each with its own
  // completion, are sent as one message that counts `count` against the mailbox capacity, so
  // the part is accepted or refused whole. They are decided in order, one batch together, as if
  // each had been sent on its own; the array must stay valid until each is completed.
  [[nodiscard]] SendOutcome TrySendPart(const Message* operations, size_t count);

  // Messages queued (a part counts 1).
  size_t MailboxDepth() const { return mailbox_.Depth(); }
  // Operations held against the capacity: queued, or decided and awaiting their write.
  size_t OperationsHeld() const { return mailbox_.WeightHeld(); }
  // Whether some thread (a sender or the shard thread) is applying this shard's messages right
  // now. A snapshot: by the time it returns it may have changed.
  bool Busy() const { return drain_.IsHeld(); }
  size_t mailbox_capacity() const { return mailbox_.capacity(); }
  int32_t index() const { return options_.index; }

  // CommitLane: the journal thread's calls.
  void OnDurable(std::unique_ptr<SealedBatch> batch) override;
  void OnFailed() override;

 private:
  // What one turn with the drain token did.
  enum class Turn : uint8_t {
    kIdle,              // Nothing to do.
    kProgressed,        // Decided (and sealed or answered) a batch.
    kNeedsShardThread,  // The batch needs a disk read: only a thread that may block can go on.
  };

  void Run();
  void RunHandoffLoop();
  // Takes the drain token and runs up to `max_batches` turns of up to `batch_limit` messages,
  // releasing the token after each. True when work remains that this call left (the caller hands
  // it off); false when there is none or another thread holds the token (that thread will see
  // it). `may_block` false: never waits for the disk (a sender's thread).
  bool DrainWhileOwner(int max_batches, size_t batch_limit, bool may_block);
  // One turn: rolls back failed writes first, then decides the next batch and seals it.
  Turn TakeTurn(size_t batch_limit, bool may_block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(drain_);
  // Rolls back and answers this shard's batches whose write failed (no disk I/O).
  void RecoverFailedWrites() ABSL_EXCLUSIVE_LOCKS_REQUIRED(drain_);
  // Work a thread that gives up the token must not leave behind unseen: a published message or
  // a failed write to roll back. seq_cst: see DrainWhileOwner.
  bool WorkPending() const;
  // True when nothing accepted is left: mailbox empty, no batch pending, every sealed batch
  // answered.
  bool Quiescent() ABSL_EXCLUSIVE_LOCKS_REQUIRED(drain_);
  void HandOffToShardThread();
  // Moves the messages taken from the mailbox into the core's batch, each part's operations in
  // its place.
  void ExpandIntoBatch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(drain_);
  SendOutcome Send(Message&& message, size_t operations);

  const ShardOptions options_;
  ShardObserver* const observer_;
  // With a store and no shared pipeline: this shard's own.
  std::unique_ptr<CommitPipeline> own_pipeline_;
  // Null without a store.
  CommitPipeline* const pipeline_;
  Mailbox<Message> mailbox_;
  // The right to apply this shard's messages: the shard thread's, or with inline_execution a
  // sender's that found the shard idle. Never two threads at once.
  DrainToken drain_;
  // Bumped to wake the shard thread (inline mode) for a backlog, a failed write or Stop.
  std::atomic<uint32_t> handoff_epoch_{0};
  std::atomic<bool> stopping_{false};
  // Set by AbandonUndecided; read by whoever holds the drain token.
  std::atomic<bool> abandoning_{false};
  // The newest sealed batch that is answered (durable, or rolled back): written by the journal
  // thread after it answers a batch, and by the token holder after a rollback.
  std::atomic<uint64_t> finished_through_{0};
  // Set by the journal thread when a write of this shard failed; the token holder rolls back.
  std::atomic<bool> recovery_pending_{false};
  std::thread thread_;
  bool started_ = false;
  bool stopped_ = false;

  // The accounts, the batch (which the mailbox's consumer side drains into), the undo log and
  // the batch's write: single-threaded, touched only by the holder of the drain token.
  ShardCore core_ ABSL_GUARDED_BY(drain_);
  // Messages just taken from the mailbox, before ExpandIntoBatch.
  std::vector<Message> taken_ ABSL_GUARDED_BY(drain_);
};

}  // namespace ledger

#endif  // LEDGER_SHARD_SHARD_H_
