// Defines `Mutex` and `MutexLock`: std::mutex with clang's thread-safety annotations.
//
// Why not absl::Mutex (which the rest of the server uses): Debian's Abseil is built without
// ThreadSanitizer, so TSan cannot see absl::Mutex's happens-before edges and reports every access
// it guards as a race. shard/ is what the TSan build tests, so its locks are std::mutex (whose
// pthread calls TSan intercepts), wrapped so that -Wthread-safety still checks what they guard.
#ifndef LEDGER_BASE_ANNOTATED_MUTEX_H_
#define LEDGER_BASE_ANNOTATED_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace ledger {

class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

  // Waits on `condition` until notified (spurious wake-ups included: callers loop). Requires the
  // lock, and holds it again on return.
  void Wait(std::condition_variable& condition) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    condition.wait(lock);
    lock.release();  // Still held: the caller's MutexLock unlocks it.
  }
  // Like Wait, but returns by `deadline` at the latest.
  template <typename Clock, typename Duration>
  void WaitUntil(std::condition_variable& condition,
                 std::chrono::time_point<Clock, Duration> deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    condition.wait_until(lock, deadline);
    lock.release();
  }

 private:
  std::mutex mu_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }

  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

}  // namespace ledger

#endif  // LEDGER_BASE_ANNOTATED_MUTEX_H_
