// ledger-loadtest: drives ledgerd hard, reports what a capacity planner needs, and checks at the
// end that no money was lost or invented.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cli/command_line.h"
#include "cli/host_port.h"
#include "client/channel_credentials.h"
#include "client/latency_histogram.h"
#include "client/ledger_book.h"
#include "client/workload.h"
#include "grpcpp/grpcpp.h"
#include "ledger/v1/ledger.grpc.pb.h"
#include "metrics/status_code_names.h"
#include "shard/router.h"
#include "shard/stable_hash.h"

ABSL_FLAG(std::string, target, "localhost:50051",
          "HOST:PORT of ledgerd; :PORT is localhost, [::1]:PORT an IPv6 address");
ABSL_FLAG(int32_t, concurrency, 64, "closed loop: calls in flight at all times");
ABSL_FLAG(double, rate, 0,
          "open loop: calls per second, each timed from its intended send time (no coordinated "
          "omission); 0 runs the closed loop");
ABSL_FLAG(int32_t, max_in_flight, 20000,
          "open loop: calls in flight at most; beyond, a call "
          "is counted as not sent (client overloaded)");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(10), "how long to measure, after the warm-up");
ABSL_FLAG(int64_t, requests, 0, "stop after this many measured calls (0: use --duration only)");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(2),
          "calls made before measuring; verified, not reported");
ABSL_FLAG(int64_t, accounts, 1000, "distinct account ids");
ABSL_FLAG(std::string, distribution, "uniform", "uniform, or zipf:S (hot accounts; S > 0)");
ABSL_FLAG(std::string, mix, "deposit=70,withdraw=25,balance=5", "operation weights");
ABSL_FLAG(int64_t, amount_min, 1, "smallest amount, minor units");
ABSL_FLAG(int64_t, amount_max, 1000, "largest amount, minor units");
ABSL_FLAG(int32_t, channels, 4, "HTTP/2 connections to spread calls over");
ABSL_FLAG(absl::Duration, deadline, absl::Seconds(5), "deadline of each call");
ABSL_FLAG(bool, wait_for_ready, true,
          "while the server is unreachable (say, restarting), a call waits for the connection "
          "until its deadline instead of failing at once with UNAVAILABLE; false measures "
          "fail-fast clients");
ABSL_FLAG(std::string, run_id, "",
          "prefix of every account id and request_id, so runs never interfere (default: random)");
ABSL_FLAG(int32_t, server_shards, 0,
          "must equal the server's --shards: then the report counts calls and sheds per shard, "
          "as the server routes accounts (0: no per-shard report)");
ABSL_FLAG(bool, verify, true, "check every account's balance against the calls made");
ABSL_FLAG(absl::Duration, resolve_for, absl::Seconds(60),
          "at the end, retry each call whose outcome is unknown (DEADLINE_EXCEEDED, CANCELLED, "
          "UNAVAILABLE) with its request_id for up to this long, so that verification is exact; "
          "0 disables. Needs a server that deduplicates request_ids (--durability sync or async)");
ABSL_FLAG(bool, json, false, "print the report as one JSON object on stdout instead of text");
ABSL_FLAG(std::string, json_file, "", "also write the report as JSON to this file");
ABSL_FLAG(std::string, tls_ca_file, "",
          "PEM CA bundle that verifies ledgerd's certificate; any --tls_* flag means TLS (without "
          "this one: the system's roots). No --tls_* flag: plaintext");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM client certificate, for a ledgerd that requires one (mutual TLS)");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file");
ABSL_FLAG(std::string, tls_server_name, "",
          "name ledgerd's certificate must carry when it is not --target's host");
ABSL_FLAG(bool, progress, false, "progress once a second on stderr even when it is not a terminal");

namespace ledger {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string target;
  int32_t concurrency;
  double rate;
  int32_t max_in_flight;
  absl::Duration duration;
  int64_t requests;
  absl::Duration warmup;
  int64_t accounts;
  std::string distribution;
  OperationMix mix;
  int64_t amount_min;
  int64_t amount_max;
  int32_t channels;
  absl::Duration deadline;
  bool wait_for_ready;
  std::string run_id;
  int32_t shards;
  bool verify;
  absl::Duration resolve_for;
  bool json;
  bool progress;
  std::string json_file = "";
  // Set after the flags above (kept out of their initializer list).
  ClientTlsOptions tls = {};
  // From NewChannelCredentials(tls): plaintext or TLS.
  std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr;
};

