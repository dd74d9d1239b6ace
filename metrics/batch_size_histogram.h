// Defines `BatchSizeHistogram`: how many messages a shard drained per batch, in power-of-two
// buckets, recorded by one thread at a time without locks (the same contract as LogHistogram).
#ifndef LEDGER_METRICS_BATCH_SIZE_HISTOGRAM_H_
#define LEDGER_METRICS_BATCH_SIZE_HISTOGRAM_H_

#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "prometheus/client_metric.h"

namespace ledger {

// Bucket upper bounds 1, 2, 4, ... 65536 (kMaxBatchMax), then +Inf.
class BatchSizeHistogram {
 public:
  static constexpr size_t kBuckets = 17;

  // The smallest i with size <= 2^i.
  static constexpr size_t BucketOf(uint64_t size) {
    if (size <= 1) return 0;
    const auto index = static_cast<size_t>(std::bit_width(size - 1));
    return index < kBuckets ? index : kBuckets;
  }

  void Record(uint64_t size) {
    Bump(counts_[BucketOf(size)], 1);
    Bump(sum_, size);
  }

  // Fills `metric.histogram` (cumulative buckets, +Inf last). Any thread.
  void Collect(prometheus::ClientMetric& metric) const {
    uint64_t cumulative = 0;
    metric.histogram.bucket.clear();
    metric.histogram.bucket.reserve(kBuckets + 1);
    for (size_t i = 0; i <= kBuckets; ++i) {
      cumulative += counts_[i].load(std::memory_order_relaxed);
      metric.histogram.bucket.push_back(
          {cumulative, i < kBuckets ? static_cast<double>(uint64_t{1} << i)
                                    : std::numeric_limits<double>::infinity()});
    }
    metric.histogram.sample_count = cumulative;
    metric.histogram.sample_sum = static_cast<double>(sum_.load(std::memory_order_relaxed));
  }

 private:
  // One writer at a time: a plain load and store (see LogHistogram::Bump).
  static void Bump(std::atomic<uint64_t>& counter, uint64_t by) {
    counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }

  std::array<std::atomic<uint64_t>, kBuckets + 1> counts_{};
  std::atomic<uint64_t> sum_{0};
};

}  // namespace ledger

#endif  // LEDGER_METRICS_BATCH_SIZE_HISTOGRAM_H_
