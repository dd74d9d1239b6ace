// Defines `LogHistogram`, a latency histogram with power-of-two buckets that one thread at a time
// records into without locks or read-modify-write instructions, and that a scrape reads
// concurrently.
//
// Why not prometheus::Histogram: its Observe takes a mutex, searches the buckets linearly and
// adds to a double with a compare-and-swap loop, which on the shard's hot path (two observations
// per message, ~100 ns of work per message) cost more than the work itself; docs/benchmarks.md
// has the figures.
#ifndef LEDGER_METRICS_LOG_HISTOGRAM_H_
#define LEDGER_METRICS_LOG_HISTOGRAM_H_

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "prometheus/client_metric.h"

namespace ledger {

// Bucket upper bounds are 100 ns × 2^i for i in [0, kBuckets): 100 ns, 200 ns, ... 13.4 s, then
// +Inf. That resolves both ends the service has: an in-memory handler takes a few hundred
// nanoseconds, a wait behind a backlog or a journal sync takes milliseconds, and a wait during a
// shutdown runs to the 10 s grace. Factor 2 keeps it to 28 buckets a series.
//
// Thread contract: Record is called by one thread at a time, and successive recording threads
// must be ordered by a happens-before edge (the shard's drain token provides it); Collect may be
// called from any thread at any time and sees a recent, internally consistent-enough snapshot
// (the count is derived from the buckets, so _count always equals the +Inf bucket).
class LogHistogram {
 public:
  static constexpr size_t kBuckets = 28;
  static constexpr int64_t kFirstBoundNanos = 100;

  // The bucket a duration falls in: the smallest i with duration <= 100 ns × 2^i, or kBuckets
  // (+Inf) past the last bound.
  static constexpr size_t BucketOf(int64_t nanos) {
    if (nanos <= kFirstBoundNanos) return 0;
    const auto index =
        static_cast<size_t>(std::bit_width(static_cast<uint64_t>((nanos - 1) / kFirstBoundNanos)));
    return index < kBuckets ? index : kBuckets;
  }

  static constexpr double UpperBoundSeconds(size_t bucket) {
    return static_cast<double>(kFirstBoundNanos << bucket) * 1e-9;
  }

  void Record(std::chrono::nanoseconds duration) {
    const int64_t nanos = duration.count() < 0 ? 0 : duration.count();
    Bump(counts_[BucketOf(nanos)], 1);
    Bump(sum_nanos_, static_cast<uint64_t>(nanos));
  }

  // Fills `metric.histogram` (cumulative buckets, +Inf last). Any thread.
  void Collect(prometheus::ClientMetric& metric) const {
    uint64_t cumulative = 0;
    metric.histogram.bucket.clear();
    metric.histogram.bucket.reserve(kBuckets + 1);
    for (size_t i = 0; i <= kBuckets; ++i) {
      cumulative += counts_[i].load(std::memory_order_relaxed);
      metric.histogram.bucket.push_back(
          {cumulative,
           i < kBuckets ? UpperBoundSeconds(i) : std::numeric_limits<double>::infinity()});
    }
    metric.histogram.sample_count = cumulative;
    metric.histogram.sample_sum =
        static_cast<double>(sum_nanos_.load(std::memory_order_relaxed)) * 1e-9;
  }

 private:
  // A plain load and store, not fetch_add: there is one writer at a time (see the class comment),
  // and a scrape only needs each word to be read whole.
  static void Bump(std::atomic<uint64_t>& counter, uint64_t by) {
    counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }

  std::array<std::atomic<uint64_t>, kBuckets + 1> counts_{};
  std::atomic<uint64_t> sum_nanos_{0};
};

}  // namespace ledger

#endif  // LEDGER_METRICS_LOG_HISTOGRAM_H_
