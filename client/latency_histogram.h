// Defines `LatencyHistogram`, a log-linear (HDR-style) histogram of durations for the load-test
// client: every value from 1 ns to about 18 minutes lands in a bucket no wider than 1/128 of its
// value, so a reported percentile is within 0.4% of the true one (goal: 1% from 1 µs to 60 s).
#ifndef LEDGER_CLIENT_LATENCY_HISTOGRAM_H_
#define LEDGER_CLIENT_LATENCY_HISTOGRAM_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ledger {

// Not thread-safe: one writer, or a mutex around it; Merge combines per-thread histograms.
class LatencyHistogram {
 public:
  LatencyHistogram();

  void Record(std::chrono::nanoseconds duration);
  void Merge(const LatencyHistogram& other);

  uint64_t count() const { return count_; }
  std::chrono::nanoseconds max() const { return std::chrono::nanoseconds(max_nanos_); }

  // The value at quantile `q` (0 < q <= 1): the midpoint of the bucket holding the ceil(q·n)-th
  // smallest value (exact below 256 ns), capped at max(); exactly max() for the largest rank.
  // Zero when empty.
  std::chrono::nanoseconds Percentile(double q) const;

  // Bucket layout, exposed for tests: values below 256 ns have one bucket each; above, each
  // power of two [2^e, 2^(e+1)) is split into 128 equal buckets.
  static size_t BucketOf(uint64_t nanos);
  static uint64_t BucketLowest(size_t bucket);
  static uint64_t BucketWidth(size_t bucket);

 private:
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  int64_t max_nanos_ = 0;
};

}  // namespace ledger

#endif  // LEDGER_CLIENT_LATENCY_HISTOGRAM_H_
