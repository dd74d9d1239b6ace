// Defines `LoadtestDriver`, which makes ledger-loadtest's calls: the --fund setup, then the
// warm-up and the measured run in a closed loop (--concurrency) or an open loop (--rate), each
// call recorded in the book (for verification) and in the statistics (for the report), and the
// calls whose outcome is unknown kept for settling. In front of a cluster (--target with several
// addresses) every call, and every read of the settling and the verification (CallLeader),
// follows NOT_LEADER refusals to the leader, which all calls then share (client/leader_router.h).
#ifndef LEDGER_CLIENT_LOADTEST_DRIVER_H_
#define LEDGER_CLIENT_LOADTEST_DRIVER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/adaptive_throttle.h"
#include "client/call_kind.h"
#include "client/call_outcome.h"
#include "client/concurrency_limit.h"
#include "client/leader_router.h"
#include "client/ledger_book.h"
#include "client/loadtest_options.h"
#include "client/loadtest_stats.h"
#include "client/retry_budget.h"
#include "client/retry_timer.h"
#include "client/workload.h"
#include "grpcpp/grpcpp.h"
#include "ledger/v1/ledger.grpc.pb.h"

namespace ledger {

// The wall-clock deadline `duration` from now, as a grpc::ClientContext takes it.
std::chrono::system_clock::time_point DeadlineIn(absl::Duration duration);

// Why the measurement stopped.
enum class StopReason { kTimeUp, kRequestsDone, kInterrupted };

// Runs the calls: one Call object per RPC, finished by gRPC's callback. Thread-safe as each
// method says: Connect, Fund and Run from the thread that owns the driver, one after the other;
// the accessors after Run; Probe from any thread.
class LoadtestDriver {
 public:
  using Clock = std::chrono::steady_clock;

  // `partners` may be null when the mix has no transfers.
  LoadtestDriver(const LoadtestOptions& options, const AccountDistribution* accounts,
                 const TransferPartners* partners);

  // A Deposit, Withdraw or Transfer whose outcome is unknown, to be settled (with --batch, one
  // operation of an Apply call).
  struct AmbiguousCall {
    size_t account;  // A transfer's source.
    CallKind op;
    int64_t amount;
    std::string request_id;  // A transfer's transfer_id.
    size_t to_account = 0;   // Transfers only.
  };

  // Waits up to `timeout` for every channel's connection. On failure, the error of one fail-fast
  // call says why (connection refused, TLS handshake, ...). Before Run.
  absl::Status Connect(absl::Duration timeout);
  // With --fund: deposits it into every account, --batch per call, --concurrency calls at a
  // time; not measured, but recorded in the book like any call. Returns the accounts funded (or
  // refused or left ambiguous: every one was tried) before a signal stopped it. Before Run.
  int64_t Fund();
  // Measures until --duration or --requests is reached or a signal arrives, then waits (bounded
  // by --deadline) for the calls still in flight.
  void Run();
  LedgerBook& book() { return book_; }
  // After Run: a copy, taken under the lock that every call's Finish takes.
  std::vector<AmbiguousCall> ambiguous_calls() const ABSL_LOCKS_EXCLUDED(ambiguous_mu_) {
    absl::MutexLock lock(&ambiguous_mu_);
    return ambiguous_;
  }
  const Stats& stats() const { return stats_; }
  const std::vector<std::string>& names() const { return names_; }
  double measured_seconds() const { return measured_seconds_; }
  // User plus system CPU time of this process over the measured interval.
  double client_cpu_seconds() const { return client_cpu_seconds_; }
  StopReason stop_reason() const { return stop_reason_; }
  // Where calls go now: --target's first address that answered, or the leader calls found
  // since. Thread-safe.
  const std::string& leader_address() const { return router_.Current()->address; }

  // One synchronous call, made on `stub` with `context` (its deadline and wait_for_ready set);
  // the same request every time it is made.
  using Attempt = std::function<grpc::Status(v1::Ledger::Stub&, grpc::ClientContext*)>;
  // Makes `attempt` where calls go now, and while it is refused NOT_LEADER (nothing applied),
  // makes it again where the refusal leads (LeaderRouter::Follow), after the refusal's delay
  // when it names no leader: at most kLoadtestLeaderHopsMax times, and only while the next
  // attempt can start before `deadline`. Each attempt's deadline is `deadline`. Returns the last
  // status: a NOT_LEADER refusal when no leader took it. Thread-safe (settling and verification
  // call it from many threads).
  grpc::Status CallLeader(const Attempt& attempt, std::chrono::system_clock::time_point deadline,
                          bool wait_for_ready);
  // One fail-fast Balance call (deadline 1 s), following NOT_LEADER: when ledgerd cannot be
  // reached, its status says why (connection refused, TLS handshake, ...), where a waiting call
  // only says DEADLINE_EXCEEDED. Thread-safe.
  grpc::Status Probe();

