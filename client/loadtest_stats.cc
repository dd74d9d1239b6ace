#include "client/loadtest_stats.h"

#include <algorithm>
#include <utility>

namespace ledger {

void Stats::RecordCall(grpc::StatusCode code, bool answered, std::chrono::nanoseconds latency,
                       bool measured, bool not_leader) {
  absl::MutexLock lock(&mu_);
  RecordInterval(code, answered, latency);
  if (!measured) return;  // Warm-up calls are verified, not reported.
  ++attempted_;
  if (not_leader) {
    ++not_leader_calls_;
    return;
  }
  ++codes_[CodeIndex(code)];
  if (code == grpc::StatusCode::OK) ok_.Record(latency);
  if (code == grpc::StatusCode::RESOURCE_EXHAUSTED) shed_.Record(latency);
}

void Stats::RecordOperations(const std::vector<OperationOutcome>& outcomes, bool measured,
                             std::optional<std::chrono::nanoseconds> unary_latency) {
  const auto now = std::chrono::steady_clock::now();
  absl::MutexLock lock(&mu_);
  for (const OperationOutcome& outcome : outcomes) {
    if (outcome.code == grpc::StatusCode::OK) {
      ++interval_.operations_ok;
      RecordOkInTimeline(now);
    }
    if (!measured) continue;
    const size_t code = CodeIndex(outcome.code);
    if (outcome.not_leader) {
      ++not_leader_operations_;
    } else {
      ++operation_codes_[code];
    }
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

void Stats::CountNotLeader(bool followed) {
  absl::MutexLock lock(&mu_);
  ++not_leader_refusals_;
  if (followed) ++not_leader_followed_;
}

void Stats::StartTimeline(std::chrono::steady_clock::time_point start) {
  absl::MutexLock lock(&mu_);
  timeline_started_ = true;
  timeline_start_ = start;
  last_ok_ = start;
  ok_by_second_.clear();
  longest_ok_gap_ = std::chrono::nanoseconds(0);
  longest_ok_gap_end_ = std::chrono::nanoseconds(0);
}

void Stats::RecordOkInTimeline(std::chrono::steady_clock::time_point now) {
  if (!timeline_started_ || now < timeline_start_) return;
  const auto second = static_cast<size_t>(
      std::chrono::duration_cast<std::chrono::seconds>(now - timeline_start_).count());
  const size_t index = std::min(second, kTimelineSecondsMax - 1);
  if (ok_by_second_.size() <= index) ok_by_second_.resize(index + 1, 0);
  ++ok_by_second_[index];
  if (now > last_ok_) {
    if (now - last_ok_ > longest_ok_gap_) {
      longest_ok_gap_ = now - last_ok_;
      longest_ok_gap_end_ = now - timeline_start_;
    }
    last_ok_ = now;
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
  return total + not_leader_operations;
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
  taken.not_leader_refusals = not_leader_refusals_;
  taken.not_leader_followed = not_leader_followed_;
  taken.not_leader_calls = not_leader_calls_;
  taken.not_leader_operations = not_leader_operations_;
  taken.ok_by_second = ok_by_second_;
  taken.longest_ok_gap = longest_ok_gap_;
  taken.longest_ok_gap_end = longest_ok_gap_end_;
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
