// Defines `Stats`, everything ledger-loadtest measures: calls by code and latency, operations by
// kind, code and shard, retries after pushback, calls not sent, the NOT_LEADER refusals of a
// cluster's followers, the OK operations of each second of the run, and the progress interval.
#ifndef LEDGER_CLIENT_LOADTEST_STATS_H_
#define LEDGER_CLIENT_LOADTEST_STATS_H_

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "base/status_code_names.h"
#include "client/call_kind.h"
#include "client/call_outcome.h"
#include "client/latency_histogram.h"
#include "grpcpp/support/status_code_enum.h"

namespace ledger {

// A status code's index in the counts (out-of-range codes count as UNKNOWN, 2).
inline size_t CodeIndex(grpc::StatusCode code) {
  return static_cast<size_t>(code) < kStatusCodeCount ? static_cast<size_t>(code) : 2;
}

// The final code of one operation, and the shard of its account (-1: not known).
struct OperationOutcome {
  CallKind op = CallKind::kDeposit;
  grpc::StatusCode code = grpc::StatusCode::OK;
  int32_t shard = -1;
  // What it did to the money (client/call_outcome.h).
  CallEffect effect = CallEffect::kApplied;
  // Its call ended refused NOT_LEADER (no leader found within the hops): applied nothing, and
  // counted as NOT_LEADER rather than by its code (UNAVAILABLE, which otherwise means unknown).
  bool not_leader = false;
};

// The most seconds the timeline of OK operations holds (Snapshot::ok_by_second); the OK
// operations of later seconds count in its last one.
inline constexpr size_t kTimelineSecondsMax = 3600;

// Thread-safe.
class Stats {
 public:
  explicit Stats(int32_t shards) : shard_calls_(shards), shard_sheds_(shards) {}

  // A finished call (unary, or one Apply whatever its results), with its final code and its
  // latency from the intended start of its first attempt. Every call counts in the progress
  // interval; only measured ones in the report.
  // `answered`: the status was the server's answer (ServerAnswered). `not_leader`: it ended
  // refused NOT_LEADER, counted as such rather than by its code.
  void RecordCall(grpc::StatusCode code, bool answered, std::chrono::nanoseconds latency,
                  bool measured, bool not_leader = false);
  // Finished operations, all of one call (a unary call's one, or some of an Apply's: those
  // refused with RESOURCE_EXHAUSTED and retried finish later). `unary_latency`: the call's
  // latency, recorded per kind of operation for a unary call; nullopt for an Apply, whose
  // operations have no latency of their own.
  void RecordOperations(const std::vector<OperationOutcome>& outcomes, bool measured,
                        std::optional<std::chrono::nanoseconds> unary_latency);
  // A NOT_LEADER refusal of any call of the run, the settling and verification reads included;
  // `followed`: the same request was sent on, to the leader it named or the next --target.
  void CountNotLeader(bool followed);
  // From now on, operations that end OK count in the timeline (ok_by_second, the longest gap
  // between two OK operations), second 0 starting at `start`: the start of the run.
  void StartTimeline(std::chrono::steady_clock::time_point start);
  // Open loop: a call not sent because --max_in_flight calls were in flight.
  void CountNotSent();
  // Open loop: a call not sent because the sender reached it after --max_send_delay.
  void CountNotSentLate();
  // Open loop: a call refused locally by the adaptive throttle (--throttle_k).
  void CountNotSentThrottled();

  // What became of a shed call that carried a valid pushback, or of a retried call at its end.
  enum class RetryEvent {
    kSent,
    kDeniedByBudget,
    kDeniedByDeadline,
    kDeniedByMaxRetries,
    kOkAfterRetry
  };
  static constexpr size_t kRetryEvents = 5;
  void CountRetry(RetryEvent event);
  // One attempt of a measured call shed whole, retried or not, timed from that attempt's start:
  // how quickly the server refuses, which a call's own latency (from its first attempt, waits for
  // pushback included) does not show once calls are retried.
  void RecordShedAttempt(std::chrono::nanoseconds latency);
  // The attempt that ended an OK measured call, timed from that attempt's start: how long the
  // server took with the work it admitted, without the refusals and pushback waits before it.
  void RecordOkAttempt(std::chrono::nanoseconds latency);

