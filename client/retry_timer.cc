#include "client/retry_timer.h"

#include <cstdlib>
#include <utility>

#include "absl/time/time.h"

namespace ledger {

RetryTimer::RetryTimer() : thread_([this] { Loop(); }) {}

RetryTimer::~RetryTimer() { Stop(); }

void RetryTimer::Schedule(Clock::time_point due, std::function<void()> task) {
  if (!task) std::abort();  // An empty task would read as "stopped" in Loop: a bug, not input.
  absl::MutexLock lock(&mu_);
  entries_.push({due, next_order_++, std::move(task)});
  changed_.NotifyAll();  // It may be due before the one the loop waits for.
}

void RetryTimer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    changed_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
}

size_t RetryTimer::Waiting() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

void RetryTimer::Loop() {
  for (std::function<void()> task = NextDueTask(); task; task = NextDueTask()) {
    task();  // Without the lock: a task may schedule another.
  }
}

std::function<void()> RetryTimer::NextDueTask() {
  absl::MutexLock lock(&mu_);
  for (;;) {
    const uint64_t scheduled = next_order_;
    const auto changed = [this, scheduled]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || next_order_ != scheduled;
    };
    if (entries_.empty()) {
      if (stopping_) return nullptr;
      changed_.WaitFor(mu_, absl::InfiniteDuration(), changed);
      continue;
    }
    const Clock::time_point due = entries_.top().due;
    if (!stopping_ && Clock::now() < due) {
      // Wakes at the due time, on Stop, or when a task is scheduled; then looks again.
      changed_.WaitFor(mu_, absl::FromChrono(due - Clock::now()), changed);
      continue;
    }
    // top() is const; the entry is popped at once, so moving its task out is safe.
    std::function<void()> task = std::move(const_cast<Entry&>(entries_.top()).task);
    entries_.pop();
    return task;
  }
}

}  // namespace ledger
