// Defines `LogHistogram`, the latency histogram of every shard series: power-of-two buckets from
// 100 ns to 13.4 s, recorded without locks (see PowerOfTwoHistogram for the thread contract).
#ifndef LEDGER_METRICS_LOG_HISTOGRAM_H_
#define LEDGER_METRICS_LOG_HISTOGRAM_H_

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "metrics/power_of_two_histogram.h"
#include "prometheus/client_metric.h"

namespace ledger {

// Bucket upper bounds are 100 ns × 2^i for i in [0, kBuckets): 100 ns, 200 ns, ... 13.4 s, then
// +Inf. That resolves both ends the service has: an in-memory handler takes a few hundred
// nanoseconds, a wait behind a backlog or a journal sync takes milliseconds, and a wait during a
// shutdown runs to the 10 s grace. Factor 2 keeps it to 28 buckets a series.
class LogHistogram {
 public:
  static constexpr size_t kBuckets = 28;
  static constexpr int64_t kFirstBoundNanos = 100;

  static constexpr size_t BucketOf(int64_t nanos) {
    return Buckets::BucketOf(nanos < 0 ? 0 : static_cast<uint64_t>(nanos));
  }
  static constexpr double UpperBoundSeconds(size_t bucket) {
    return static_cast<double>(Buckets::UpperBound(bucket)) * 1e-9;
  }

  // Negative durations (a clock that stepped) count as 0.
  void Record(std::chrono::nanoseconds duration) {
    buckets_.Record(duration.count() < 0 ? 0 : static_cast<uint64_t>(duration.count()));
  }

  // In seconds. Any thread.
  void Collect(prometheus::ClientMetric& metric) const { buckets_.Collect(metric, 1e-9); }

 private:
  using Buckets = PowerOfTwoHistogram<kFirstBoundNanos, kBuckets>;
  Buckets buckets_;
};

}  // namespace ledger

#endif  // LEDGER_METRICS_LOG_HISTOGRAM_H_
