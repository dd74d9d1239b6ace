// Defines `RetryBudget`, a token bucket that keeps a client's retries to a fixed fraction of its
// first attempts, so that retrying a shed call can never multiply an overload (the "retry
// budget" of Google's SRE book, shaped like gRPC's retry throttling).
#ifndef LEDGER_CLIENT_RETRY_BUDGET_H_
#define LEDGER_CLIENT_RETRY_BUDGET_H_

#include <atomic>
#include <cstdint>

namespace ledger {

// Every first attempt earns `ratio` tokens, up to `max_tokens`; every retry spends one, and a
// retry without a whole token is denied. The bucket starts empty, so at any moment
//   retries granted <= ratio * first attempts
// holds exactly (not only on average), and after a calm period at most `max_tokens` retries
// can come in a burst. Thread-safe (lock-free).
class RetryBudget {
 public:
  // The cap of the bucket: a burst of retries after a calm spell is at most this many.
  static constexpr double kDefaultMaxTokens = 100;

  // `ratio` >= 0 (0 denies every retry); `max_tokens` >= 1.
  explicit RetryBudget(double ratio, double max_tokens = kDefaultMaxTokens);

  // A first attempt was sent. Any thread.
  void OnFirstAttempt();
  // Takes one token for a retry; false (nothing taken) when there is no whole token. Any thread.
  [[nodiscard]] bool TryRetry();

 private:
  // Tokens are counted in millionths so that a ratio like 0.1 adds exactly.
  static constexpr int64_t kUnit = 1'000'000;

  const int64_t earned_per_attempt_;
  const int64_t max_;
  std::atomic<int64_t> tokens_{0};
};

}  // namespace ledger

#endif  // LEDGER_CLIENT_RETRY_BUDGET_H_
