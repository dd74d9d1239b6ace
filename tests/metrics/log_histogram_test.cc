#include "metrics/log_histogram.h"

#include <chrono>
#include <cmath>

#include "gtest/gtest.h"
#include "metrics/batch_size_histogram.h"

namespace ledger {
namespace {

using std::chrono::nanoseconds;

TEST(LogHistogramTest, BucketBoundsAreInclusiveAndDoubleEachTime) {
  struct Case {
    int64_t nanos;
    size_t bucket;
  };
  for (const Case& c :
       {Case{0, 0}, Case{1, 0}, Case{100, 0}, Case{101, 1}, Case{200, 1}, Case{201, 2},
        Case{400, 2}, Case{401, 3}, Case{1'000'000, 14}, Case{100LL << 27, 27},
        Case{(100LL << 27) + 1, LogHistogram::kBuckets}, Case{INT64_MAX, LogHistogram::kBuckets}}) {
    EXPECT_EQ(LogHistogram::BucketOf(c.nanos), c.bucket) << c.nanos;
  }
  EXPECT_DOUBLE_EQ(LogHistogram::UpperBoundSeconds(0), 1e-7);
  EXPECT_DOUBLE_EQ(LogHistogram::UpperBoundSeconds(27), 13.4217728);
}

TEST(LogHistogramTest, CollectGivesCumulativeBucketsCountAndSum) {
  LogHistogram histogram;
  histogram.Record(nanoseconds(50));              // bucket 0
  histogram.Record(nanoseconds(150));             // bucket 1
  histogram.Record(nanoseconds(150));             // bucket 1
  histogram.Record(nanoseconds(20'000'000'000));  // +Inf
  histogram.Record(nanoseconds(-5));              // clamped to 0: bucket 0
  prometheus::ClientMetric metric;
  histogram.Collect(metric);
  ASSERT_EQ(metric.histogram.bucket.size(), LogHistogram::kBuckets + 1);
  EXPECT_EQ(metric.histogram.bucket[0].cumulative_count, 2u);
  EXPECT_EQ(metric.histogram.bucket[1].cumulative_count, 4u);
  EXPECT_EQ(metric.histogram.bucket[LogHistogram::kBuckets - 1].cumulative_count, 4u);
  EXPECT_EQ(metric.histogram.bucket.back().cumulative_count, 5u);
  EXPECT_TRUE(std::isinf(metric.histogram.bucket.back().upper_bound));
  EXPECT_EQ(metric.histogram.sample_count, 5u);
  EXPECT_DOUBLE_EQ(metric.histogram.sample_sum, 20.00000035);
}

}  // namespace
}  // namespace ledger

namespace ledger {
namespace {

TEST(BatchSizeHistogramTest, BucketsArePowersOfTwoFromOneAndTheSumIsTheMessages) {
  BatchSizeHistogram histogram;
  for (uint64_t size : {1, 2, 3, 4, 5, 256, 100000}) histogram.Record(size);
  prometheus::ClientMetric metric;
  histogram.Collect(metric);
  ASSERT_EQ(metric.histogram.bucket.size(), 18u);
  EXPECT_EQ(metric.histogram.bucket[0].upper_bound, 1);
  EXPECT_EQ(metric.histogram.bucket[0].cumulative_count, 1u);  // 1
  EXPECT_EQ(metric.histogram.bucket[1].cumulative_count, 2u);  // 2
  EXPECT_EQ(metric.histogram.bucket[2].cumulative_count, 4u);  // 3, 4
  EXPECT_EQ(metric.histogram.bucket[3].cumulative_count, 5u);  // 5
  EXPECT_EQ(metric.histogram.bucket[8].upper_bound, 256);
  EXPECT_EQ(metric.histogram.bucket[8].cumulative_count, 6u);  // 256
  EXPECT_EQ(metric.histogram.bucket[16].upper_bound, 65536);
  EXPECT_EQ(metric.histogram.bucket[16].cumulative_count, 6u);
  EXPECT_EQ(metric.histogram.bucket[17].cumulative_count, 7u);  // 100000: +Inf
  EXPECT_EQ(metric.histogram.sample_count, 7u);
  EXPECT_EQ(metric.histogram.sample_sum, 1 + 2 + 3 + 4 + 5 + 256 + 100000);
}

}  // namespace
}  // namespace ledger
