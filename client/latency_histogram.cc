#include "client/latency_histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "base/check.h"

namespace ledger {
namespace {

constexpr int kSubBucketBits = 7;  // 128 buckets per power of two: width <= value / 128.
constexpr uint64_t kSubBuckets = uint64_t{1} << kSubBucketBits;
constexpr uint64_t kExactBelow = 2 * kSubBuckets;  // 256: one bucket per nanosecond below it.
constexpr int kMaxExponent = 40;                   // 2^41 ns, about 36 minutes.
constexpr size_t kBucketCount =
    kExactBelow + static_cast<size_t>(kMaxExponent - kSubBucketBits) * kSubBuckets;

}  // namespace

LatencyHistogram::LatencyHistogram() : counts_(kBucketCount, 0) {}

size_t LatencyHistogram::BucketOf(uint64_t nanos) {
  if (nanos < kExactBelow) return static_cast<size_t>(nanos);
  const int exponent = std::min(static_cast<int>(std::bit_width(nanos)) - 1, kMaxExponent);
  const int shift = exponent - kSubBucketBits;
  const uint64_t mantissa = std::min(nanos >> shift, 2 * kSubBuckets - 1);  // [128, 255]
  return kExactBelow + static_cast<size_t>(exponent - kSubBucketBits - 1) * kSubBuckets +
         static_cast<size_t>(mantissa - kSubBuckets);
}

uint64_t LatencyHistogram::BucketLowest(size_t bucket) {
  if (bucket < kExactBelow) return bucket;
  const size_t octave = (bucket - kExactBelow) / kSubBuckets;  // 0 for [256, 512).
  const uint64_t mantissa = kSubBuckets + (bucket - kExactBelow) % kSubBuckets;
  return mantissa << (octave + 1);
}

uint64_t LatencyHistogram::BucketWidth(size_t bucket) {
  if (bucket < kExactBelow) return 1;
  return uint64_t{1} << ((bucket - kExactBelow) / kSubBuckets + 1);
}

void LatencyHistogram::Record(std::chrono::nanoseconds duration) {
  const int64_t nanos = std::max<int64_t>(duration.count(), 0);
  ++counts_[BucketOf(static_cast<uint64_t>(nanos))];
  ++count_;
  max_nanos_ = std::max(max_nanos_, nanos);
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  for (size_t i = 0; i < kBucketCount; ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  max_nanos_ = std::max(max_nanos_, other.max_nanos_);
}

std::chrono::nanoseconds LatencyHistogram::Percentile(double q) const {
  LEDGER_CHECK(q > 0 && q <= 1);
  if (count_ == 0) return std::chrono::nanoseconds(0);
  const auto rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(count_)));
  if (rank >= count_) return max();  // The largest value is known exactly.
  uint64_t seen = 0;
  for (size_t bucket = 0; bucket < kBucketCount; ++bucket) {
    seen += counts_[bucket];
    if (seen >= rank) {
      const uint64_t width = BucketWidth(bucket);
      const uint64_t middle = BucketLowest(bucket) + (width - 1) / 2;
      return std::chrono::nanoseconds(std::min<int64_t>(static_cast<int64_t>(middle), max_nanos_));
    }
  }
  return max();
}

}  // namespace ledger
