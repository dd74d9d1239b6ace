// Defines `RetryTimer`: runs each scheduled task at its due time from one thread, so that calls
// waiting out a server's pushback cost a heap entry each, not a thread or a sleep on a gRPC
// thread.
#ifndef LEDGER_CLIENT_RETRY_TIMER_H_
#define LEDGER_CLIENT_RETRY_TIMER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <queue>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "base/steady_wait.h"

namespace ledger {

// Tasks run one at a time on the timer's own thread, in order of due time (ties in the order
// they were scheduled), never before they are due. A task must not block: it starts an
// asynchronous call and returns. Thread-safe: Schedule from any thread, tasks included.
// NOTE: Stop() (or the destructor) runs every task still waiting at once, without waiting for
// its time, so that nothing scheduled is ever dropped silently; callers stop the timer only when
// nothing can be waiting (the load test stops it after its calls have all finished).
class RetryTimer {
 public:
  using Clock = std::chrono::steady_clock;

  RetryTimer();
  ~RetryTimer();  // Stop().
  RetryTimer(const RetryTimer&) = delete;
  RetryTimer& operator=(const RetryTimer&) = delete;

  // Runs `task` (not empty) on the timer's thread at `due` or soon after.
  void Schedule(Clock::time_point due, std::function<void()> task);
  // Runs what is left (see the NOTE above) and joins the thread. Idempotent; not from a task.
  void Stop();
  // Tasks scheduled and not yet run.
  size_t Waiting() const;

 private:
  struct Entry {
    Clock::time_point due;
    uint64_t order;
    std::function<void()> task;
    // std::priority_queue keeps the largest on top: the latest-due entry is the "smallest".
    bool operator<(const Entry& other) const {
      return due != other.due ? due > other.due : order > other.order;
    }
  };

  void Loop();
  // Waits for the earliest task to be due (or for Stop) and takes it; nullptr once stopped with
  // nothing left.
  std::function<void()> NextDueTask() ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  SteadyCondVar changed_;  // Notified on Schedule and Stop.
  std::priority_queue<Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t next_order_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ledger

#endif  // LEDGER_CLIENT_RETRY_TIMER_H_
