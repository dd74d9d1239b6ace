#include "client/retry_budget.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace ledger {

namespace {

int64_t Units(double tokens, int64_t unit) {
  return static_cast<int64_t>(std::llround(tokens * static_cast<double>(unit)));
}

}  // namespace

RetryBudget::RetryBudget(double ratio, double max_tokens)
    : earned_per_attempt_(Units(ratio, kUnit)), max_(Units(max_tokens, kUnit)) {
  // Callers validate their flags; these are programming errors, and they stay on.
  if (!(ratio >= 0) || !(max_tokens >= 1)) std::abort();
}

void RetryBudget::OnFirstAttempt() {
  if (earned_per_attempt_ == 0) return;
  int64_t tokens = tokens_.load(std::memory_order_relaxed);
  while (tokens < max_ &&
         !tokens_.compare_exchange_weak(tokens, std::min(max_, tokens + earned_per_attempt_),
                                        std::memory_order_relaxed)) {
  }
}

bool RetryBudget::TryRetry() {
  int64_t tokens = tokens_.load(std::memory_order_relaxed);
  while (tokens >= kUnit) {
    if (tokens_.compare_exchange_weak(tokens, tokens - kUnit, std::memory_order_relaxed)) {
      return true;
    }
  }
  return false;
}

}  // namespace ledger