 private:
  // One call: one RPC, its retries included (loadtest_driver.cc).
  struct Call;

  // Whether one more call may start, and whether it is measured: never once stopping, and never
  // past --requests measured calls (a ticket taken atomically, so no two callers get the last).
  bool ClaimCall(bool* measured);
  // Starts one call of `plans` (one: unary; more: an Apply), each operation with a fresh id.
  void Issue(std::unique_ptr<Workload> workload, std::vector<PlannedCall> plans,
             Clock::time_point intended_start, bool measured, bool setup = false);
  // The next call's operations: one, or --batch.
  std::vector<PlannedCall> NextPlans(Workload& workload) const;
  // Sends one attempt of `call` (its `pending` operations), with a fresh context and the call's
  // own deadline.
  void Send(Call* call);
  void SendUnary(Call* call);
  void Finish(Call* call, const grpc::Status& status);
  // After `call`'s attempt was refused NOT_LEADER (`refusal`): schedules the same request where
  // the refusal leads and returns true; false (the refusal ends the call) after
  // kLoadtestLeaderHopsMax hops, or when the hop could not start before the call's deadline.
  bool FollowLeader(Call* call, const CallOutcome& refusal);
  // Lets go of a finished call, after starting the one that follows it (a closed loop's slot,
  // or the next setup call).
  void EndCall(Call* call);
  // Records the final `code` of operation `index` of `call` in the book (and as ambiguous when
  // its outcome is unknown), and adds it to `outcomes` for the statistics.
  void FinishOperation(const Call& call, size_t index, const CallOutcome& answer,
                       std::vector<OperationOutcome>* outcomes,
                       std::vector<AmbiguousCall>* ambiguous);
  // After a RESOURCE_EXHAUSTED (of the call, or of some of an Apply's results): the wait before
  // sending the refused operations again, when the server sent a valid pushback and retries,
  // the deadline and the budget allow it; nullopt (counted) when not.
  std::optional<Clock::duration> RetryDelay(Call* call);
  // Starts the next --fund call; false when every account has had one, or on a signal.
  bool IssueSetup();
  // Every path that ends a call goes through here: the last one wakes Run.
  void ReleaseInFlight();
  std::unique_ptr<Workload> NewWorkload();
  bool Measuring() const { return phase_.load() == kMeasuring; }
  bool Stopping() const { return phase_.load() == kStopping; }
  void StartClosedLoop();
  void RunOpenLoop();
  // Moves through warm-up and measurement, prints progress, and sets kStopping at the end.
  void Supervise();
  // After kStopping: waits for the calls in flight, printing progress.
  void Drain();
  std::string ProgressLine(Clock::time_point now, double interval_seconds);

  enum Phase { kWarmingUp, kMeasuring, kStopping };

  const LoadtestOptions& options_;
  const AccountDistribution* accounts_;
  const TransferPartners* partners_;
  // The channels to --target's addresses (and the leaders refusals name), and where calls go.
  LeaderRouter router_;
  std::vector<std::string> names_;
  std::vector<int32_t> shard_of_;
  LedgerBook book_;
  Stats stats_;
  RetryBudget retry_budget_;
  // Open loop only: a closed loop already waits for each answer before its next call.
  AdaptiveThrottle throttle_;
  // Open loop with --adaptive_in_flight: the AIMD limit under --max_in_flight.
  ConcurrencyLimit in_flight_limit_;
  // Calls waiting out a pushback. Stopped at the end of Run, when none can be waiting.
  RetryTimer retry_timer_;
  std::atomic<int> phase_{kWarmingUp};
  // Calls issued (which channel), and operations issued (their ids).
  std::atomic<uint64_t> call_sequence_{0};
  std::atomic<uint64_t> sequence_{0};
  // --fund: the first account the next setup call deposits into, and accounts done.
  std::atomic<int64_t> setup_next_{0};
  std::atomic<int64_t> setup_done_{0};
  // Measured calls claimed so far (may pass --requests by the refused claims; never sent).
  std::atomic<int64_t> measured_claimed_{0};
  std::atomic<int64_t> in_flight_{0};
  // Guards no data (in_flight_ is atomic): it only pairs with done_cv_ so that Drain wakes when
  // the last call finishes; there is nothing for an annotation to check, so it stays a std::mutex.
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  // Written by the thread that runs Run only.
  Clock::time_point start_;
  Clock::time_point measure_start_;
  double measured_seconds_ = 0;
  double cpu_at_measure_start_ = 0;
  double client_cpu_seconds_ = 0;
  StopReason stop_reason_ = StopReason::kTimeUp;
  bool phase_at_stop_was_measuring_ = false;
  mutable absl::Mutex ambiguous_mu_;
  std::vector<AmbiguousCall> ambiguous_ ABSL_GUARDED_BY(ambiguous_mu_);
};

}  // namespace ledger

#endif  // LEDGER_CLIENT_LOADTEST_DRIVER_H_
