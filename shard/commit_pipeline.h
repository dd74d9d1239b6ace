// Defines `CommitPipeline`, the one write path of the process: shards hand it their sealed
// batches, and its journal thread writes everything queued (from every shard) as one group, in
// one store write with one sync, then releases the replies in order.
//
// Why this shape (docs/architecture.md, "The commit pipeline"): deciding is done in memory by
// whichever thread holds a shard, so it runs at in-memory speed, and one sync makes durable all
// that every shard decided while the previous sync ran (group commit across shards, as in
// PostgreSQL and RocksDB). Batches are written and answered in the order they were submitted, so
// nothing that read an undurable change is answered before that change is durable (LMAX: an
// output is released only once its input is journaled). A failed write fails everything its
// shards decided on top of it.
//
// A store whose log commits by a round trip (a cluster replica's) lets several group writes be
// in flight (LedgerStore::GroupWritesInFlight): the journal thread starts the next group while
// the one before is being committed, and still releases answers group by group in the order the
// writes started.
#ifndef LEDGER_SHARD_COMMIT_PIPELINE_H_
#define LEDGER_SHARD_COMMIT_PIPELINE_H_

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "base/annotated_mutex.h"
#include "shard/ledger_store.h"
#include "shard/sealed_batch.h"

namespace ledger {

// A shard's side of the pipeline. Both methods run on the journal thread.
class CommitLane {
 public:
  // The batch's write is durable: answer its messages. Batches of a lane arrive in sequence order.
  virtual void OnDurable(std::unique_ptr<SealedBatch> batch) = 0;
  // A batch of this lane failed to write. From now until the lane calls TakeFailed, the lane's
  // batches are not written; TakeFailed hands them back for rollback, which the lane does on a
  // thread that holds its shard (never this one).
  virtual void OnFailed() = 0;

 protected:
  ~CommitLane() = default;
};

// What the pipeline reports, for metrics. Journal thread only.
class CommitObserver {
 public:
  virtual ~CommitObserver() = default;
  // One store write (and one sync) of `batches` shard batches holding `calls` messages, which
  // took `duration`; `ok` false when it failed.
  virtual void OnGroupWrite(size_t batches, size_t calls, std::chrono::nanoseconds duration,
                            bool ok) = 0;
};

// A written group of at most this many calls is answered on the journal thread itself when the
// completion thread is idle (measured in docs/benchmarks.md, issue 13).
inline constexpr size_t kAnswerOnJournalThreadMax = 8;

struct CommitPipelineOptions {
  LedgerStore* store = nullptr;        // Not owned; required.
  CommitObserver* observer = nullptr;  // Not owned; null discards.
  int32_t num_shards = 0;              // Lanes, one per shard index.
  // Where durable batches are answered: true, on a completion thread of their own, so that the
  // next write starts while they are answered (small groups with the completion thread idle are
  // still answered on the journal thread; measured in docs/benchmarks.md); false, always on the
  // journal thread, between writes.
  bool completion_thread = true;
};

// Thread-safe: Submit and TakeFailed from any thread (each lane's from the thread holding its
// shard); SetLane, Start and Stop from one controlling thread.
//
// Bounded without a limit of its own: each shard counts a message against its mailbox capacity
// until the message is answered, so at most (shards x mailbox capacity) messages are decided and
// not yet written, and a group holds at most that many.
class CommitPipeline {
 public:
  explicit CommitPipeline(CommitPipelineOptions options);
  ~CommitPipeline();

  CommitPipeline(const CommitPipeline&) = delete;
  CommitPipeline& operator=(const CommitPipeline&) = delete;

  // Before Start: the lane of shard `shard` (0 to num_shards - 1). Not owned.
  void SetLane(int32_t shard, CommitLane* lane);
  // Starts the journal thread. Only shards with a lane may submit.
  void Start();
  // Writes and answers what is queued, then joins the journal thread. Requires that no more
  // batches are submitted (every shard stopped). Idempotent.
  void Stop();