absl::StatusOr<Options> OptionsFromFlags() {
  Options o{absl::GetFlag(FLAGS_target),         absl::GetFlag(FLAGS_concurrency),
            absl::GetFlag(FLAGS_rate),           absl::GetFlag(FLAGS_max_in_flight),
            absl::GetFlag(FLAGS_duration),       absl::GetFlag(FLAGS_requests),
            absl::GetFlag(FLAGS_warmup),         absl::GetFlag(FLAGS_accounts),
            absl::GetFlag(FLAGS_distribution),   {},
            absl::GetFlag(FLAGS_amount_min),     absl::GetFlag(FLAGS_amount_max),
            absl::GetFlag(FLAGS_channels),       absl::GetFlag(FLAGS_deadline),
            absl::GetFlag(FLAGS_wait_for_ready), absl::GetFlag(FLAGS_run_id),
            absl::GetFlag(FLAGS_server_shards),  absl::GetFlag(FLAGS_verify),
            absl::GetFlag(FLAGS_resolve_for),    absl::GetFlag(FLAGS_json),
            absl::GetFlag(FLAGS_progress)};
  o.json_file = absl::GetFlag(FLAGS_json_file);
  absl::StatusOr<cli::HostPort> target =
      cli::ParseHostPort("--target", o.target, cli::AddressUse::kConnect, 50051);
  if (!target.ok()) return target.status();
  o.target = target->ToString();
  o.tls = {absl::GetFlag(FLAGS_tls_ca_file), absl::GetFlag(FLAGS_tls_cert_file),
           absl::GetFlag(FLAGS_tls_key_file), absl::GetFlag(FLAGS_tls_server_name)};
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      NewChannelCredentials(o.tls);
  if (!credentials.ok()) return credentials.status();
  o.credentials = *std::move(credentials);
  absl::StatusOr<OperationMix> mix = ParseOperationMix(absl::GetFlag(FLAGS_mix));
  if (!mix.ok()) return mix.status();
  o.mix = *mix;
  if (o.concurrency < 1) return absl::InvalidArgumentError("--concurrency must be at least 1");
  if (o.rate < 0) return absl::InvalidArgumentError("--rate must not be negative");
  if (o.max_in_flight < 1) return absl::InvalidArgumentError("--max_in_flight must be >= 1");
  if (o.duration <= absl::ZeroDuration() && o.requests <= 0) {
    return absl::InvalidArgumentError("give a positive --duration or --requests");
  }
  if (o.warmup < absl::ZeroDuration()) return absl::InvalidArgumentError("--warmup < 0");
  if (o.amount_min < 1 || o.amount_max < o.amount_min) {
    return absl::InvalidArgumentError("need 1 <= --amount_min <= --amount_max");
  }
  if (o.channels < 1) return absl::InvalidArgumentError("--channels must be at least 1");
  if (o.deadline <= absl::ZeroDuration()) return absl::InvalidArgumentError("--deadline <= 0");
  if (o.shards < 0 || o.shards > kMaxShards) {
    return absl::InvalidArgumentError(absl::StrCat("--server_shards must be 0 to ", kMaxShards));
  }
  if (o.resolve_for < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--resolve_for must not be negative");
  }
  if (o.run_id.empty()) {
    o.run_id = absl::StrFormat("run%08x", std::random_device{}());
  }
  if (ValidateAccountId(absl::StrCat(o.run_id, "-", o.accounts)) != Outcome::kOk) {
    return absl::InvalidArgumentError(
        "--run_id must be short and use only A-Z a-z 0-9 . _ : @ -, like account ids");
  }
  return o;
}

// Everything measured. Thread-safe.
class Stats {
 public:
  explicit Stats(int32_t shards) : shard_calls_(shards), shard_sheds_(shards) {}

