// Defines `ShardCore`, the single-threaded heart of a shard: the accounts it owns, the batch being
// decided, its undo log and its BatchWrite. It decides each message with the ledger rules, commits
// the batch through the LedgerStore, rolls it back when the write fails, replays recorded
// request_ids, settles accounts after a failed write, and completes every message.
//
// It has no threads, no atomics and reads no clock except through the clocks it is given, so the
// same code runs in the server (driven by `Shard`, which owns the mailbox, the threads and the
// drain token) and in the deterministic simulator (sim/, driven step by step from a seed).
//
// How later work extends it (see docs/architecture.md, "The shard core"):
// - A pipelined commit (decide batch N+1 while batch N is written) splits CommitAndComplete into
//   "seal the batch and hand its BatchWrite to the writer" and "complete the sealed batch when its
//   write returns"; the undo log and replies then belong to the sealed batch, and the rollback of
//   a failed batch N must also undo N+1's decisions that read N's state. The step API below
//   (BeginBatch / DecideNext / CommitAndComplete) is where that split goes; the simulator drives
//   the same steps and can interleave them.
// - Cross-shard transfers and batch calls add message kinds decided by DecideNext; their undo
//   entries go through the same undo log, so rollback and the invariants stay in one place.
#ifndef LEDGER_SHARD_SHARD_CORE_H_
#define LEDGER_SHARD_SHARD_CORE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "shard/ledger_rules.h"
#include "shard/ledger_store.h"
#include "shard/log_rate_limiter.h"
#include "shard/message.h"
#include "shard/shard_observer.h"

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
  std::function<void(const Message&)> test_before_handle;
  CoreBugForTesting bug_for_testing = CoreBugForTesting::kNone;
  // False silences the storage and internal error lines (the simulator injects thousands). The
  // lines' rate limiter reads the real steady clock; it decides only what is printed.
  bool log_errors = true;
};

// Not thread-safe: one thread at a time drives it (in the server, the holder of the shard's
// drain token). Between batches `batch()` is empty and every message handed in was completed.
//
// A batch is driven as: fill batch(), BeginBatch(), DecideNext() until AllDecided(),
// CommitAndComplete(). ProcessBatch does all of it for callers with nothing to interleave.
class ShardCore {
 public:
  // Requires options.policy.overdraft_limit >= 0 and options.idempotency_ttl > 0.
  explicit ShardCore(ShardCoreOptions options);

  ShardCore(const ShardCore&) = delete;
  ShardCore& operator=(const ShardCore&) = delete;

  // Between batches only: adds an account recovered from the store.
  void LoadAccount(std::string account_id, AccountState state);

  // Where the caller puts the next batch's messages (the shard drains its mailbox into it).
  std::vector<Message>& batch() { return batch_; }

  // Starts deciding batch(): reads the wall clock once for the whole batch.
  void BeginBatch();
  bool AllDecided() const { return replies_.size() == batch_.size(); }
  // Decides the next undecided message of the batch. With `abandoning`, a message not yet decided
  // is answered kShuttingDown, certainly not applied.
  void DecideNext(bool abandoning);
  // Writes the batch's changes in one Write (rolling them back when it fails), then completes
  // every message of the batch and empties it.
  void CommitAndComplete();
  // BeginBatch, DecideNext for every message, CommitAndComplete.
  void ProcessBatch(bool abandoning);

  size_t account_count() const { return accounts_.size(); }
  // The in-memory state of an account; nullopt when it does not exist. For tests and the
  // simulator; copies, so it leaks no reference.
  std::optional<AccountState> FindAccountForTesting(absl::string_view account_id) const;

 private:
  Reply Handle(const Message& message);
  Reply ApplyToAccounts(const Message& message);
  // The recorded reply for a request_id seen before (or kRequestIdReused, or kStorageFailed when
  // the lookup failed); nullopt when the request is new. `request_key` is its batch_requests_ key.
  std::optional<Reply> FindRecordedReply(const Message& message, const std::string& request_key);
  // Adds an applied operation to the batch's write and its undo log.
  void RecordApplied(const Message& message, std::optional<AccountState> before,
                     const AccountState& after);
  // Writes the batch; on failure restores the batch's in-memory changes and rewrites replies.
  void CommitBatch();
  void RollBackBatch();
  // Reloads an account of a failed batch from the store. False when the store cannot say.
  bool SettleAccount(absl::string_view account_id);
  void LogStorageError(const absl::Status& status, absl::string_view what);
  void LogInternalError(Op op, absl::string_view what);
  // A direct call unless a clock was injected: this runs twice per message.
  SteadyClock::time_point SteadyNow() const {
    return steady_clock_ == nullptr ? SteadyClock::now() : steady_clock_();
  }

  const ShardCoreOptions options_;
  ShardObserver* const observer_;
  SteadyClock::time_point (*const steady_clock_)();  // Null: SteadyClock::now.

  absl::flat_hash_map<std::string, AccountState> accounts_;
  std::vector<Message> batch_;
  std::vector<Reply> replies_;
  // The current batch's durable changes, the state each changed account had before them (in the
  // order of the changes), and the request_ids it recorded (key: account, NUL, request_id; value:
  // index into write_.requests).
  BatchWrite write_;
  std::vector<std::pair<std::string, std::optional<AccountState>>> undo_;
  absl::flat_hash_map<std::string, size_t> batch_requests_;
  // Deposits and withdrawals of the batch that changed an account (whether or not stored).
  size_t batch_applied_ = 0;
  // Accounts of batches whose write failed. A failed write may still have reached the disk (a
  // sync can fail after the data did), so each is reloaded from the store before its next use.
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
