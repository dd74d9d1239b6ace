#include "client/latency_histogram.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ledger {
namespace {

using std::chrono::nanoseconds;

TEST(LatencyHistogramTest, BucketsTileTheRangeWithoutGapsOrOverlap) {
  uint64_t expected_lowest = 0;
  for (size_t bucket = 0; bucket < 4000; ++bucket) {
    ASSERT_EQ(LatencyHistogram::BucketLowest(bucket), expected_lowest) << bucket;
    EXPECT_EQ(LatencyHistogram::BucketOf(expected_lowest), bucket);
    const uint64_t last = expected_lowest + LatencyHistogram::BucketWidth(bucket) - 1;
    EXPECT_EQ(LatencyHistogram::BucketOf(last), bucket);
    expected_lowest = last + 1;
  }
}

TEST(LatencyHistogramTest, EveryBucketFrom1usTo60sIsWithin1PercentOfItsValues) {
  for (uint64_t nanos = 1'000; nanos <= 60'000'000'000ULL; nanos = nanos * 101 / 100) {
    const size_t bucket = LatencyHistogram::BucketOf(nanos);
    const double width = static_cast<double>(LatencyHistogram::BucketWidth(bucket));
    EXPECT_LE(width / static_cast<double>(LatencyHistogram::BucketLowest(bucket)), 0.01) << nanos;
  }
}

TEST(LatencyHistogramTest, PercentilesMatchExactOnesWithin1Percent) {
  std::mt19937_64 random(42);
  std::lognormal_distribution<double> latency(std::log(2'000'000.0), 1.5);  // ~2 ms, long tail.
  std::vector<int64_t> values;
  LatencyHistogram histogram;
  for (int i = 0; i < 100'000; ++i) {
    const auto nanos =
        std::clamp<int64_t>(static_cast<int64_t>(latency(random)), 1'000, 60'000'000'000LL);
    values.push_back(nanos);
    histogram.Record(nanoseconds(nanos));
  }
  std::sort(values.begin(), values.end());
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    const auto exact = static_cast<double>(
        values[static_cast<size_t>(std::ceil(q * static_cast<double>(values.size()))) - 1]);
    const auto reported = static_cast<double>(histogram.Percentile(q).count());
    EXPECT_NEAR(reported, exact, exact * 0.01) << q;
  }
  EXPECT_EQ(histogram.max().count(), values.back());
  EXPECT_EQ(histogram.count(), 100'000u);
}

TEST(LatencyHistogramTest, ExtremesOfTheRangeAndMerge) {
  LatencyHistogram a;
  LatencyHistogram b;
  a.Record(nanoseconds(1'000));
  b.Record(nanoseconds(60'000'000'000LL));
  a.Merge(b);
  EXPECT_EQ(a.count(), 2u);
  EXPECT_NEAR(static_cast<double>(a.Percentile(0.5).count()), 1'000.0, 10.0);
  EXPECT_EQ(a.Percentile(1.0).count(), 60'000'000'000LL);
  EXPECT_EQ(LatencyHistogram().Percentile(0.99).count(), 0);
}

}  // namespace
}  // namespace ledger
