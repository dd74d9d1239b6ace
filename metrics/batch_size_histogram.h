// Defines `BatchSizeHistogram`: how many messages a shard drained per batch, in buckets 1, 2, 4,
// ... 65536 (kMaxBatchMax), then +Inf, recorded without locks (see PowerOfTwoHistogram).
#ifndef LEDGER_METRICS_BATCH_SIZE_HISTOGRAM_H_
#define LEDGER_METRICS_BATCH_SIZE_HISTOGRAM_H_

#include "metrics/power_of_two_histogram.h"
#include "prometheus/client_metric.h"

namespace ledger {

class BatchSizeHistogram {
 public:
  void Record(uint64_t size) { buckets_.Record(size); }
  // Any thread.
  void Collect(prometheus::ClientMetric& metric) const { buckets_.Collect(metric, 1.0); }

 private:
  PowerOfTwoHistogram<1, 17> buckets_;
};

}  // namespace ledger

#endif  // LEDGER_METRICS_BATCH_SIZE_HISTOGRAM_H_
