// Defines `ShardCore`, the single-threaded heart of a shard: the accounts it owns, the batch being
// decided, its undo log and its BatchWrite. It decides each message with the ledger rules, commits
// the batch through the LedgerStore, rolls it back when the write fails, replays recorded
// request_ids, settles accounts after a failed write, and completes every message.
//
// It has no threads, no atomics and reads no clock except through the clocks it is given, so the
// same code runs in the server (driven by `Shard`, which owns the mailbox, the threads and the
// drain token) and in the deterministic simulator (sim/, driven step by step from a seed).
//
// With a store, a batch is decided in memory and then sealed: the SealedBatch carries its write,
// replies and undo log to the commit pipeline (shard/commit_pipeline.h), and the core goes on
// deciding the next batch on top of it while it is written. Every disk read that deciding needs
// (a request_id's record, an account to reload after a failed write) happens before the decision,
// in Prefetch, so that deciding never waits for the disk. See docs/architecture.md, "The shard
// core" and "The commit pipeline".
//
// Cross-shard transfers and batch calls add message kinds decided by DecideNext; their undo
// entries go through the same undo log, so rollback and the invariants stay in one place.
#ifndef LEDGER_SHARD_SHARD_CORE_H_
#define LEDGER_SHARD_SHARD_CORE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/log_rate_limiter.h"
#include "shard/ledger_rules.h"
#include "shard/ledger_store.h"
#include "shard/message.h"
#include "shard/sealed_batch.h"
#include "shard/shard_observer.h"
#include "shard/transfer_table.h"

namespace ledger {

// Test-only faults planted in the core, so that tests can prove the simulator's auditor notices a
// core that loses or invents money. Always kNone in production.
enum class CoreBugForTesting : uint8_t {
  kNone,
  // After a failed write the batch's in-memory changes are kept (and answered as failed).
  kSkipRollback,
  // A replayed request_id is applied again instead of answered from its record.
  kReapplyReplays,
};

struct ShardCoreOptions {
  int32_t index = 0;
  size_t max_batch = 256;  // Capacity reserved for the batch and its replies.
  LedgerPolicy policy;
  // Not owned; must outlive the core. Null discards everything.
  ShardObserver* observer = nullptr;
  // Not owned; may be null (memory only: no journal, no deduplication). See ShardOptions::store.
  LedgerStore* store = nullptr;
  absl::Duration idempotency_ttl = absl::Hours(24);
  // Wall-clock time for journal entries and idempotency records, read once per batch; empty
  // means absl::Now.
  std::function<absl::Time()> clock;
  // Monotonic time for the observer's durations; a plain function pointer because it is read
  // once per message on the hot path. Null means SteadyClock::now.
  SteadyClock::time_point (*steady_clock)() = nullptr;
  // See ShardOptions.
  absl::Duration debug_handler_delay = absl::ZeroDuration();
  // False silences the storage and internal error lines (the simulator injects thousands). The
  // lines' rate limiter reads the real steady clock; it decides only what is printed.
  bool log_errors = true;
};

// Where tests and the simulator reach inside a shard: kept out of the options, which hold only
// what production configures, and handed in only through the constructors that take them
// (ShardCore, Shard, Router::Create, LedgerServer::Start). Empty in production.
struct ShardTestHooks {
  // Runs before each handler, on whichever thread applies it; may block (to hold the shard) or
  // throw (to simulate a handler fault).
  std::function<void(const Message&)> before_handle;
  // A bug planted in the core, which the simulator's auditor must catch.
  CoreBugForTesting core_bug = CoreBugForTesting::kNone;
};

// What Seal did with a decided batch.
struct SealResult {
  // The batch to hand to the commit pipeline; null when it was completed at once.
  std::unique_ptr<SealedBatch> to_write;
  // Messages answered by Seal itself (the whole batch, or none).
  size_t completed_now = 0;
};

// Not thread-safe: one thread at a time drives it (in the server, the holder of the shard's
// drain token). Between batches `batch()` holds no decided message.
//
// A batch is driven as: fill batch(), Prefetch() until it returns true (on a thread that may
// block, if it returned false), BeginBatch(), DecideNext() until AllDecided(), Seal(). A sealed
// batch goes to the commit pipeline; when its write fails, RollBack() takes it (and every batch
// sealed after it) back. CommitAndComplete() writes and answers a sealed batch on the spot, for
// callers without a pipeline; ProcessBatch() does all of it.
class ShardCore {
 public:
  // Requires options.policy.overdraft_limit >= 0 and options.idempotency_ttl > 0.
  explicit ShardCore(ShardCoreOptions options);
  // The same, with test hooks.
  ShardCore(ShardCoreOptions options, ShardTestHooks hooks);

  ShardCore(const ShardCore&) = delete;
  ShardCore& operator=(const ShardCore&) = delete;