  void Record(grpc::StatusCode code, std::chrono::nanoseconds latency, int32_t shard,
              bool measured) {
    if (!measured) return;  // Warm-up and drain calls are verified, not reported.
    std::lock_guard<std::mutex> lock(mu_);
    ++codes_[static_cast<size_t>(code) < kStatusCodeCount ? static_cast<size_t>(code) : 2];
    ++attempted_;
    if (code == grpc::StatusCode::OK) ok_.Record(latency);
    if (code == grpc::StatusCode::RESOURCE_EXHAUSTED) shed_.Record(latency);
    if (shard >= 0) {
      ++shard_calls_[shard];
      if (code == grpc::StatusCode::RESOURCE_EXHAUSTED) ++shard_sheds_[shard];
    }
  }
  void CountNotSent() {
    std::lock_guard<std::mutex> lock(mu_);
    ++not_sent_;
  }

  struct Snapshot {
    LatencyHistogram ok, shed;
    std::array<uint64_t, kStatusCodeCount> codes{};
    uint64_t attempted = 0, not_sent = 0;
    std::vector<uint64_t> shard_calls, shard_sheds;
  };
  Snapshot Take() const {
    std::lock_guard<std::mutex> lock(mu_);
    return {ok_, shed_, codes_, attempted_, not_sent_, shard_calls_, shard_sheds_};
  }

 private:
  mutable std::mutex mu_;
  LatencyHistogram ok_, shed_;
  std::array<uint64_t, kStatusCodeCount> codes_{};
  uint64_t attempted_ = 0;
  uint64_t not_sent_ = 0;
  std::vector<uint64_t> shard_calls_, shard_sheds_;
};

// Runs the calls: one Call object per RPC, finished by gRPC's callback.
class Driver {
 public:
  Driver(const Options& options, const AccountDistribution* accounts)
      : options_(options),
        accounts_(accounts),
        book_(static_cast<size_t>(options.accounts)),
        stats_(options.shards) {
    for (int32_t i = 0; i < options.channels; ++i) {
      grpc::ChannelArguments arguments;
      arguments.SetInt("ledger.loadtest.channel", i);  // Distinct args: distinct connections.
      // Reconnect soon after a server restart instead of after gRPC's default back-off (up to
      // two minutes): the crash tests restart ledgerd under load.
      arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
      arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
      arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
      stubs_.push_back(v1::Ledger::NewStub(
          NewLedgerChannel(options.target, options.tls, options.credentials, arguments)));
    }
    for (int64_t i = 0; i < options.accounts; ++i) {
      names_.push_back(absl::StrCat(options.run_id, "-acct-", i));
      shard_of_.push_back(options.shards > 0 ? ShardOf(names_.back(), options.shards) : -1);
    }
  }

  // A Deposit or Withdraw whose outcome is unknown, to be settled by retrying it.
  struct AmbiguousCall {
    size_t account;
    Op op;
    int64_t amount;
    std::string request_id;
  };

  void Run();
  LedgerBook& book() { return book_; }
  // After Run.
  const std::vector<AmbiguousCall>& ambiguous_calls() const { return ambiguous_; }
  const Stats& stats() const { return stats_; }
  const std::vector<std::string>& names() const { return names_; }
  double measured_seconds() const { return measured_seconds_; }
  v1::Ledger::Stub& stub() { return *stubs_[0]; }

 private:
  struct Call {
    // Closed loop: the slot's own workload, reused by the call that follows this one.
    std::unique_ptr<Workload> workload;
    PlannedCall plan;
    grpc::ClientContext context;
    v1::DepositRequest deposit;
    v1::WithdrawRequest withdraw;
    v1::BalanceRequest balance;
    v1::DepositResponse deposit_response;
    v1::WithdrawResponse withdraw_response;
    v1::BalanceResponse balance_response;
    Clock::time_point intended_start;
    std::string request_id;
    bool measured = false;
  };

