// Defines `AdmissionControl`: the server-wide bound on ledger calls admitted and not yet answered
// (ledgerd --max_in_flight), the count of calls refused by reason, and the pushback a refused
// client is told to wait before it retries (gRPC's grpc-retry-pushback-ms), from the rate at which
// the server, or one shard, answers calls.
//
// Why a bound on calls in flight, checked before anything else a handler does: a call the server
// has accepted costs it CPU and memory until it is answered, and every call queued behind it waits
// longer. Beyond the bound a new call is refused at once, before it is parsed or copied, so that an
// overload costs the server as little as gRPC allows and the calls it did admit stay fast (see
// docs/overload.md for the figures behind the default).
#ifndef LEDGER_SHARD_ADMISSION_CONTROL_H_
#define LEDGER_SHARD_ADMISSION_CONTROL_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "base/annotated_mutex.h"
#include "base/option_bound.h"
#include "shard/client_shares.h"
#include "shard/mailbox.h"

namespace ledger {

// Bounds of --max_in_flight.
inline constexpr int64_t kMaxInFlightMin = 1;
inline constexpr int64_t kMaxInFlightMax = 1 << 24;
inline constexpr OptionBound kMaxInFlightBound{"--max_in_flight", kMaxInFlightMin, kMaxInFlightMax};

// The pushback told to a refused client is clamped to this range: at least a millisecond, so that
// a retry is never immediate, and at most two seconds, so that a stalled measurement never tells
// clients to stay away for long.
inline constexpr std::chrono::milliseconds kMinPushback{1};
inline constexpr std::chrono::milliseconds kMaxPushback{2000};
// The pushback while no rate has been measured yet (the first refusals after an idle spell).
inline constexpr std::chrono::milliseconds kUnmeasuredPushback{100};

// Why a call was refused: the reason label of ledger_refused_total.
enum class RefusalReason : uint8_t {
  kInFlightLimit,  // --max_in_flight calls were already in flight (RESOURCE_EXHAUSTED).
  kMailboxFull,    // Its shard's mailbox was full (RESOURCE_EXHAUSTED).
  kShuttingDown,   // The server is stopping (UNAVAILABLE).
  kFairShare,      // Its client already held its share of --max_in_flight (RESOURCE_EXHAUSTED).
};
inline constexpr size_t kRefusalReasonCount = 4;
const char* RefusalReasonName(RefusalReason reason);

// Calls answered per second, estimated from a counter. Thread-safe: Count from any thread, cheap
// (one relaxed increment); PerSecond from any thread, and it refreshes the estimate from the
// counter at most once per kWindow, under a lock that only refusals take.
class DrainRate {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kWindow{100};
  // An estimate older than this is not trusted: after an idle spell the rate restarts unmeasured.
  static constexpr std::chrono::milliseconds kStaleAfter{1000};

  explicit DrainRate(Clock::time_point start) : sample_time_(start) {}

  void Count(uint64_t answered = 1) { answered_.fetch_add(answered, std::memory_order_relaxed); }
  uint64_t answered() const { return answered_.load(std::memory_order_relaxed); }

  // Calls answered per second over the last complete window; 0 while unmeasured.
  double PerSecond(Clock::time_point now);

 private:
  alignas(kCacheLineBytes) std::atomic<uint64_t> answered_{0};
  Mutex mu_;
  Clock::time_point sample_time_ ABSL_GUARDED_BY(mu_);
  uint64_t sample_answered_ ABSL_GUARDED_BY(mu_) = 0;
  double per_second_ ABSL_GUARDED_BY(mu_) = 0;
};

// Thread-safe. One per server, shared by every handler thread.
class AdmissionControl {
 public:
  using Clock = DrainRate::Clock;

  // `max_in_flight` within [kMaxInFlightMin, kMaxInFlightMax]; `num_shards` > 0.
  AdmissionControl(int64_t max_in_flight, int32_t num_shards, Clock::time_point now = Clock::now());

  // What TryAdmit decided. An admitted call holds `slot` (its client's share) until Answered.
  struct Admission {
    bool admitted = false;
    // Why not, when refused: kInFlightLimit or kFairShare.
    RefusalReason refusal = RefusalReason::kInFlightLimit;
    ClientShares::Slot slot = nullptr;
    // A fair-share refusal: what the client held and how many clients share (for the pushback).
    ClientShares::Refusal share;
  };