  // Between batches only: adds an account recovered from the store.
  void LoadAccount(std::string account_id, AccountState state);

  // Between batches only: adds a transfer recovered from the store as pending, of which this
  // shard owns the source account (the coordinator resumes it).
  void LoadPendingTransfer(const std::string& transfer_id, const TransferRecord& record);

  // Where the caller puts the next batch's messages (the shard drains its mailbox into it).
  // Messages stay here, undecided, while Prefetch returns false.
  std::vector<Message>& batch() { return batch_; }

  // Reads from the store what deciding batch() needs: the records of the request_ids it carries
  // (unless a batch decided earlier holds them in memory) and, after a failed write, the stored
  // state of the accounts it touches. `finished_through`: every batch sealed up to this sequence
  // number is durable (or rolled back), so its records can be read from the store. Without
  // `may_block`, only what the store holds in memory: false when something is on disk, and then
  // nothing changed and the caller calls again from a thread that may block.
  bool Prefetch(bool may_block, uint64_t finished_through);
  // Starts deciding batch(): reads the wall clock once for the whole batch.
  void BeginBatch();
  bool AllDecided() const { return replies_.size() == batch_.size(); }
  // Decides the next undecided message of the batch, in memory only. With `abandoning`, a message
  // not yet decided is answered kShuttingDown, certainly not applied.
  void DecideNext(bool abandoning);
  // Ends the decided batch. Without a store every message is answered now. With one, a batch
  // that wrote nothing is answered now too when every batch sealed before it is finished
  // (`finished_through` == last_sealed()): it cannot have read an undurable change. Any other
  // batch is numbered last_sealed() + 1 and returned for the pipeline, which answers it once its
  // write is durable.
  SealResult Seal(uint64_t finished_through);
  // The write of `failed.front()` failed, and `failed` holds it and every batch sealed after it,
  // in sequence order (all decided on top of it). Restores every account they changed to its
  // state before them, rewrites their replies (changes: kStorageFailed; reads: the restored
  // state), and marks the changed accounts for a reload before their next use (a failed write may
  // still have reached the disk). The caller then completes them.
  void RollBack(std::vector<std::unique_ptr<SealedBatch>>& failed);
  // The sequence number of the newest sealed batch; 0 before the first.
  uint64_t last_sealed() const { return last_sealed_; }

  // Without a pipeline: Seal, then write a sealed batch through the store at once, rolling it
  // back when the write fails, and complete it.
  void CommitAndComplete();
  // Prefetch (may block), BeginBatch, DecideNext for every message, CommitAndComplete.
  void ProcessBatch(bool abandoning);

  size_t account_count() const { return accounts_.size(); }
  // Transfers this shard is the source of that are debited and not yet final.
  size_t pending_transfer_count() const { return transfers_.pending_count(); }
  // The in-memory state of an account; nullopt when it does not exist. For tests and the
  // simulator; copies, so it leaks no reference.
  std::optional<AccountState> FindAccountForTesting(absl::string_view account_id) const;

 private:
  // A request_id's record read by Prefetch for the message at the same index of batch_.
  struct PrefetchedRecord {
    std::string key;         // The request's RequestKey; empty without a request_id.
    bool looked_up = false;  // False: the request carries no request_id, or memory had it.
    absl::Status status;     // A failed lookup answers its message kStorageFailed.
    std::optional<RequestRecord> record;
    // Transfer ops: the transfer's record (kTransfer, kTransferSettle) or the credit's receipt
    // (kTransferCredit) from the store, when memory did not hold it.
    bool transfer_looked_up = false;
    absl::Status transfer_status;
    std::optional<TransferRecord> transfer;
    std::optional<CreditReceipt> credit;
  };
  // A request_id recorded by a sealed batch whose write is not yet finished.
  struct PendingRecord {
    uint64_t sequence = 0;
    RequestRecord record;
  };

