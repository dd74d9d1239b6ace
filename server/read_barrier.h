// Defines `ReadBarrier`, what makes a cluster leader's reads linearizable (docs/replication.md
// 6.2 and 9.1): a read (Balance, History, GetTransfer, an Apply call with a Balance) is served
// only once a Raft barrier proposed after it arrived has committed. That proves this replica still
// led the cluster at a moment after the read began, so it has applied every write any leader
// acknowledged before the read; a replica that was deposed (cut off, paused) cannot commit one,
// and its reads are refused instead of answered stale. One barrier serves every read waiting when
// it is proposed, so under load reads cost one barrier per round, not one each.
#ifndef LEDGER_SERVER_READ_BARRIER_H_
#define LEDGER_SERVER_READ_BARRIER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace ledger {

// Thread-safe. The continuations run on the barrier's own thread, in the order they were given;
// each must not block for long (it hands the read on: to a shard, or to one store read).
class ReadBarrier {
 public:
  using Continuation = absl::AnyInvocable<void(const absl::Status& confirmed) &&>;

  // `confirm` commits one barrier and returns once it has (OK) or cannot (the reason): blocking.
  explicit ReadBarrier(std::function<absl::Status()> confirm);
  // Runs what still waits with Unavailable, then joins the thread.
  ~ReadBarrier();
  ReadBarrier(const ReadBarrier&) = delete;
  ReadBarrier& operator=(const ReadBarrier&) = delete;

  // Runs `then` once a barrier proposed after this call has committed (OK), or failed (its
  // error: the read must be refused).
  void After(Continuation then) ABSL_LOCKS_EXCLUDED(mu_);

  // Barriers committed and failed so far (tests, metrics).
  uint64_t barriers() const { return barriers_.load(std::memory_order_relaxed); }
  uint64_t failures() const { return failures_.load(std::memory_order_relaxed); }

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);

  const std::function<absl::Status()> confirm_;
  absl::Mutex mu_;
  std::vector<Continuation> waiting_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> barriers_{0};
  std::atomic<uint64_t> failures_{0};
  std::thread thread_;
};

// Runs `then` after `barrier` when there is one (a cluster replica), else at once with OK.
inline void AfterReadBarrier(ReadBarrier* barrier, ReadBarrier::Continuation then) {
  if (barrier != nullptr) {
    barrier->After(std::move(then));
  } else {
    std::move(then)(absl::OkStatus());
  }
}

}  // namespace ledger

#endif  // LEDGER_SERVER_READ_BARRIER_H_
