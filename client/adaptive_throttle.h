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
// over a sliding window, where `requests` are the calls the application asked for (the answered
// ones and the ones refused locally) and `accepts` the calls the server answered without refusing
// them for overload. In the steady
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

  // Decides whether to send a call the application asks for: false means refuse it locally,
  // which counts it at once as a request not accepted. `uniform01` is a random number in [0, 1),
  // passed in so that tests are exact.
  bool ShouldSend(Clock::time_point now, double uniform01);
  // Counts the answer to a sent attempt as a request, and as accepted unless the server refused
  // it for overload. Sent calls count when answered, not when sent: counted at sending, every
  // call in flight would be a request not (yet) accepted, and with k near 1 that lag alone
  // throttles a healthy server, and the calls it refuses keep it throttled.
  void CountAnswer(Clock::time_point now, bool accepted);

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
