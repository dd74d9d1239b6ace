// Defines timed waits that run on the monotonic clock: `SteadyNotification` and `SteadyCondVar`,
// and `SteadyDeadline` for a deadline that a change of the wall clock does not move.
//
// Why not Abseil's: in the release Debian 12 ships (20220623), every timed wait of Abseil
// (Notification::WaitForNotificationWithTimeout, Mutex::AwaitWithTimeout, CondVar::WaitWithTimeout)
// turns its timeout into a deadline on the wall clock, and the kernel sleeps until the wall clock
// reaches it (FUTEX_CLOCK_REALTIME). A wall clock set back by an hour (an NTP step, a VM resumed,
// `date -s`) stretches every such wait in progress by that hour: a replica whose clock was set
// back, elected leader, did not serve for as long (docs/replication.md, "A clock jump"). So in
// ledgerd, timeouts, intervals and deadlines are measured on std::chrono::steady_clock, and the
// wall clock only gives the times that are recorded or shown.
#ifndef LEDGER_BASE_STEADY_WAIT_H_
#define LEDGER_BASE_STEADY_WAIT_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ledger {

using SteadyTime = std::chrono::steady_clock::time_point;

inline SteadyTime SteadyNow() { return std::chrono::steady_clock::now(); }

// `timeout` as a std::chrono duration a wait can add to steady_clock::now() without overflow:
// negative is zero, anything past a century (absl::InfiniteDuration) is a century.
inline std::chrono::nanoseconds SteadyTimeout(absl::Duration timeout) {
  constexpr absl::Duration kLongest = absl::Hours(24 * 365 * 100);
  if (timeout <= absl::ZeroDuration()) return std::chrono::nanoseconds(0);
  return absl::ToChronoNanoseconds(timeout < kLongest ? timeout : kLongest);
}

// A moment `timeout` from now on the monotonic clock.
class SteadyDeadline {
 public:
  explicit SteadyDeadline(absl::Duration timeout)
      : at_(std::chrono::steady_clock::now() + SteadyTimeout(timeout)) {}

  bool Passed() const { return std::chrono::steady_clock::now() >= at_; }
  // What is left of it; zero once it has passed.
  absl::Duration Left() const {
    const std::chrono::steady_clock::duration left = at_ - std::chrono::steady_clock::now();
    return left.count() > 0 ? absl::FromChrono(left) : absl::ZeroDuration();
  }

 private:
  SteadyTime at_;
};

// How long since `start` on the monotonic clock.
inline absl::Duration SteadySince(SteadyTime start) {
  return absl::FromChrono(SteadyNow() - start);
}

// absl::Notification's interface, with timed waits on the monotonic clock. Thread-safe; unlike
// absl's, a second Notify does nothing.
class SteadyNotification {
 public:
  void Notify() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      notified_.store(true, std::memory_order_release);
    }
    changed_.notify_all();
  }
  bool HasBeenNotified() const { return notified_.load(std::memory_order_acquire); }
  void WaitForNotification() const {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [this] { return HasBeenNotified(); });
  }
  // True once notified; false when `timeout` passed first.
  bool WaitForNotificationWithTimeout(absl::Duration timeout) const {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, SteadyTimeout(timeout), [this] { return HasBeenNotified(); });
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  std::atomic<bool> notified_{false};
};

// A condition variable whose timed waits run on the monotonic clock, for an absl::Mutex (or
// base/annotated_mutex.h's Mutex: any mutex with Lock and Unlock). Waiters wake on NotifyAll,
// not when the mutex is released as with Abseil's conditions: whoever changes what a waiter's
// predicate reads calls NotifyAll afterwards (holding the mutex or not).
class SteadyCondVar {
 public:
  // With `mu` held: releases it and waits until `done()` holds (evaluated with `mu` held) or
  // `timeout` has passed; returns done(), with `mu` held again.
  template <typename Mutex, typename Predicate>
  bool WaitFor(Mutex& mu, absl::Duration timeout, Predicate done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    HeldMutex<Mutex> held{&mu};
    return changed_.wait_for(held, SteadyTimeout(timeout), std::move(done));
  }
  void NotifyAll() { changed_.notify_all(); }

 private:
  // The std::condition_variable_any view of a mutex the caller holds.
  template <typename Mutex>
  struct HeldMutex {
    Mutex* mu;
    void lock() ABSL_NO_THREAD_SAFETY_ANALYSIS { mu->Lock(); }
    void unlock() ABSL_NO_THREAD_SAFETY_ANALYSIS { mu->Unlock(); }
  };
  std::condition_variable_any changed_;
};

}  // namespace ledger

#endif  // LEDGER_BASE_STEADY_WAIT_H_
