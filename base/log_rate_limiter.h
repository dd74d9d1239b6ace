// Defines `LogRateLimiter`: a flood of bad requests or failing writes must not become a flood of
// log lines. Lines past a per-second budget are dropped and counted, and the next line that is
// written says how many were dropped.
#ifndef LEDGER_BASE_LOG_RATE_LIMITER_H_
#define LEDGER_BASE_LOG_RATE_LIMITER_H_

#include <chrono>
#include <cstdint>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ledger {

// Thread-safe.
class LogRateLimiter {
 public:
  // At most `lines_per_second` lines in any one-second window (at least 1).
  explicit LogRateLimiter(int lines_per_second)
      : lines_per_second_(lines_per_second < 1 ? 1 : lines_per_second) {}

  // When a line may be written now: how many lines were dropped since the last one written (to
  // be said in that line). Empty when this line must be dropped; it is counted.
  std::optional<int64_t> Admit() ABSL_LOCKS_EXCLUDED(mu_) {
    const std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now();
    absl::MutexLock lock(&mu_);
    if (now - window_start_ >= std::chrono::seconds(1)) {
      window_start_ = now;
      lines_in_window_ = 0;
    }
    if (lines_in_window_ >= lines_per_second_) {
      ++dropped_;
      return std::nullopt;
    }
    ++lines_in_window_;
    const int64_t dropped = dropped_;
    dropped_ = 0;
    return dropped;
  }

 private:
  const int lines_per_second_;
  absl::Mutex mu_;
  std::chrono::steady_clock::time_point window_start_ ABSL_GUARDED_BY(mu_);
  int lines_in_window_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ledger

#endif  // LEDGER_BASE_LOG_RATE_LIMITER_H_
