// Defines what ledger-loadtest shows while it runs and how it tells that ledgerd is gone:
// `ProgressTicker` (a line on stderr once a second), `ServerWatch` (when the server last
// answered), and the small helpers both use.
#ifndef LEDGER_CLIENT_LOADTEST_PROGRESS_H_
#define LEDGER_CLIENT_LOADTEST_PROGRESS_H_

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/steady_wait.h"
#include "client/loadtest_options.h"
#include "grpcpp/support/status.h"

namespace ledger {

// While settling or verifying: ledgerd counts as gone when nothing at all has come back from it
// (no answer of any code, only UNAVAILABLE or DEADLINE_EXCEEDED) for this long, or for twice
// --deadline if that is longer. A restart takes well under this.
inline constexpr absl::Duration kGoneAfter = absl::Seconds(5);

// kGoneAfter, or twice --deadline if that is longer.
absl::Duration GoneAfter(const LoadtestOptions& options);

// Whether to print progress lines: --progress, or stderr is a terminal.
bool ShowProgress(const LoadtestOptions& options);

// "UNAVAILABLE: failed to connect to all addresses; ..."
std::string Describe(const grpc::Status& status);

// Calls `line` and prints what it returns on stderr once a second, from its own thread, until
// destroyed (when `show`; else does nothing). Not thread-safe; `line` must be.
class ProgressTicker {
 public:
  ProgressTicker(bool show, std::function<std::string(double seconds)> line);
  ~ProgressTicker();
  ProgressTicker(const ProgressTicker&) = delete;
  ProgressTicker& operator=(const ProgressTicker&) = delete;

 private:
  SteadyNotification done_;
  std::thread thread_;
};

// The last time anything came back from the server, and the last error of a call that did not
// reach it. Thread-safe.
class ServerWatch {
 public:
  using Clock = std::chrono::steady_clock;

  ServerWatch() : last_answer_(Clock::now()) {}
  void Answered();
  void NotAnswered(const grpc::Status& status);
  // True when nothing has come back for `gone_after`.
  bool Gone(absl::Duration gone_after) const;
  // For a progress line: "" while ledgerd answers, else "; no answer from ledgerd for 3s (last
  // error: ...)".
  std::string Silence() const;

 private:
  mutable absl::Mutex mu_;
  Clock::time_point last_answer_ ABSL_GUARDED_BY(mu_);
  std::string last_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ledger

#endif  // LEDGER_CLIENT_LOADTEST_PROGRESS_H_