  // Queues `batch` for the next write. False when the batch's lane has a failed batch not yet
  // taken back: then this batch (decided on top of it) joined the failed ones instead, and the
  // caller must TakeFailed before deciding anything else.
  bool Submit(std::unique_ptr<SealedBatch> batch);
  // The lane's failed batches, in sequence order: the failed one and every batch of the lane
  // submitted after it. The lane's writes resume with the next Submit. Empty when none.
  std::vector<std::unique_ptr<SealedBatch>> TakeFailed(int32_t shard);

 private:
  // A group of batches written as one, from the moment its write starts until its answers are
  // released (or it fails).
  struct GroupWrite {
    std::vector<std::unique_ptr<SealedBatch>> group;
    size_t calls = 0;
    bool wrote = true;  // False: a group of reads, with nothing to write.
    SteadyClock::time_point start{};
    // Set by the write's callback, under mu_.
    bool done = false;
    absl::Status outcome;
    std::chrono::nanoseconds duration{0};
  };

  void Run();
  // Starts writing `write` (or marks a group with nothing to write done), behind the groups in
  // flight if any; `writes` is scratch.
  void StartWrite(GroupWrite& write, bool behind_writes_in_flight,
                  std::vector<const BatchWrite*>& writes) ABSL_LOCKS_EXCLUDED(mu_);
  // The oldest group in flight is done: its answers are released, or it fails with every group
  // started after it.
  void Finish(std::unique_ptr<GroupWrite> finished) ABSL_LOCKS_EXCLUDED(mu_);
  // Tells the observer about a group's write.
  void Observe(const GroupWrite& write);
  void RunCompletions();
  // Answers a durable group of `calls` messages, here or on the completion thread.
  void Release(std::vector<std::unique_ptr<SealedBatch>>& group, size_t calls);
  // Returns once every durable batch handed to the completion thread is answered: a lane's
  // rollback must come after its earlier batches' answers.
  void AwaitCompletions() ABSL_LOCKS_EXCLUDED(completions_mu_);
  // After `group` failed with `failure`: moves it, and every queued batch of its lanes, to the
  // lanes' failed batches, and says which lanes must be told.
  std::vector<CommitLane*> FailGroup(std::vector<std::unique_ptr<SealedBatch>>& group,
                                     const absl::Status& failure) ABSL_LOCKS_EXCLUDED(mu_);

  const CommitPipelineOptions options_;
  std::vector<CommitLane*> lanes_;  // Set before Start, then read-only.

  Mutex mu_;
  std::condition_variable work_;
  std::vector<std::unique_ptr<SealedBatch>> queue_ ABSL_GUARDED_BY(mu_);
  // Groups whose writes have started and whose answers are not released yet, oldest first: at
  // most LedgerStore::GroupWritesInFlight(). Only the journal thread adds and removes them.
  std::deque<std::unique_ptr<GroupWrite>> in_flight_ ABSL_GUARDED_BY(mu_);
  // Per lane: batches failed and not yet taken back (non-empty means the lane is failed).
  std::vector<std::vector<std::unique_ptr<SealedBatch>>> failed_ ABSL_GUARDED_BY(mu_);
  bool journal_waiting_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread journal_;

  // The completion thread's queue (completion_thread only).
  Mutex completions_mu_;
  std::condition_variable completions_work_;
  // Notified when the completion thread runs out of work.
  std::condition_variable completions_idle_;
  std::vector<std::unique_ptr<SealedBatch>> completions_ ABSL_GUARDED_BY(completions_mu_);
  bool completing_ ABSL_GUARDED_BY(completions_mu_) = false;
  bool completer_waiting_ ABSL_GUARDED_BY(completions_mu_) = false;
  bool completions_stopping_ ABSL_GUARDED_BY(completions_mu_) = false;
  std::thread completer_;
};

}  // namespace ledger

#endif  // LEDGER_SHARD_COMMIT_PIPELINE_H_
