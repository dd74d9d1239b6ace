// The phases of a LoadtestDriver's run: the --fund setup, the closed or open loop that makes the
// calls, the supervision that moves from warm-up to measurement and stops, and the drain; with
// their progress lines. One call's own life (send, retry, finish) is in loadtest_driver.cc.
#include <sys/resource.h>

#include <algorithm>
#include <iostream>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/interrupt_signals.h"
#include "client/loadtest_driver.h"
#include "client/loadtest_progress.h"

namespace ledger {
namespace {

// User plus system CPU time this process has used so far.
double ProcessCpuSeconds() {
  struct rusage usage = {};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

}  // namespace

void LoadtestDriver::Run() {
  start_ = Clock::now();
  stats_.StartTimeline(start_);
  measure_start_ = start_;
  cpu_at_measure_start_ = ProcessCpuSeconds();
  if (options_.warmup == absl::ZeroDuration()) phase_ = kMeasuring;
  std::thread open_loop;
  if (options_.rate > 0) {
    open_loop = std::thread([this] { RunOpenLoop(); });
  } else {
    StartClosedLoop();
  }
  Supervise();
  if (open_loop.joinable()) open_loop.join();
  const auto stopped = Clock::now();
  const double cpu_at_stop = ProcessCpuSeconds();
  Drain();
  retry_timer_.Stop();  // No call is left, so no retry waits.
  // With --requests, the measurement ends with the last measured call; else at the stop.
  const bool ends_after_drain = stop_reason_ == StopReason::kRequestsDone;
  const auto measure_end = ends_after_drain ? Clock::now() : stopped;
  const double cpu_at_end = ends_after_drain ? ProcessCpuSeconds() : cpu_at_stop;
  if (phase_at_stop_was_measuring_) {
    measured_seconds_ = std::chrono::duration<double>(measure_end - measure_start_).count();
    client_cpu_seconds_ = cpu_at_end - cpu_at_measure_start_;
  }
}

int64_t LoadtestDriver::Fund() {
  if (options_.fund <= 0) return 0;
  const auto start = Clock::now();
  {
    ProgressTicker ticker(ShowProgress(options_), [&](double seconds) {
      return absl::StrFormat("[setup %4.0fs] %d of %d accounts funded", seconds, setup_done_.load(),
                             options_.accounts);
    });
    for (int32_t i = 0; i < options_.concurrency && IssueSetup(); ++i) {
    }
    std::unique_lock<std::mutex> lock(done_mu_);
    // Every call ends by its deadline (--wait_for_ready included), and none follows a signal.
    while (in_flight_.load() > 0) done_cv_.wait_for(lock, std::chrono::milliseconds(100));
  }
  stats_.TakeInterval();  // The progress lines of the run show the run.
  std::cerr << absl::StrFormat("ledger-loadtest: funded %d accounts with %d each in %.1f s\n",
                               setup_done_.load(), options_.fund,
                               std::chrono::duration<double>(Clock::now() - start).count());
  return setup_done_.load();
}

bool LoadtestDriver::IssueSetup() {
  if (Interrupted()) return false;
  const int64_t first = setup_next_.fetch_add(options_.batch);
  if (first >= options_.accounts) return false;
  const int64_t end = std::min<int64_t>(first + options_.batch, options_.accounts);
  std::vector<PlannedCall> plans;
  plans.reserve(static_cast<size_t>(end - first));
  for (int64_t account = first; account < end; ++account) {
    plans.push_back({CallKind::kDeposit, static_cast<size_t>(account), 0, options_.fund});
  }
  Issue(nullptr, std::move(plans), Clock::now(), /*measured=*/false, /*setup=*/true);
  return true;
}

void LoadtestDriver::StartClosedLoop() {
  for (int32_t i = 0; i < options_.concurrency; ++i) {
    bool measured = false;
    if (!ClaimCall(&measured)) break;
    std::unique_ptr<Workload> workload = NewWorkload();
    std::vector<PlannedCall> plans = NextPlans(*workload);
    Issue(std::move(workload), std::move(plans), Clock::now(), measured);
  }
}

void LoadtestDriver::RunOpenLoop() {
  const Clock::time_point start = start_;
  const auto period = std::chrono::duration<double>(1.0 / options_.rate);
  const std::chrono::nanoseconds max_send_delay =
      absl::ToChronoNanoseconds(options_.max_send_delay);
  std::unique_ptr<Workload> workload = NewWorkload();  // This thread's alone.
  std::mt19937_64 random(std::random_device{}());
  std::uniform_real_distribution<double> uniform01(0.0, 1.0);
  for (uint64_t i = 0; !Stopping(); ++i) {
    const auto intended = start + std::chrono::duration_cast<Clock::duration>(period * i);
    // In steps of at most 100 ms, so that a stop is seen soon even at a low --rate.
    while (!Stopping() && Clock::now() < intended) {
      std::this_thread::sleep_until(
          std::min(intended, Clock::now() + std::chrono::milliseconds(100)));
    }
    bool measured = false;
    if (!ClaimCall(&measured)) break;
    std::vector<PlannedCall> plans = NextPlans(*workload);
    // Sent this late, its latency (counted from `intended`) would be the client's own lag: the
    // sender fell behind (a busy machine, a descheduled thread), not the server.
    const Clock::time_point now = Clock::now();
    if (now - intended > max_send_delay) {
      if (measured) stats_.CountNotSentLate();
      continue;
    }
    if (!throttle_.ShouldSend(now, uniform01(random))) {
      if (measured) stats_.CountNotSentThrottled();
      continue;
    }
    const int64_t in_flight = in_flight_.load();
    if (in_flight >= options_.max_in_flight ||
        (options_.adaptive_in_flight && !in_flight_limit_.Allows(in_flight))) {
      if (measured) stats_.CountNotSent();
      continue;
    }
    // Latency counts from when the call should have gone out.
    Issue(nullptr, std::move(plans), intended, measured);
  }
}

void LoadtestDriver::Supervise() {
  const bool show = ShowProgress(options_);
  const auto warmup_end = start_ + absl::ToChronoNanoseconds(options_.warmup);
  const auto duration = absl::ToChronoNanoseconds(options_.duration);
  auto last_line = start_;
  // Checks ten times a second; prints once a second.
  for (int tick = 1;; ++tick) {
    std::this_thread::sleep_until(start_ + std::chrono::milliseconds(100) * tick);
    const auto now = Clock::now();
    if (phase_.load() == kWarmingUp && now >= warmup_end) {
      measure_start_ = now;
      cpu_at_measure_start_ = ProcessCpuSeconds();
      phase_ = kMeasuring;
    }
    const bool measuring = phase_.load() == kMeasuring;
    std::optional<StopReason> stop;
    if (Interrupted()) {
      stop = StopReason::kInterrupted;
    } else if (measuring && options_.duration > absl::ZeroDuration() &&
               now - measure_start_ >= duration) {
      stop = StopReason::kTimeUp;
    } else if (options_.requests > 0 && measured_claimed_.load() >= options_.requests) {
      stop = StopReason::kRequestsDone;
    }
    if (stop.has_value()) {
      stop_reason_ = *stop;
      phase_at_stop_was_measuring_ = measuring;
      phase_ = kStopping;
      return;
    }
    if (show && tick % 10 == 0) {
      std::cerr << ProgressLine(now, std::chrono::duration<double>(now - last_line).count())
                << "\n";
      last_line = now;
    }
  }
}

std::string LoadtestDriver::ProgressLine(Clock::time_point now, double interval_seconds) {
  const Stats::Interval interval = stats_.TakeInterval();
  const std::string head =
      absl::StrFormat("[%5.1fs] %-7s", std::chrono::duration<double>(now - start_).count(),
                      phase_.load() == kWarmingUp ? "warm-up" : "measure");
  const int64_t in_flight = in_flight_.load();
  if (interval.answered_ever == 0 && interval.ok.count() == 0) {
    return absl::StrCat(head, " no answer from ", options_.target, " yet; ", in_flight,
                        " calls in flight",
                        interval.unknown > 0
                            ? absl::StrCat(", ", interval.unknown, " ended ", interval.last_unknown)
                            : "");
  }
  if (interval.ok.count() + interval.refused + interval.shed == 0) {
    return absl::StrCat(head, " no answer from ", options_.target, " in this second; ", in_flight,
                        " calls in flight",
                        options_.wait_for_ready ? " (waiting for the connection until their "
                                                  "--deadline)"
                                                : "",
                        interval.unknown > 0
                            ? absl::StrCat(", ", interval.unknown, " ended ", interval.last_unknown)
                            : "");
  }
  const auto per_second = [&](uint64_t n) { return static_cast<double>(n) / interval_seconds; };
  std::string line = absl::StrFormat(
      "%s %8.0f OK/s  p99 %s  refused %.0f/s  shed %.0f/s  unknown %.0f/s  in flight %d", head,
      per_second(interval.ok.count()),
      interval.ok.count() == 0
          ? std::string("       - ms")
          : absl::StrFormat("%8.2f ms",
                            static_cast<double>(interval.ok.Percentile(0.99).count()) / 1e6),
      per_second(interval.refused), per_second(interval.shed), per_second(interval.unknown),
      in_flight);
  if (options_.batch > 1) {
    absl::StrAppend(&line, absl::StrFormat("  ops %.0f OK/s", per_second(interval.operations_ok)));
  }
  if (interval.unknown > 0) absl::StrAppend(&line, " (last: ", interval.last_unknown, ")");
  return line;
}

void LoadtestDriver::Drain() {
  const bool show = ShowProgress(options_);
  auto last_line = Clock::now();
  std::unique_lock<std::mutex> lock(done_mu_);
  // Every call ends by its deadline (--wait_for_ready included).
  while (in_flight_.load() > 0) {
    done_cv_.wait_for(lock, std::chrono::milliseconds(100));
    const auto now = Clock::now();
    if (show && in_flight_.load() > 0 && now - last_line >= std::chrono::seconds(1)) {
      std::cerr << absl::StrFormat(
          "[%5.1fs] stopped: waiting for %d calls in flight (each ends by its --deadline of %s)\n",
          std::chrono::duration<double>(now - start_).count(), in_flight_.load(),
          absl::FormatDuration(options_.deadline));
      last_line = now;
    }
  }
}

}  // namespace ledger