  void Issue(std::unique_ptr<Workload> workload, const PlannedCall& plan,
             Clock::time_point intended_start);
  void Finish(Call* call, const grpc::Status& status);
  // Every path that ends a call goes through here: the last one wakes Run.
  void ReleaseInFlight();
  std::unique_ptr<Workload> NewWorkload();
  bool Measuring() const { return phase_.load() == kMeasuring; }
  bool Stopping() const { return phase_.load() == kStopping; }
  void RunClosedLoop();
  void RunOpenLoop();
  void ReportProgress(Clock::time_point start);

  enum Phase { kWarmingUp, kMeasuring, kStopping };

  const Options& options_;
  const AccountDistribution* accounts_;
  std::vector<std::unique_ptr<v1::Ledger::Stub>> stubs_;
  std::vector<std::string> names_;
  std::vector<int32_t> shard_of_;
  LedgerBook book_;
  Stats stats_;
  std::atomic<int> phase_{kWarmingUp};
  std::atomic<uint64_t> sequence_{0};
  std::atomic<int64_t> measured_issued_{0};
  std::atomic<int64_t> in_flight_{0};
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  double measured_seconds_ = 0;
  std::mutex ambiguous_mu_;
  std::vector<AmbiguousCall> ambiguous_;
};

void Driver::Issue(std::unique_ptr<Workload> workload, const PlannedCall& plan,
                   Clock::time_point intended_start) {
  auto* call = new Call;
  call->workload = std::move(workload);
  call->plan = plan;
  call->intended_start = intended_start;
  call->measured = Measuring();
  if (call->measured) measured_issued_.fetch_add(1);
  call->context.set_deadline(std::chrono::system_clock::now() +
                             absl::ToChronoNanoseconds(options_.deadline));
  call->context.set_wait_for_ready(options_.wait_for_ready);
  const uint64_t sequence = sequence_.fetch_add(1);
  v1::Ledger::Stub& stub = *stubs_[sequence % stubs_.size()];
  const std::string& account = names_[plan.account];
  call->request_id = absl::StrCat(options_.run_id, "-", sequence);
  const std::string& request_id = call->request_id;
  in_flight_.fetch_add(1);
  auto done = [this, call](const grpc::Status& status) { Finish(call, status); };
  switch (plan.op) {
    case Op::kDeposit:
      call->deposit.set_account_id(account);
      call->deposit.set_amount(plan.amount);
      call->deposit.set_request_id(request_id);
      stub.async()->Deposit(&call->context, &call->deposit, &call->deposit_response, done);
      break;
    case Op::kWithdraw:
      call->withdraw.set_account_id(account);
      call->withdraw.set_amount(plan.amount);
      call->withdraw.set_request_id(request_id);
      stub.async()->Withdraw(&call->context, &call->withdraw, &call->withdraw_response, done);
      break;
    case Op::kBalance:
      call->balance.set_account_id(account);
      stub.async()->Balance(&call->context, &call->balance, &call->balance_response, done);
      break;
  }
}

void Driver::Finish(Call* call, const grpc::Status& status) {
  const auto latency = Clock::now() - call->intended_start;
  book_.Record(call->plan.account, call->plan.op, call->plan.amount, status.error_code());
  if (EffectOf(call->plan.op, status.error_code()) == Effect::kUnknown) {
    std::lock_guard<std::mutex> lock(ambiguous_mu_);
    ambiguous_.push_back(
        {call->plan.account, call->plan.op, call->plan.amount, std::move(call->request_id)});
  }
  stats_.Record(status.error_code(), latency, shard_of_[call->plan.account], call->measured);
  std::unique_ptr<Workload> workload = std::move(call->workload);
  delete call;
  if (workload != nullptr && !Stopping()) {  // Closed loop: this slot's next call.
    const PlannedCall next = workload->Next();
    // Issued before this one is let go of, so in_flight_ cannot touch 0 in between. It can reach
    // 0 just below, though: the next call may already have finished, seeing the stop.
    Issue(std::move(workload), next, Clock::now());
  }
  ReleaseInFlight();
}

void Driver::ReleaseInFlight() {
  if (in_flight_.fetch_sub(1) == 1) {
    std::lock_guard<std::mutex> lock(done_mu_);
    done_cv_.notify_all();
  }
}

