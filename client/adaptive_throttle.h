// Defines `AdaptiveThrottle`: client-side adaptive throttling (Google SRE, "Handling Overload").
//
// Why a client refuses calls itself: refusing a call costs the server almost as much as serving
// it (on this project's machine a RESOURCE_EXHAUSTED costs ledgerd's gRPC front end 60-80% of the
// CPU of an OK call), so a server that refuses the excess of a 2x overload spends most of its CPU
// refusing, and serves less than it could. A client that sees its calls refused refuses some of
// its own next calls locally, for free, with probability
//
//     max(0, (requests - k * accepts) / (requests + 1))
//
// over a sliding window, where `requests` are the calls the application asked for (sent or not)
// and `accepts` the calls the server answered without refusing them for overload. In the steady
// state the server then sees about k times the calls it accepts: k = 2 (SRE's default) leaves one
// refusal per accepted call; smaller k throttles harder and wastes less server CPU; k <= 0 turns
// the throttle off.
#ifndef LEDGER_CLIENT_ADAPTIVE_THROTTLE_H_
#define LEDGER_CLIENT_ADAPTIVE_THROTTLE_H_

#include <chrono>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ledger {

// Thread-safe.
class AdaptiveThrottle {
 public:
  using Clock = std::chrono::steady_clock;

  // `window` is split into `buckets` equal slices; counts older than the window are forgotten.
  AdaptiveThrottle(double k, Clock::duration window = std::chrono::seconds(10), int buckets = 10);

  // Counts one call the application asked for and decides whether to send it: false means refuse
  // it locally. `uniform01` is a random number in [0, 1), passed in so that tests are exact.
  bool ShouldSend(Clock::time_point now, double uniform01);
  // Counts a sent call the server accepted (answered with anything but an overload refusal).
  void CountAccepted(Clock::time_point now);

  // The probability ShouldSend refuses a call now.
  double RejectProbability(Clock::time_point now);
  bool enabled() const { return k_ > 0; }

 private:
  struct Bucket {
    int64_t epoch = -1;  // Which slice of time it counts; stale when older than the window.
    uint64_t requests = 0;
    uint64_t accepts = 0;
  };
  Bucket& BucketFor(Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double RejectProbabilityLocked(Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const double k_;
  const Clock::duration slice_;
  absl::Mutex mu_;
  std::vector<Bucket> buckets_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ledger

#endif  // LEDGER_CLIENT_ADAPTIVE_THROTTLE_H_
