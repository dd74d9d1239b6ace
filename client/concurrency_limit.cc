#include "client/concurrency_limit.h"

#include <algorithm>

namespace ledger {

ConcurrencyLimit::ConcurrencyLimit(double min, double max, double backoff)
    : min_(min), max_(max), backoff_(backoff), limit_(max) {}

void ConcurrencyLimit::OnAnswer(bool accepted) {
  absl::MutexLock lock(&mu_);
  answers_until_next_cut_ = std::max(0.0, answers_until_next_cut_ - 1);
  if (accepted) {
    limit_ = std::min(max_, limit_ + 1 / limit_);
  } else if (answers_until_next_cut_ == 0) {
    limit_ = std::max(min_, limit_ * backoff_);
    answers_until_next_cut_ = limit_;  // About one round trip of answers.
  }
}

bool ConcurrencyLimit::Allows(int64_t in_flight) {
  absl::MutexLock lock(&mu_);
  return static_cast<double>(in_flight) < limit_;
}

double ConcurrencyLimit::limit() {
  absl::MutexLock lock(&mu_);
  return limit_;
}

}  // namespace ledger