std::unique_ptr<Workload> Driver::NewWorkload() {
  return std::make_unique<Workload>(options_.mix, accounts_, options_.amount_min,
                                    options_.amount_max, std::random_device{}());
}

void Driver::Run() {
  if (options_.rate > 0) {
    RunOpenLoop();
  } else {
    RunClosedLoop();
  }
  // Every call ends by its deadline; wait for the last ones.
  std::unique_lock<std::mutex> lock(done_mu_);
  done_cv_.wait(lock, [this] { return in_flight_.load() == 0; });
}

void Driver::RunClosedLoop() {
  const Clock::time_point start = Clock::now();
  for (int32_t i = 0; i < options_.concurrency; ++i) {
    std::unique_ptr<Workload> workload = NewWorkload();
    const PlannedCall plan = workload->Next();
    Issue(std::move(workload), plan, Clock::now());
  }
  ReportProgress(start);
}

void Driver::RunOpenLoop() {
  const Clock::time_point start = Clock::now();
  std::thread progress([this, start] { ReportProgress(start); });
  const auto period = std::chrono::duration<double>(1.0 / options_.rate);
  std::unique_ptr<Workload> workload = NewWorkload();  // This thread's alone.
  for (uint64_t i = 0; !Stopping(); ++i) {
    const auto intended = start + std::chrono::duration_cast<Clock::duration>(period * i);
    std::this_thread::sleep_until(intended);
    if (Stopping()) break;
    const PlannedCall plan = workload->Next();
    if (in_flight_.load() >= options_.max_in_flight) {
      if (Measuring()) stats_.CountNotSent();
      continue;
    }
    Issue(nullptr, plan, intended);  // Latency counts from when the call should have gone out.
  }
  progress.join();
}

// Moves through warm-up and measurement, prints progress, and sets kStopping at the end.
void Driver::ReportProgress(Clock::time_point start) {
  const bool show = options_.progress || isatty(STDERR_FILENO);
  const auto warmup_end = start + absl::ToChronoNanoseconds(options_.warmup);
  if (options_.warmup == absl::ZeroDuration()) phase_ = kMeasuring;
  Clock::time_point measure_start = options_.warmup == absl::ZeroDuration() ? start : warmup_end;
  uint64_t last_ok = 0;
  // Checks the clock ten times a second, prints once a second.
  for (int tick_count = 1;; ++tick_count) {
    const auto tick = start + std::chrono::milliseconds(100) * tick_count;
    std::this_thread::sleep_until(tick);
    const auto now = Clock::now();
    if (phase_.load() == kWarmingUp && now >= warmup_end) {
      phase_ = kMeasuring;
      measure_start = now;
    }
    const bool time_up = phase_.load() == kMeasuring && options_.duration > absl::ZeroDuration() &&
                         now - measure_start >= absl::ToChronoNanoseconds(options_.duration);
    const bool count_up = options_.requests > 0 && measured_issued_.load() >= options_.requests;
    if (time_up || count_up) {
      measured_seconds_ = std::chrono::duration<double>(now - measure_start).count();
      phase_ = kStopping;
      return;
    }
    if (show && tick_count % 10 == 0) {
      const Stats::Snapshot snapshot = stats_.Take();
      const uint64_t ok = snapshot.codes[0];
      std::cerr << absl::StrFormat(
          "[%5.1fs] %s %8.0f OK/s  p99 %8.2f ms  shed %d\n",
          std::chrono::duration<double>(now - start).count(),
          phase_.load() == kWarmingUp ? "warm-up" : "measure", static_cast<double>(ok - last_ok),
          static_cast<double>(snapshot.ok.Percentile(0.99).count()) / 1e6,
          snapshot.codes[static_cast<size_t>(grpc::StatusCode::RESOURCE_EXHAUSTED)]);
      last_ok = ok;
    }
  }
}

