#include "client/loadtest_stats.h"

#include <utility>

namespace ledger {

void Stats::RecordCall(grpc::StatusCode code, bool answered, std::chrono::nanoseconds latency,
                       bool measured) {
  absl::MutexLock lock(&mu_);
  RecordInterval(code, answered, latency);
  if (!measured) return;  // Warm-up calls are verified, not reported.
  ++codes_[CodeIndex(code)];
  ++attempted_;
  if (code == grpc::StatusCode::OK) ok_.Record(latency);
  if (code == grpc::StatusCode::RESOURCE_EXHAUSTED) shed_.Record(latency);
}

void Stats::RecordOperations(const std::vector<OperationOutcome>& outcomes, bool measured,
                             std::optional<std::chrono::nanoseconds> unary_latency) {
  absl::MutexLock lock(&mu_);
  for (const OperationOutcome& outcome : outcomes) {
    if (outcome.code == grpc::StatusCode::OK) ++interval_.operations_ok;
    if (!measured) continue;
    const size_t code = CodeIndex(outcome.code);
    ++operation_codes_[code];
    OpStats& by_op = ops_[CallKindIndex(outcome.op)];
    ++by_op.codes[code];
    if (outcome.effect == CallEffect::kNotApplied) ++by_op.not_applied_codes[code];
    if (outcome.code == grpc::StatusCode::OK && unary_latency.has_value()) {
      by_op.ok.Record(*unary_latency);
    }
    if (outcome.shard >= 0) {
      ++shard_calls_[outcome.shard];
      if (outcome.code == grpc::StatusCode::RESOURCE_EXHAUSTED) ++shard_sheds_[outcome.shard];
    }
  }
}

void Stats::CountNotSent() {
  absl::MutexLock lock(&mu_);
  ++not_sent_;
}

void Stats::CountNotSentLate() {
  absl::MutexLock lock(&mu_);
  ++not_sent_late_;
}

void Stats::CountNotSentThrottled() {
  absl::MutexLock lock(&mu_);
  ++not_sent_throttled_;
}

void Stats::CountRetry(RetryEvent event) {
  absl::MutexLock lock(&mu_);
  ++retries_[static_cast<size_t>(event)];
}

void Stats::RecordShedAttempt(std::chrono::nanoseconds latency) {
  absl::MutexLock lock(&mu_);
  shed_attempts_.Record(latency);
}

void Stats::RecordOkAttempt(std::chrono::nanoseconds latency) {
  absl::MutexLock lock(&mu_);
  ok_attempts_.Record(latency);
}

uint64_t Stats::Snapshot::operations() const {
  uint64_t total = 0;
  for (uint64_t n : operation_codes) total += n;
  return total;
}

Stats::Snapshot Stats::Take() const {
  absl::MutexLock lock(&mu_);
  Snapshot taken;
  taken.ok = ok_;
  taken.shed = shed_;
  taken.shed_attempts = shed_attempts_;
  taken.ok_attempts = ok_attempts_;
  taken.codes = codes_;
  taken.attempted = attempted_;
  taken.not_sent = not_sent_;
  taken.not_sent_late = not_sent_late_;
  taken.not_sent_throttled = not_sent_throttled_;
  taken.shard_calls = shard_calls_;
  taken.shard_sheds = shard_sheds_;
  taken.retries = retries_;
  taken.ops = ops_;
  taken.operation_codes = operation_codes_;
  return taken;
}

Stats::Interval Stats::TakeInterval() {
  absl::MutexLock lock(&mu_);
  Interval taken = std::move(interval_);
  interval_ = Interval{};
  interval_.answered_ever = taken.answered_ever;
  return taken;
}

void Stats::RecordInterval(grpc::StatusCode code, bool answered, std::chrono::nanoseconds latency) {
  if (code == grpc::StatusCode::OK) {
    interval_.ok.Record(latency);
  } else if (code == grpc::StatusCode::RESOURCE_EXHAUSTED) {
    ++interval_.shed;
  } else if (!answered) {
    ++interval_.unknown;
    interval_.last_unknown = StatusCodeName(code);
  } else {
    ++interval_.refused;
  }
  if (answered) ++interval_.answered_ever;
}

}  // namespace ledger
