#include "shard/admission_control.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace ledger {

const char* RefusalReasonName(RefusalReason reason) {
  switch (reason) {
    case RefusalReason::kInFlightLimit:
      return "in_flight_limit";
    case RefusalReason::kMailboxFull:
      return "mailbox_full";
    case RefusalReason::kShuttingDown:
      return "shutting_down";
    case RefusalReason::kFairShare:
      return "fair_share";
  }
  return "unknown";
}

double DrainRate::PerSecond(Clock::time_point now) {
  MutexLock lock(&mu_);
  const auto elapsed = now - sample_time_;
  if (elapsed < kWindow) return per_second_;
  const uint64_t answered = answered_.load(std::memory_order_relaxed);
  // A window that spans an idle spell says little about the rate now: start measuring afresh.
  per_second_ = elapsed > kStaleAfter ? 0
                                      : static_cast<double>(answered - sample_answered_) /
                                            std::chrono::duration<double>(elapsed).count();
  sample_time_ = now;
  sample_answered_ = answered;
  return per_second_;
}

std::chrono::milliseconds PushbackFor(double queued, double per_second) {
  if (per_second <= 0) return kUnmeasuredPushback;
  const double ms = std::ceil(std::max(queued, 1.0) * 1000.0 / per_second);
  if (ms >= static_cast<double>(kMaxPushback.count())) return kMaxPushback;
  return std::max(kMinPushback, std::chrono::milliseconds(static_cast<int64_t>(ms)));
}

AdmissionControl::AdmissionControl(int64_t max_in_flight, int32_t num_shards, Clock::time_point now)
    : max_in_flight_(max_in_flight),
      num_shards_(num_shards),
      shares_(max_in_flight, now),
      server_rate_(now) {
  LEDGER_CHECK(max_in_flight >= kMaxInFlightMin && max_in_flight <= kMaxInFlightMax);
  LEDGER_CHECK(num_shards > 0);
  shard_rates_.reserve(static_cast<size_t>(num_shards));
  for (int32_t i = 0; i < num_shards; ++i) shard_rates_.push_back(std::make_unique<DrainRate>(now));
}

std::chrono::milliseconds AdmissionControl::PushbackAfterInFlightLimit(Clock::time_point now) {
  return PushbackFor(static_cast<double>(in_flight()), server_rate_.PerSecond(now));
}

std::chrono::milliseconds AdmissionControl::PushbackAfterFairShare(
    const ClientShares::Refusal& share, Clock::time_point now) {
  const double clients = static_cast<double>(std::max<size_t>(share.clients, 1));
  return PushbackFor(static_cast<double>(share.in_flight), server_rate_.PerSecond(now) / clients);
}

std::chrono::milliseconds AdmissionControl::PushbackAfterFullMailbox(int32_t shard, size_t queued,
                                                                     Clock::time_point now) {
  LEDGER_CHECK(shard >= 0 && shard < num_shards_);
  return PushbackFor(static_cast<double>(queued), shard_rates_[shard]->PerSecond(now));
}

}  // namespace ledger