// Reads every touched account's balance, a few calls at a time.
std::vector<std::optional<int64_t>> ReadBalances(Driver& driver, int64_t accounts,
                                                 absl::Duration deadline, bool* read_failed) {
  std::vector<std::optional<int64_t>> balances(static_cast<size_t>(accounts));
  const std::vector<size_t> touched = driver.book().TouchedAccounts();
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  constexpr int kReaders = 4;
  std::vector<std::thread> readers;
  readers.reserve(kReaders);
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&] {
      for (size_t i = next.fetch_add(1); i < touched.size(); i = next.fetch_add(1)) {
        v1::BalanceRequest request;
        request.set_account_id(driver.names()[touched[i]]);
        // A loaded server may shed these reads too: back off and retry, a bounded number of
        // times (about 20 s in all).
        auto backoff = std::chrono::milliseconds(5);
        for (int attempt = 0;; ++attempt) {
          v1::BalanceResponse response;
          grpc::ClientContext context;
          context.set_deadline(std::chrono::system_clock::now() +
                               absl::ToChronoNanoseconds(deadline));
          const grpc::Status status = driver.stub().Balance(&context, request, &response);
          if (status.ok()) {
            balances[touched[i]] = response.balance();
            break;
          }
          if (status.error_code() == grpc::StatusCode::NOT_FOUND) break;  // Never opened: 0.
          const bool transient = status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED ||
                                 status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                                 status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
          if (!transient || attempt == 100) {
            failed = true;
            break;
          }
          std::this_thread::sleep_for(backoff);
          backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
        }
      }
    });
  }
  for (std::thread& reader : readers) reader.join();
  *read_failed = failed.load();
  return balances;
}

struct Resolution {
  int64_t calls = 0;        // Ambiguous calls at the end of the run.
  int64_t applied = 0;      // Settled by retry: the server applied them (then or now).
  int64_t not_applied = 0;  // Settled by retry: the server rejected them (then or now).
  int64_t unresolved = 0;   // Still unknown when --resolve_for ran out.
};

// Retries every ambiguous call with its own request_id until the server gives a definite
// answer. The server applies a request_id at most once and replays the recorded outcome, so OK
// means "applied exactly once" and a rule rejection means "never applied", whichever attempt got
// there first.
Resolution ResolveAmbiguous(Driver& driver, const Options& options) {
  const std::vector<Driver::AmbiguousCall>& calls = driver.ambiguous_calls();
  Resolution result;
  result.calls = static_cast<int64_t>(calls.size());
  if (calls.empty() || options.resolve_for <= absl::ZeroDuration()) {
    result.unresolved = result.calls;
    return result;
  }
  const absl::Time give_up = absl::Now() + options.resolve_for;
  std::atomic<size_t> next{0};
  std::atomic<int64_t> applied{0}, not_applied{0}, unresolved{0};
  constexpr int kResolvers = 16;
  std::vector<std::thread> resolvers;
  resolvers.reserve(kResolvers);
  for (int r = 0; r < kResolvers; ++r) {
    resolvers.emplace_back([&] {
      for (size_t i = next.fetch_add(1); i < calls.size(); i = next.fetch_add(1)) {
        const Driver::AmbiguousCall& call = calls[i];
        auto backoff = std::chrono::milliseconds(10);
        for (;;) {
          grpc::ClientContext context;
          context.set_deadline(std::chrono::system_clock::now() +
                               absl::ToChronoNanoseconds(options.deadline));
          context.set_wait_for_ready(true);  // Through a restart, the answer is worth waiting.
          grpc::Status status;
          if (call.op == Op::kDeposit) {
            v1::DepositRequest request;
            request.set_account_id(driver.names()[call.account]);
            request.set_amount(call.amount);
            request.set_request_id(call.request_id);
            v1::DepositResponse response;
            status = driver.stub().Deposit(&context, request, &response);
          } else {
            v1::WithdrawRequest request;
            request.set_account_id(driver.names()[call.account]);
            request.set_amount(call.amount);
            request.set_request_id(call.request_id);
            v1::WithdrawResponse response;
            status = driver.stub().Withdraw(&context, request, &response);
          }
          const grpc::StatusCode code = status.error_code();
          if (code == grpc::StatusCode::OK || code == grpc::StatusCode::FAILED_PRECONDITION ||
              code == grpc::StatusCode::NOT_FOUND || code == grpc::StatusCode::OUT_OF_RANGE) {
            const bool was_applied = code == grpc::StatusCode::OK;
            driver.book().Resolve(call.account, call.op, call.amount, was_applied);
            (was_applied ? applied : not_applied).fetch_add(1);
            break;
          }
          // Shed, timed out, or the server is (re)starting: the answer is still to come. Any
          // other code (ALREADY_EXISTS would mean a reused request_id) cannot settle it.
          const bool transient = code == grpc::StatusCode::RESOURCE_EXHAUSTED ||
                                 code == grpc::StatusCode::UNAVAILABLE ||
                                 code == grpc::StatusCode::DEADLINE_EXCEEDED ||
                                 code == grpc::StatusCode::CANCELLED;
          if (!transient || absl::Now() >= give_up) {
            unresolved.fetch_add(1);
            break;
          }
          std::this_thread::sleep_for(backoff);
          backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
        }
      }
    });
  }
  for (std::thread& resolver : resolvers) resolver.join();
  result.applied = applied.load();
  result.not_applied = not_applied.load();
  result.unresolved = unresolved.load();
  return result;
}