  Reply Handle(const Message& message);
  // Decides `message` by its kind.
  Reply ApplyToAccounts(const Message& message);
  Reply DecideBalance(const Message& message);
  // A DepositCall or WithdrawCall (`op`) of `amount`.
  Reply DecideDepositOrWithdraw(const Message& message, Op op, int64_t amount);
  // The recorded reply for a request_id seen before (or kRequestIdReused, or kStorageFailed when
  // the lookup failed); nullopt when the request is new. `op` and `amount` are the new call's,
  // `request_key` its batch_requests_ key.
  std::optional<Reply> FindRecordedReply(Op op, int64_t amount, const std::string& request_key);
  // Applies `amount` to an account (a credit adds, a debit subtracts; the caller checked the
  // rules), checks the money invariant and, with a store, adds the change to the batch's write,
  // its journal and its undo log. Returns the new state. `account` may be accounts_.end() for a
  // credit that opens the account.
  using AccountMap = absl::flat_hash_map<std::string, AccountState>;
  const AccountState& ApplyChange(absl::string_view account_id, AccountMap::iterator account,
                                  EntryKind kind, int64_t amount, absl::string_view request_id,
                                  absl::string_view counterparty);
  // Transfers (shard_core_transfers.cc): the client's Transfer on its source shard, the credit on
  // the destination's, and the settle back on the source's.
  bool PrefetchTransfer(const Message& message, PrefetchedRecord& prefetched, bool may_block);
  Reply DecideTransfer(const Message& message, const TransferCall& transfer);
  Reply DecideCredit(const Message& message, const CreditStep& credit);
  Reply DecideSettle(const Message& message, const SettleStep& settle);
  // The record of `transfer_id` from memory or Prefetch; nullopt when there is none. Sets
  // `failed` when the lookup failed.
  std::optional<TransferRecord> KnownTransfer(absl::string_view transfer_id, bool& failed);
  // Adds a transfer's record to memory and, with a store, to the batch's write.
  // `ends_pending`: it settles this shard's pending record (see TransferWrite).
  void RecordTransfer(absl::string_view transfer_id, const TransferRecord& record,
                      bool ends_pending = false);
  // True when crediting `amount` to an account at `balance` would overflow, counting the debits
  // of its pending transfers that may come back as refunds.
  bool CreditOverflows(absl::string_view account_id, int64_t balance, int64_t amount) const;
  // Recomputes refundable_ from the pending transfers, after a rollback or a read-back.
  void RebuildRefundable();
  // Records a transfer refused at its source (with a store, so that a retry replays it).
  Reply RefuseTransfer(const Message& message, const TransferCall& transfer, Outcome outcome,
                       int64_t from_balance, int64_t to_balance);
  bool Unsettled(absl::string_view account_id) const {
    return !unsettled_accounts_.empty() && unsettled_accounts_.contains(account_id);
  }
  // Forgets the pending records of batches up to `finished_through`: the store has them now.
  void ForgetFinishedRecords(uint64_t finished_through);
  // Completes the decided batch now and empties it.
  void CompleteNow();
  void ClearBatch();
  // Reloads an account of a failed batch from the store. False when the store cannot say.
  bool SettleAccount(absl::string_view account_id);
  void LogStorageError(const absl::Status& status, absl::string_view what);
  void LogInternalError(Op op, absl::string_view what);
  // A direct call unless a clock was injected: this runs twice per message.
  SteadyClock::time_point SteadyNow() const {
    return steady_clock_ == nullptr ? SteadyClock::now() : steady_clock_();
  }

  const ShardCoreOptions options_;
  const ShardTestHooks hooks_;
  ShardObserver* const observer_;
  SteadyClock::time_point (*const steady_clock_)();  // Null: SteadyClock::now.

  AccountMap accounts_;
  TransferTable transfers_;
  // Per source account, the amounts of its transfers that are pending: each may come back as a
  // refund, so credits leave room for them.
  absl::flat_hash_map<std::string, int64_t> refundable_;
  std::vector<Message> batch_;
  std::vector<Reply> replies_;
  // The current batch's durable changes, the state each changed account had before them (in the
  // order of the changes), and the request_ids it recorded (key: account, NUL, request_id; value:
  // index into write_.requests).
  BatchWrite write_;
  std::vector<UndoEntry> undo_;
  absl::flat_hash_map<std::string, size_t> batch_requests_;
  // Deposits and withdrawals of the batch that changed an account (whether or not stored).
  size_t batch_applied_ = 0;
  // Prefetch's results for batch_ (same indices); `prefetched_` says they are current.
  std::vector<PrefetchedRecord> prefetched_records_;
  bool prefetched_ = false;
  // Request_ids recorded by sealed batches not yet finished, so that a retry that arrives while
  // the first call's write is in flight is answered from its record, not applied twice; and the
  // keys each such batch added, oldest first, to forget them once the batch is finished.
  absl::flat_hash_map<std::string, PendingRecord> pending_records_;
  std::deque<std::pair<uint64_t, std::vector<std::string>>> pending_record_keys_;
  uint64_t last_sealed_ = 0;
  // Accounts of batches whose write failed. A failed write may still have reached the disk (a
  // sync can fail after the data did), so each is reloaded from the store (in Prefetch) before
  // its next use.
  absl::flat_hash_set<std::string> unsettled_accounts_;
  absl::Time batch_time_;
  // Where the next message's handler time starts (the previous one's end).
  SteadyClock::time_point handler_start_;
  // A failing disk fails every batch: the first error is logged, then at most one a second.
  LogRateLimiter storage_error_log_{1};
  // A handler fault is a bug; the lines say which op, at most five a second.
  LogRateLimiter internal_error_log_{5};
};

}  // namespace ledger

#endif  // LEDGER_SHARD_SHARD_CORE_H_
