// Defines `ConcurrencyLimit`: an AIMD limit on a client's calls in flight (additive increase,
// multiplicative decrease, as TCP's congestion window and Netflix concurrency-limits' AIMD
// limiter), so that a client keeps about as many calls open as the server admits.
//
// Why: calls a client keeps open beyond what the server admits either wait in gRPC's transport
// before the server can refuse them (so refusals, and the answers behind them, get slower) or
// are refused at a CPU cost to the server (docs/overload.md). Each answer the server accepted
// raises the limit by 1/limit (about one per round trip); a refusal for overload cuts it by
// `backoff`, at most once per `limit` answers, since the refusals of calls sent under the old
// limit say nothing new.
#ifndef LEDGER_CLIENT_CONCURRENCY_LIMIT_H_
#define LEDGER_CLIENT_CONCURRENCY_LIMIT_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ledger {

// Thread-safe.
class ConcurrencyLimit {
 public:
  // Starts at `max`, stays within [min, max]; 0 < backoff < 1.
  ConcurrencyLimit(double min, double max, double backoff = 0.9);

  // Counts one answer: accepted (anything but a refusal for overload) or refused.
  void OnAnswer(bool accepted);
  // Whether one more call may start with `in_flight` already open.
  bool Allows(int64_t in_flight);
  double limit();

 private:
  const double min_;
  const double max_;
  const double backoff_;
  absl::Mutex mu_;
  double limit_ ABSL_GUARDED_BY(mu_);
  // Answers still to count before the next refusal may cut the limit again.
  double answers_until_next_cut_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ledger

#endif  // LEDGER_CLIENT_CONCURRENCY_LIMIT_H_