std::string LatencyJson(const LatencyHistogram& histogram) {
  auto us = [&](double q) { return static_cast<double>(histogram.Percentile(q).count()) / 1e3; };
  return absl::StrFormat(
      "{\"count\":%d,\"p50\":%.1f,\"p90\":%.1f,\"p99\":%.1f,\"p999\":%.1f,\"max\":%.1f}",
      histogram.count(), us(0.5), us(0.9), us(0.99), us(0.999),
      static_cast<double>(histogram.max().count()) / 1e3);
}

std::string LatencyLine(const char* label, const LatencyHistogram& histogram) {
  auto ms = [&](double q) { return static_cast<double>(histogram.Percentile(q).count()) / 1e6; };
  return absl::StrFormat(
      "%-20s p50 %8.3f  p90 %8.3f  p99 %8.3f  p99.9 %8.3f  max %8.3f ms  (%d calls)\n", label,
      ms(0.5), ms(0.9), ms(0.99), ms(0.999), static_cast<double>(histogram.max().count()) / 1e6,
      histogram.count());
}

int Main() {
  absl::StatusOr<Options> options = OptionsFromFlags();
  if (!options.ok()) {
    std::cerr << "ledger-loadtest: " << options.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<AccountDistribution> accounts =
      AccountDistribution::Create(options->distribution, static_cast<size_t>(options->accounts));
  if (!accounts.ok()) {
    std::cerr << "ledger-loadtest: " << accounts.status().message() << "\n";
    return 2;
  }
  Driver driver(*options, &*accounts);
  std::cerr << "ledger-loadtest: run " << options->run_id << " against " << options->target
            << (options->rate > 0
                    ? absl::StrCat(", open loop at ", options->rate, " calls/s")
                    : absl::StrCat(", closed loop, ", options->concurrency, " in flight"))
            << "\n";
  driver.Run();

  const Stats::Snapshot s = driver.stats().Take();
  const double seconds = driver.measured_seconds() > 0 ? driver.measured_seconds() : 1;
  const double ok_per_second = static_cast<double>(s.codes[0]) / seconds;
  const double attempted_per_second = static_cast<double>(s.attempted + s.not_sent) / seconds;

  std::string verification = "SKIPPED";
  VerificationResult checked;
  Resolution resolution;
  if (options->verify) {
    resolution = ResolveAmbiguous(driver, *options);
    bool read_failed = false;
    const auto balances = ReadBalances(driver, options->accounts, options->deadline, &read_failed);
    checked = driver.book().Verify(balances, driver.names());
    if (read_failed) {
      checked.pass = false;
      checked.mismatches.push_back("some balances could not be read");
    }
    verification = checked.pass ? "PASS" : "FAIL";
  }

  std::ostringstream report;
  report << absl::StrFormat("measured %.1f s: %.0f OK/s, %.0f attempted/s\n", seconds,
                            ok_per_second, attempted_per_second);
  report << LatencyLine("latency OK", s.ok) << LatencyLine("latency SHED", s.shed);
  report << "codes:";
  for (size_t code = 0; code < kStatusCodeCount; ++code) {
    if (s.codes[code] > 0) report << " " << kStatusCodeNames[code] << "=" << s.codes[code];
  }
  if (s.not_sent > 0) report << " NOT_SENT(client overloaded)=" << s.not_sent;
  report << "\n";
  for (size_t shard = 0; shard < s.shard_calls.size(); ++shard) {
    report << absl::StrFormat("shard %d: %d calls, %d shed\n", shard, s.shard_calls[shard],
                              s.shard_sheds[shard]);
  }
  if (options->verify && resolution.calls > 0) {
    report << absl::StrFormat(
        "ambiguous calls: %d; settled by retrying with their request_id: %d applied, %d not "
        "applied; unresolved: %d\n",
        resolution.calls, resolution.applied, resolution.not_applied, resolution.unresolved);
  }
  report << "verification: " << verification;
  if (options->verify) {
    report << absl::StrFormat(
        " (%d accounts; balances sum %d, acknowledged net %d, ambiguous +%d/-%d)",
        checked.accounts_checked, checked.balance_sum, checked.acknowledged_net,
        checked.ambiguous_deposits, checked.ambiguous_withdrawals);
  }
  report << "\n";
  for (const std::string& mismatch : checked.mismatches) report << "  " << mismatch << "\n";
  if (!options->json) std::cout << report.str();

  if (options->json || !options->json_file.empty()) {
    std::ostringstream json;
    json << absl::StrFormat("{\"run_id\":\"%s\",\"measured_seconds\":%.3f,", options->run_id,
                            seconds)
         << absl::StrFormat("\"ok_per_second\":%.1f,\"attempted_per_second\":%.1f,", ok_per_second,
                            attempted_per_second)
         << "\"codes\":{";
    bool first = true;
    for (size_t code = 0; code < kStatusCodeCount; ++code) {
      if (s.codes[code] == 0) continue;
      json << (first ? "" : ",") << "\"" << kStatusCodeNames[code] << "\":" << s.codes[code];
      first = false;
    }
    json << "},\"not_sent\":" << s.not_sent << ",\"latency_us\":{\"ok\":" << LatencyJson(s.ok)
         << ",\"resource_exhausted\":" << LatencyJson(s.shed) << "},\"shards\":[";
    for (size_t shard = 0; shard < s.shard_calls.size(); ++shard) {
      json << (shard == 0 ? "" : ",") << "{\"calls\":" << s.shard_calls[shard]
           << ",\"shed\":" << s.shard_sheds[shard] << "}";
    }
    json << "],\"ambiguous\":{\"calls\":" << resolution.calls
         << ",\"applied\":" << resolution.applied << ",\"not_applied\":" << resolution.not_applied
         << ",\"unresolved\":" << resolution.unresolved << "}";
    json << ",\"verification\":\"" << verification << "\"}\n";
    if (options->json) std::cout << json.str();
    if (!options->json_file.empty() && !(std::ofstream(options->json_file) << json.str())) {
      std::cerr << "ledger-loadtest: cannot write " << options->json_file << "\n";
      return 1;
    }
  }
  return verification == "FAIL" ? 1 : 0;
}

}  // namespace
}  // namespace ledger

int main(int argc, char** argv) {
  const ledger::cli::ProgramSpec program{
      "ledger-loadtest", __FILE__,
      "drives ledgerd with Deposit/Withdraw/Balance calls, reports throughput and\n"
      "latency, and verifies that every balance matches the calls made (exit 1 on FAIL, 2 on bad\n"
      "flags).\n"
      "\n"
      "Usage:\n"
      "  ledger-loadtest [--target=HOST:PORT] [--duration=10s | --requests=N] [--json] ..."};
  const std::vector<std::string> stray = ledger::cli::ParseCommandLineOrExit(argc, argv, program);
  if (!stray.empty()) {
    ledger::cli::ExitUsage(program, absl::StrCat("unexpected argument \"", stray[0],
                                                 "\"; ledger-loadtest takes only flags"));
  }
  return ledger::Main();
}
