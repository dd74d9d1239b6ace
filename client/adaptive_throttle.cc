#include "client/adaptive_throttle.h"

#include <algorithm>

namespace ledger {

AdaptiveThrottle::AdaptiveThrottle(double k, Clock::duration window, int buckets)
    : k_(k),
      slice_(window / std::max(buckets, 1)),
      buckets_(static_cast<size_t>(std::max(buckets, 1))) {}

AdaptiveThrottle::Bucket& AdaptiveThrottle::BucketFor(Clock::time_point now) {
  const int64_t epoch = now.time_since_epoch() / slice_;
  Bucket& bucket = buckets_[static_cast<size_t>(epoch) % buckets_.size()];
  if (bucket.epoch != epoch) bucket = Bucket{epoch, 0, 0};  // Its slice has come round again.
  return bucket;
}

double AdaptiveThrottle::RejectProbabilityLocked(Clock::time_point now) {
  const int64_t newest = now.time_since_epoch() / slice_;
  const int64_t oldest = newest - static_cast<int64_t>(buckets_.size()) + 1;
  double requests = 0;
  double accepts = 0;
  for (const Bucket& bucket : buckets_) {
    if (bucket.epoch < oldest || bucket.epoch > newest) continue;
    requests += static_cast<double>(bucket.requests);
    accepts += static_cast<double>(bucket.accepts);
  }
  return std::max(0.0, (requests - k_ * accepts) / (requests + 1));
}

bool AdaptiveThrottle::ShouldSend(Clock::time_point now, double uniform01) {
  if (!enabled()) return true;
  absl::MutexLock lock(&mu_);
  if (uniform01 >= RejectProbabilityLocked(now)) return true;
  ++BucketFor(now).requests;  // Refused here: a request the server will never accept.
  return false;
}

void AdaptiveThrottle::CountAnswer(Clock::time_point now, bool accepted) {
  if (!enabled()) return;
  absl::MutexLock lock(&mu_);
  Bucket& bucket = BucketFor(now);
  ++bucket.requests;
  if (accepted) ++bucket.accepts;
}

double AdaptiveThrottle::RejectProbability(Clock::time_point now) {
  if (!enabled()) return 0;
  absl::MutexLock lock(&mu_);
  return RejectProbabilityLocked(now);
}

}  // namespace ledger
