// Defines `PowerOfTwoHistogram`, a histogram with power-of-two buckets that one thread at a time
// records into without locks or read-modify-write instructions, and that a scrape reads
// concurrently. LogHistogram (durations) and BatchSizeHistogram (counts) are its two uses.
//
// Why not prometheus::Histogram: its Observe takes a mutex, searches the buckets linearly and
// adds to a double with a compare-and-swap loop, which on the shard's hot path (two observations
// per message, ~100 ns of work per message) cost more than the work itself; docs/benchmarks.md
// has the figures.
#ifndef LEDGER_METRICS_POWER_OF_TWO_HISTOGRAM_H_
#define LEDGER_METRICS_POWER_OF_TWO_HISTOGRAM_H_

#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "prometheus/client_metric.h"

namespace ledger {

// Bucket upper bounds are kFirstBound × 2^i for i in [0, kBuckets), then +Inf.
//
// Thread contract: Record is called by one thread at a time, and successive recording threads
// must be ordered by a happens-before edge (the shard's drain token provides it); Collect may be
// called from any thread at any time and sees a recent, internally consistent-enough snapshot
// (the count is derived from the buckets, so _count always equals the +Inf bucket).
template <uint64_t kFirstBound, size_t kBucketCount>
class PowerOfTwoHistogram {
 public:
  static constexpr size_t kBuckets = kBucketCount;

  // The bucket a value falls in: the smallest i with value <= kFirstBound × 2^i, or kBuckets
  // (+Inf) past the last bound.
  static constexpr size_t BucketOf(uint64_t value) {
    if (value <= kFirstBound) return 0;
    const auto index = static_cast<size_t>(std::bit_width((value - 1) / kFirstBound));
    return index < kBuckets ? index : kBuckets;
  }

  static constexpr uint64_t UpperBound(size_t bucket) { return kFirstBound << bucket; }

  void Record(uint64_t value) {
    Bump(counts_[BucketOf(value)], 1);
    Bump(sum_, value);
  }

  // Fills `metric.histogram` (cumulative buckets, +Inf last), with bounds and sum multiplied by
  // `unit` (1e-9 turns nanoseconds into Prometheus's seconds). Any thread.
  void Collect(prometheus::ClientMetric& metric, double unit) const {
    uint64_t cumulative = 0;
    metric.histogram.bucket.clear();
    metric.histogram.bucket.reserve(kBuckets + 1);
    for (size_t i = 0; i <= kBuckets; ++i) {
      cumulative += counts_[i].load(std::memory_order_relaxed);
      metric.histogram.bucket.push_back(
          {cumulative, i < kBuckets ? static_cast<double>(UpperBound(i)) * unit
                                    : std::numeric_limits<double>::infinity()});
    }
    metric.histogram.sample_count = cumulative;
    metric.histogram.sample_sum = static_cast<double>(sum_.load(std::memory_order_relaxed)) * unit;
  }

 private:
  // A plain load and store, not fetch_add: there is one writer at a time (see the class comment),
  // and a scrape only needs each word to be read whole.
  static void Bump(std::atomic<uint64_t>& counter, uint64_t by) {
    counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }

  std::array<std::atomic<uint64_t>, kBuckets + 1> counts_{};
  std::atomic<uint64_t> sum_{0};
};

}  // namespace ledger

#endif  // LEDGER_METRICS_POWER_OF_TWO_HISTOGRAM_H_