  // One kind of operation's measured operations: their codes, and the latency of the OK ones
  // (unary calls only).
  struct OpStats {
    LatencyHistogram ok;
    std::array<uint64_t, kStatusCodeCount> codes{};
    // Of those, the ones that applied nothing (refused by a rule, or shed), by code.
    std::array<uint64_t, kStatusCodeCount> not_applied_codes{};
    uint64_t calls() const {
      uint64_t total = 0;
      for (uint64_t n : codes) total += n;
      return total;
    }
  };

  struct Snapshot {
    LatencyHistogram ok, shed, shed_attempts, ok_attempts;
    std::array<uint64_t, kStatusCodeCount> codes{};  // Calls.
    uint64_t attempted = 0, not_sent = 0, not_sent_late = 0, not_sent_throttled = 0;
    std::vector<uint64_t> shard_calls, shard_sheds;  // Operations.
    std::array<uint64_t, kRetryEvents> retries{};    // Index: RetryEvent.
    std::array<OpStats, kCallKinds.size()> ops;      // Index: CallKindIndex.
    std::array<uint64_t, kStatusCodeCount> operation_codes{};
    // NOT_LEADER: refusals (whole run) and those followed; measured calls and operations that
    // ended refused (counted here instead of in codes and operation_codes).
    uint64_t not_leader_refusals = 0, not_leader_followed = 0;
    uint64_t not_leader_calls = 0, not_leader_operations = 0;
    // Operations (warm-up included) that ended OK in each second since StartTimeline.
    std::vector<uint64_t> ok_by_second;
    // The longest time without an operation ending OK, from StartTimeline to the last one, and
    // when it ended (from StartTimeline).
    std::chrono::nanoseconds longest_ok_gap{0}, longest_ok_gap_end{0};
    uint64_t retry(RetryEvent event) const { return retries[static_cast<size_t>(event)]; }
    const OpStats& op(CallKind kind) const { return ops[CallKindIndex(kind)]; }
    uint64_t operations() const;
  };
  Snapshot Take() const;

  // Calls finished since the last TakeInterval, warm-up included, for the progress line.
  struct Interval {
    LatencyHistogram ok;
    uint64_t refused = 0;  // A ledger rule's answer (FAILED_PRECONDITION, NOT_FOUND, ...).
    uint64_t shed = 0;
    uint64_t unknown = 0;  // DEADLINE_EXCEEDED, UNAVAILABLE, CANCELLED: outcome not known.
    std::string last_unknown;
    uint64_t answered_ever = 0;
    uint64_t operations_ok = 0;  // Operations that ended OK.
  };
  Interval TakeInterval();

 private:
  void RecordInterval(grpc::StatusCode code, bool answered, std::chrono::nanoseconds latency)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One operation ended OK at `now`: the timeline's count of its second, and the gap since the
  // one before.
  void RecordOkInTimeline(std::chrono::steady_clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  LatencyHistogram ok_ ABSL_GUARDED_BY(mu_);
  LatencyHistogram shed_ ABSL_GUARDED_BY(mu_);
  LatencyHistogram shed_attempts_ ABSL_GUARDED_BY(mu_);
  LatencyHistogram ok_attempts_ ABSL_GUARDED_BY(mu_);
  std::array<uint64_t, kStatusCodeCount> codes_ ABSL_GUARDED_BY(mu_){};
  uint64_t attempted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t not_sent_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t not_sent_late_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t not_sent_throttled_ ABSL_GUARDED_BY(mu_) = 0;
  std::array<uint64_t, kRetryEvents> retries_ ABSL_GUARDED_BY(mu_){};
  std::array<OpStats, kCallKinds.size()> ops_ ABSL_GUARDED_BY(mu_);
  std::array<uint64_t, kStatusCodeCount> operation_codes_ ABSL_GUARDED_BY(mu_){};
  uint64_t not_leader_refusals_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t not_leader_followed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t not_leader_calls_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t not_leader_operations_ ABSL_GUARDED_BY(mu_) = 0;
  bool timeline_started_ ABSL_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point timeline_start_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point last_ok_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> ok_by_second_ ABSL_GUARDED_BY(mu_);
  std::chrono::nanoseconds longest_ok_gap_ ABSL_GUARDED_BY(mu_){0};
  std::chrono::nanoseconds longest_ok_gap_end_ ABSL_GUARDED_BY(mu_){0};
  std::vector<uint64_t> shard_calls_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> shard_sheds_ ABSL_GUARDED_BY(mu_);
  Interval interval_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ledger

#endif  // LEDGER_CLIENT_LOADTEST_STATS_H_