  // The first thing a handler does, for a call of `client` (server/client_identity.h). Admitted:
  // the call counts in flight, for the server and for its client, until Answered. Refused
  // (counted under its reason): nothing of it counts in flight.
  Admission TryAdmit(std::string_view client, Clock::time_point now = Clock::now()) {
    Admission admission;
    // The share first: a client counts among those sharing from its first call, even one the
    // bound then refuses, so that the others are held to their shares from then on.
    admission.slot = shares_.TryTake(client, now, &admission.share);
    if (admission.slot == nullptr) {
      // Alone, a client's share is the whole bound: that refusal is the bound's.
      admission.refusal =
          admission.share.clients > 1 ? RefusalReason::kFairShare : RefusalReason::kInFlightLimit;
      CountRefused(admission.refusal);
      return admission;
    }
    if (in_flight_.fetch_add(1, std::memory_order_relaxed) >= max_in_flight_) {
      in_flight_.fetch_sub(1, std::memory_order_relaxed);
      shares_.Release(admission.slot, now);
      admission.slot = nullptr;
      CountRefused(RefusalReason::kInFlightLimit);
      return admission;
    }
    admitted_.fetch_add(1, std::memory_order_relaxed);
    admission.admitted = true;
    return admission;
  }

  // An admitted call was answered, by shard `shard` (-1: answered before it reached a shard, or
  // by none, as History is); `slot` is its Admission's. Exactly once per admitted call.
  void Answered(int32_t shard, ClientShares::Slot slot, Clock::time_point now = Clock::now()) {
    shares_.Release(slot, now);
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    server_rate_.Count();
    if (shard >= 0 && shard < num_shards_) shard_rates_[shard]->Count();
  }

  // Shard `shard` accepted a batch call's part of `operations` operations. Counted when the part
  // is accepted rather than when each is answered: the part is taken whole, and the drain rate
  // it feeds (in operations; a single call counts one when answered) only sizes the pushback.
  void AnsweredOperations(int32_t shard, size_t operations) {
    if (shard >= 0 && shard < num_shards_) shard_rates_[shard]->Count(operations);
  }
  // Counts a refusal made after admission (a full mailbox, shutting down); the call is still
  // Answered like any other.
  void CountRefused(RefusalReason reason) {
    refused_[static_cast<size_t>(reason)].fetch_add(1, std::memory_order_relaxed);
  }

  // How long a client refused by the in-flight limit should wait: the time the server needs to
  // answer the calls in flight at its measured rate.
  std::chrono::milliseconds PushbackAfterInFlightLimit(Clock::time_point now);
  // How long a client refused for its fair share should wait: the time the server needs to
  // answer the calls it holds, at its share of the server's measured rate.
  std::chrono::milliseconds PushbackAfterFairShare(const ClientShares::Refusal& share,
                                                   Clock::time_point now);
  // How long a client refused by shard `shard`'s full mailbox should wait: the time that shard
  // needs to answer `queued` calls at its measured rate.
  std::chrono::milliseconds PushbackAfterFullMailbox(int32_t shard, size_t queued,
                                                     Clock::time_point now);

  int64_t max_in_flight() const { return max_in_flight_; }
  const ClientShares& shares() const { return shares_; }
  // Calls admitted and not yet answered. Any thread; a moment's refused attempts may show in it.
  int64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }
  uint64_t admitted() const { return admitted_.load(std::memory_order_relaxed); }
  uint64_t refused(RefusalReason reason) const {
    return refused_[static_cast<size_t>(reason)].load(std::memory_order_relaxed);
  }

 private:
  const int64_t max_in_flight_;
  const int32_t num_shards_;
  alignas(kCacheLineBytes) std::atomic<int64_t> in_flight_{0};
  alignas(kCacheLineBytes) std::atomic<uint64_t> admitted_{0};
  std::array<std::atomic<uint64_t>, kRefusalReasonCount> refused_{};
  ClientShares shares_;
  DrainRate server_rate_;
  std::vector<std::unique_ptr<DrainRate>> shard_rates_;
};

// `queued` calls answered at `per_second`, in whole milliseconds rounded up, within
// [kMinPushback, kMaxPushback]; kUnmeasuredPushback when `per_second` is 0.
std::chrono::milliseconds PushbackFor(double queued, double per_second);

}  // namespace ledger

#endif  // LEDGER_SHARD_ADMISSION_CONTROL_H_
