// ledger-loadtest: drives ledgerd hard, reports what a capacity planner needs, and checks at the
// end that no money was lost or invented.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/check.h"
#include "base/stable_hash.h"
#include "base/status_code_names.h"
#include "cli/command_line.h"
#include "cli/host_port.h"
#include "client/adaptive_throttle.h"
#include "client/batch_call.h"
#include "client/call_answer.h"
#include "client/call_kind.h"
#include "client/channel_credentials.h"
#include "client/concurrency_limit.h"
#include "client/exit_codes.h"
#include "client/latency_histogram.h"
#include "client/ledger_book.h"
#include "client/loadtest_report.pb.h"
#include "client/loadtest_stats.h"
#include "client/pushback.h"
#include "client/retry_budget.h"
#include "client/retry_timer.h"
#include "client/tls_flags.h"
#include "client/workload.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "ledger/v1/ledger.grpc.pb.h"

ABSL_FLAG(std::string, target, "localhost:50051",
          "HOST:PORT of ledgerd; :PORT is localhost, [::1]:PORT an IPv6 address");
ABSL_FLAG(int32_t, concurrency, 64, "closed loop: calls in flight at all times");
ABSL_FLAG(double, rate, 0,
          "open loop: calls per second, each timed from its intended send time (no coordinated "
          "omission); 0 runs the closed loop");
ABSL_FLAG(int32_t, max_in_flight, 0,
          "open loop: calls in flight at most (a call waiting to retry included); beyond, a "
          "call is not sent and counts as NOT_SENT(in-flight cap). 0: 100 per --channels "
          "connection, ledgerd's default --max_concurrent_streams: more would only wait inside "
          "the client's gRPC channel for an HTTP/2 stream, a queue nothing bounds");
ABSL_FLAG(bool, adaptive_in_flight, true,
          "open loop: keep the calls in flight under an AIMD limit within --max_in_flight, so "
          "that the client keeps about as many open as the server admits: each answer the "
          "server accepted raises it by 1/limit, a RESOURCE_EXHAUSTED cuts it by 10% (at most "
          "once per round trip); calls over it count as NOT_SENT(in-flight cap)");
ABSL_FLAG(absl::Duration, max_send_delay, absl::Milliseconds(2),
          "open loop: a call the sender reaches more than this after its intended send time is "
          "not sent and counts as NOT_SENT(late): the client itself could not keep up, and "
          "sending it late would measure the client's lag as the server's latency; inf sends "
          "every call however late");
ABSL_FLAG(int32_t, max_retries, 2,
          "retries of a call shed with RESOURCE_EXHAUSTED whose trailing metadata carries "
          "grpc-retry-pushback-ms (a non-negative integer): the same request is sent again after "
          "that many ms (plus up to 10% jitter), if it can start before the call's --deadline "
          "and --retry_budget allows; 0 never retries");
ABSL_FLAG(double, throttle_k, 1.1,
          "open loop: client-side adaptive throttling (Google SRE, Handling Overload); 0 turns it "
          "off. Over the last 10 s, a new call is refused locally, unsent, with probability "
          "(requests - K x accepted) / (requests + 1), and counts as NOT_SENT(throttled): a "
          "client the server keeps refusing stops spending the server's CPU on refusals. The "
          "server then sees about K times the calls it accepts; smaller K throttles harder");
ABSL_FLAG(double, retry_budget, 0.1,
          "retries may be at most this fraction of first attempts (0 to 1): each first attempt "
          "earns this many tokens, up to 100, and each retry spends one, so retries can never "
          "multiply an overload");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(10), "how long to measure, after the warm-up");
ABSL_FLAG(int64_t, requests, 0, "stop after this many measured calls (0: use --duration only)");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(2),
          "calls made before measuring; verified, not reported");
ABSL_FLAG(int64_t, accounts, 1000, "distinct account ids");
ABSL_FLAG(int32_t, batch, 1,
          "operations per call: 1 makes one Deposit/Withdraw/Balance/Transfer call each; 2 to "
          "8192 make each call one Apply carrying that many operations drawn from --mix, each "
          "with its own request_id (transfer_id), each verified, counted by its own result's "
          "code, and retried on its own (the operations refused with RESOURCE_EXHAUSTED, after "
          "the call's pushback). --concurrency, --rate, --requests and --max_in_flight count "
          "calls");
ABSL_FLAG(int64_t, fund, 0,
          "before the warm-up, deposit this many minor units into each of the --accounts "
          "(opening them), --batch deposits per call, so that withdrawals and transfers find "
          "money; not measured, but verified like every call. 0: no setup");
ABSL_FLAG(std::string, distribution, "uniform", "uniform, or zipf:S (hot accounts; S > 0)");
ABSL_FLAG(std::string, mix, "deposit=70,withdraw=25,balance=5",
          "operation weights: deposit=N,withdraw=N,balance=N,transfer=N (left out: 0)");
ABSL_FLAG(std::string, transfer_scope, "any",
          "transfers: any (the destination is any other account), same_shard (an account on the "
          "source's shard) or cross_shard (on another shard); the last two need "
          "--server_shards, the server's --shards");
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
ABSL_FLAG(bool, progress, false, "progress once a second on stderr even when it is not a terminal");

namespace ledger {
namespace {

using Clock = std::chrono::steady_clock;

// ledgerd's default --max_concurrent_streams: the calls one connection carries at once.
constexpr int32_t kStreamsPerChannel = 100;

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
  absl::Duration max_send_delay = absl::Milliseconds(2);
  int32_t max_retries = 2;
  double retry_budget = 0.1;
  double throttle_k = 1.1;
  bool adaptive_in_flight = true;
  TransferScope transfer_scope = TransferScope::kAny;
  int32_t batch = 1;  // Operations per call; 1: unary calls.
  int64_t fund = 0;   // Setup: deposited into every account before the run; 0: no setup.
  // Set after the flags above (kept out of their initializer list).
  ClientTlsOptions tls = {};
  // From NewChannelCredentials(tls): plaintext or TLS.
  std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr;
};

// The most --server_shards: ledgerd's own most --shards. The client keeps its own copy (it
// needs nothing of the server's code); a larger value could never equal the server's --shards.
constexpr int32_t kServerShardsMax = 1024;

// The longest account id ledgerd accepts; the run id must leave room for "-acct-N" within it.
constexpr size_t kAccountIdMaxBytes = 128;

// Whether `account_id` is 1 to kAccountIdMaxBytes bytes of [A-Za-z0-9._:@-], as ledgerd
// requires of an account id.
bool IsValidAccountId(absl::string_view account_id) {
  if (account_id.empty() || account_id.size() > kAccountIdMaxBytes) return false;
  return std::all_of(account_id.begin(), account_id.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '@' || c == '-';
  });
}

// The most retries of one call that --max_retries accepts: more would only stretch a call that
// the server keeps refusing.
constexpr int32_t kMaxRetriesLimit = 10;
// The most jitter added to a pushback, as a fraction of it, so that calls shed together do not
// all come back in the same millisecond.
constexpr double kPushbackJitter = 0.1;

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
  o.max_send_delay = absl::GetFlag(FLAGS_max_send_delay);
  o.max_retries = absl::GetFlag(FLAGS_max_retries);
  o.retry_budget = absl::GetFlag(FLAGS_retry_budget);
  o.throttle_k = absl::GetFlag(FLAGS_throttle_k);
  o.adaptive_in_flight = absl::GetFlag(FLAGS_adaptive_in_flight);
  o.batch = absl::GetFlag(FLAGS_batch);
  o.fund = absl::GetFlag(FLAGS_fund);
  absl::StatusOr<cli::HostPort> target =
      cli::ParseHostPort("--target", o.target, cli::AddressUse::kConnect, 50051);
  if (!target.ok()) return target.status();
  o.target = target->ToString();
  o.tls = ClientTlsOptionsFromFlags();
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      NewChannelCredentials(o.tls);
  if (!credentials.ok()) return credentials.status();
  o.credentials = *std::move(credentials);
  absl::StatusOr<OperationMix> mix = ParseOperationMix(absl::GetFlag(FLAGS_mix));
  if (!mix.ok()) return mix.status();
  o.mix = *mix;
  absl::StatusOr<TransferScope> scope = ParseTransferScope(absl::GetFlag(FLAGS_transfer_scope));
  if (!scope.ok()) return scope.status();
  o.transfer_scope = *scope;
  if (o.concurrency < 1) return absl::InvalidArgumentError("--concurrency must be at least 1");
  if (o.batch < 1 || static_cast<size_t>(o.batch) > kMaxBatchOperations) {
    return absl::InvalidArgumentError(
        absl::StrCat("--batch must be 1 to ", kMaxBatchOperations, " (the server's limit)"));
  }
  if (o.fund < 0) return absl::InvalidArgumentError("--fund must not be negative");
  if (o.rate < 0) return absl::InvalidArgumentError("--rate must not be negative");
  if (o.max_in_flight < 0) return absl::InvalidArgumentError("--max_in_flight must be >= 0");
  // Within one connection's worth of streams per channel: see the flag's help.
  if (o.max_in_flight == 0) {
    o.max_in_flight = static_cast<int32_t>(
        std::min<int64_t>(int64_t{kStreamsPerChannel} * std::max(o.channels, 1),
                          std::numeric_limits<int32_t>::max()));
  }
  if (o.max_send_delay <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--max_send_delay must be positive (inf: never late)");
  }
  if (o.max_retries < 0 || o.max_retries > kMaxRetriesLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_retries must be 0 to ", kMaxRetriesLimit));
  }
  if (!(o.retry_budget >= 0 && o.retry_budget <= 1)) {
    return absl::InvalidArgumentError("--retry_budget must be 0 to 1");
  }
  if (!(o.throttle_k >= 0 && o.throttle_k <= 1000)) {
    return absl::InvalidArgumentError("--throttle_k must be 0 (off) to 1000");
  }
  if (o.duration <= absl::ZeroDuration() && o.requests <= 0) {
    return absl::InvalidArgumentError("give a positive --duration or --requests");
  }
  if (o.warmup < absl::ZeroDuration()) return absl::InvalidArgumentError("--warmup < 0");
  if (o.amount_min < 1 || o.amount_max < o.amount_min) {
    return absl::InvalidArgumentError("need 1 <= --amount_min <= --amount_max");
  }
  if (o.channels < 1) return absl::InvalidArgumentError("--channels must be at least 1");
  if (o.deadline <= absl::ZeroDuration()) return absl::InvalidArgumentError("--deadline <= 0");
  if (o.shards < 0 || o.shards > kServerShardsMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("--server_shards must be 0 to ", kServerShardsMax));
  }
  if (o.resolve_for < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--resolve_for must not be negative");
  }
  if (o.run_id.empty()) {
    o.run_id = absl::StrFormat("run%08x", std::random_device{}());
  }
  if (!IsValidAccountId(absl::StrCat(o.run_id, "-", o.accounts))) {
    return absl::InvalidArgumentError(
        "--run_id must be short and use only A-Z a-z 0-9 . _ : @ -, like account ids");
  }
  return o;
}

// The id of account `index` in this run: the run id keeps runs apart.
std::string AccountName(const std::string& run_id, int64_t index) {
  return absl::StrCat(run_id, "-acct-", index);
}

// Which accounts a transfer may pair (--transfer_scope), from the shard of each account's name
// as the server routes it (--server_shards). Only for a mix with transfers.
absl::StatusOr<TransferPartners> NewTransferPartners(const Options& options) {
  std::vector<int32_t> shard_of;
  if (options.shards > 0) {
    for (int64_t i = 0; i < options.accounts; ++i) {
      shard_of.push_back(ShardOf(AccountName(options.run_id, i), options.shards));
    }
  }
  return TransferPartners::Create(options.transfer_scope, static_cast<size_t>(options.accounts),
                                  std::move(shard_of));
}

// Bounds on every wait outside the measurement itself (which --duration, --requests and
// --deadline bound).
// How long the start may take to reach ledgerd before the run is refused.
constexpr absl::Duration kConnectTimeout = absl::Seconds(3);
// While settling or verifying: ledgerd counts as gone when nothing at all has come back from it
// (no answer of any code, only UNAVAILABLE or DEADLINE_EXCEEDED) for this long, or for twice
// --deadline if that is longer. A restart takes well under this.
constexpr absl::Duration kGoneAfter = absl::Seconds(5);
// Verification reads: an overall bound, plus this much per account read.
constexpr absl::Duration kVerifyTimeLimit = absl::Seconds(60);
constexpr absl::Duration kVerifyTimePerAccount = absl::Milliseconds(1);

// The first SIGINT or SIGTERM (0: none yet). Set by the signal handler only; read by every loop,
// which then stops. A second signal exits at once from the handler.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "used in a signal handler");

void OnSignal(int signal_number) {
  int none = 0;
  if (!g_signal.compare_exchange_strong(none, signal_number)) {
    constexpr char kAgain[] = "\nledger-loadtest: interrupted again; exiting at once\n";
    (void)!write(STDERR_FILENO, kAgain, sizeof(kAgain) - 1);
    _exit(128 + signal_number);
  }
  constexpr char kFirst[] =
      "\nledger-loadtest: interrupted; stopping and printing the partial report (press Ctrl-C "
      "again to exit at once)\n";
  (void)!write(STDERR_FILENO, kFirst, sizeof(kFirst) - 1);
}

void InstallSignalHandlers() {
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

bool Interrupted() { return g_signal.load() != 0; }
const char* SignalName(int signal_number) {
  return signal_number == SIGINT ? "SIGINT" : signal_number == SIGTERM ? "SIGTERM" : "a signal";
}

bool ShowProgress(const Options& options) { return options.progress || isatty(STDERR_FILENO); }

// "UNAVAILABLE: failed to connect to all addresses; ..."
std::string Describe(const grpc::Status& status) {
  return absl::StrCat(StatusCodeName(status.error_code()), ": ", status.error_message());
}

absl::Duration GoneAfter(const Options& options) {
  return std::max(kGoneAfter, 2 * options.deadline);
}

// User plus system CPU time this process has used so far.
double ProcessCpuSeconds() {
  struct rusage usage = {};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

std::chrono::system_clock::time_point DeadlineIn(absl::Duration duration) {
  return std::chrono::system_clock::now() + absl::ToChronoNanoseconds(duration);
}

// Calls `line` and prints what it returns on stderr once a second, from its own thread, until
// destroyed (when `show`; else does nothing). Not thread-safe; `line` must be.
class ProgressTicker {
 public:
  ProgressTicker(bool show, std::function<std::string(double seconds)> line) {
    if (!show) return;
    thread_ = std::thread([this, line = std::move(line)] {
      const auto start = Clock::now();
      absl::MutexLock lock(&mu_);
      for (int second = 1;; ++second) {
        const absl::Duration to_next_line =
            absl::FromChrono(start + std::chrono::seconds(second) - Clock::now());
        if (mu_.AwaitWithTimeout(absl::Condition(&done_), to_next_line)) return;
        std::cerr << line(std::chrono::duration<double>(Clock::now() - start).count()) << "\n";
      }
    });
  }
  ~ProgressTicker() {
    if (!thread_.joinable()) return;
    {
      absl::MutexLock lock(&mu_);
      done_ = true;  // Await re-evaluates its condition when the lock is released.
    }
    thread_.join();
  }
  ProgressTicker(const ProgressTicker&) = delete;
  ProgressTicker& operator=(const ProgressTicker&) = delete;

 private:
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The last time anything came back from the server, and the last error of a call that did not
// reach it. Thread-safe.
class ServerWatch {
 public:
  ServerWatch() : last_answer_(Clock::now()) {}
  void Answered() {
    absl::MutexLock lock(&mu_);
    last_answer_ = Clock::now();
  }
  void NotAnswered(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    last_error_ = Describe(status);
  }
  // True when nothing has come back for `gone_after`.
  bool Gone(absl::Duration gone_after) const {
    absl::MutexLock lock(&mu_);
    return Clock::now() - last_answer_ >= absl::ToChronoNanoseconds(gone_after);
  }
  // For a progress line: "" while ledgerd answers, else "; no answer from ledgerd for 3s (last
  // error: ...)".
  std::string Silence() const {
    absl::MutexLock lock(&mu_);
    const auto silent = Clock::now() - last_answer_;
    if (silent < std::chrono::seconds(1)) return "";
    return absl::StrCat(
        "; no answer from ledgerd for ",
        absl::FormatDuration(absl::Trunc(absl::FromChrono(silent), absl::Seconds(1))),
        last_error_.empty() ? "" : absl::StrCat(" (last error: ", last_error_, ")"));
  }

 private:
  mutable absl::Mutex mu_;
  Clock::time_point last_answer_ ABSL_GUARDED_BY(mu_);
  std::string last_error_ ABSL_GUARDED_BY(mu_);
};

// Why the measurement stopped.
enum class StopReason { kTimeUp, kRequestsDone, kInterrupted };

// Runs the calls: one Call object per RPC, finished by gRPC's callback.
class Driver {
 public:
  // `partners` may be null when the mix has no transfers.
  Driver(const Options& options, const AccountDistribution* accounts,
         const TransferPartners* partners)
      : options_(options),
        accounts_(accounts),
        partners_(partners),
        book_(static_cast<size_t>(options.accounts)),
        stats_(options.shards),
        retry_budget_(options.retry_budget),
        throttle_(options.rate > 0 ? options.throttle_k : 0),
        in_flight_limit_(/*min=*/1, /*max=*/options.max_in_flight) {
    for (int32_t i = 0; i < options.channels; ++i) {
      grpc::ChannelArguments arguments;
      arguments.SetInt("ledger.loadtest.channel", i);  // Distinct args: distinct connections.
      // Reconnect soon after a server restart instead of after gRPC's default back-off (up to
      // two minutes): the crash tests restart ledgerd under load.
      arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
      arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
      arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
      channels_.push_back(
          NewLedgerChannel(options.target, options.tls, options.credentials, arguments));
      stubs_.push_back(v1::Ledger::NewStub(channels_.back()));
    }
    for (int64_t i = 0; i < options.accounts; ++i) {
      names_.push_back(AccountName(options.run_id, i));
      shard_of_.push_back(options.shards > 0 ? ShardOf(names_.back(), options.shards) : -1);
    }
  }

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
  v1::Ledger::Stub& stub() { return *stubs_[0]; }
  // One fail-fast Balance call (deadline 1 s): when ledgerd cannot be reached, its status says
  // why (connection refused, TLS handshake, ...), where a waiting call only says
  // DEADLINE_EXCEEDED. Thread-safe.
  grpc::Status Probe();

 private:
  struct Call {
    // Closed loop: the slot's own workload, reused by the call that follows this one.
    std::unique_ptr<Workload> workload;
    // One operation for a unary call, --batch for an Apply; each with its own id in `ids`.
    std::vector<PlannedCall> plans;
    std::vector<std::string> ids;  // request_id (a transfer's transfer_id) of each plan.
    // Apply: the plans (by index) the next attempt carries: all of them at first, then those
    // refused with RESOURCE_EXHAUSTED. The other plans are finished (recorded in the book).
    std::vector<size_t> pending;
    bool batched = false;  // An Apply call (--batch > 1), else a unary call of plans[0].
    bool setup = false;    // A --fund call: its successor is the next setup call.
    // One per attempt (a context cannot be reused); a retry replaces it.
    std::unique_ptr<grpc::ClientContext> context;
    v1::Ledger::Stub* stub = nullptr;
    // The first attempt's deadline, which bounds the retries too: --deadline bounds the call.
    std::chrono::system_clock::time_point deadline;
    int32_t attempts = 0;
    v1::DepositRequest deposit;
    v1::WithdrawRequest withdraw;
    v1::BalanceRequest balance;
    v1::TransferRequest transfer;
    v1::DepositResponse deposit_response;
    v1::WithdrawResponse withdraw_response;
    v1::BalanceResponse balance_response;
    v1::TransferResponse transfer_response;
    v1::ApplyRequest apply;  // The `pending` plans.
    v1::ApplyResponse apply_response;
    Clock::time_point intended_start;
    // This attempt's: the first attempt's is `intended_start`, a retry's when it was sent.
    Clock::time_point attempt_start;
    bool measured = false;
  };

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
  // Lets go of a finished call, after starting the one that follows it (a closed loop's slot,
  // or the next setup call).
  void EndCall(Call* call);
  // Records the final `code` of operation `index` of `call` in the book (and as ambiguous when
  // its outcome is unknown), and adds it to `outcomes` for the statistics.
  void FinishOperation(const Call& call, size_t index, grpc::StatusCode code,
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

  const Options& options_;
  const AccountDistribution* accounts_;
  const TransferPartners* partners_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::Ledger::Stub>> stubs_;
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

absl::Status Driver::Connect(absl::Duration timeout) {
  const auto deadline = DeadlineIn(timeout);
  bool connected = true;
  for (const std::shared_ptr<grpc::Channel>& channel : channels_) {
    connected = connected && channel->WaitForConnected(deadline);
  }
  if (connected) return absl::OkStatus();
  const grpc::Status status = Probe();
  if (ServerAnswered(status.error_code())) return absl::OkStatus();  // Just came up.
  return absl::UnavailableError(absl::StrCat("cannot connect to ledgerd at ", options_.target,
                                             " within ", absl::FormatDuration(timeout), ": ",
                                             Describe(status)));
}

grpc::Status Driver::Probe() {
  v1::BalanceRequest request;
  request.set_account_id(names_[0]);
  v1::BalanceResponse response;
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(absl::Seconds(1)));
  return stub().Balance(&context, request, &response);
}

bool Driver::ClaimCall(bool* measured) {
  if (Stopping()) return false;
  *measured = Measuring();
  if (!*measured || options_.requests <= 0) return true;
  return measured_claimed_.fetch_add(1) < options_.requests;
}

void Driver::Issue(std::unique_ptr<Workload> workload, std::vector<PlannedCall> plans,
                   Clock::time_point intended_start, bool measured, bool setup) {
  LEDGER_CHECK(!plans.empty());
  auto* call = new Call;
  call->workload = std::move(workload);
  call->plans = std::move(plans);
  call->batched = options_.batch > 1;
  call->setup = setup;
  call->intended_start = intended_start;
  call->attempt_start = intended_start;
  call->measured = measured;
  // Also with --wait_for_ready: a call waits for the connection until this deadline, no longer;
  // and its retries start before it or not at all.
  call->deadline = DeadlineIn(options_.deadline);
  call->stub = stubs_[call_sequence_.fetch_add(1) % stubs_.size()].get();
  // Every attempt carries the same request_id (a transfer's transfer_id): one logical operation,
  // applied at most once. The run id makes it unique in the ledger, as a transfer_id must be.
  const uint64_t first_id = sequence_.fetch_add(call->plans.size());
  call->ids.reserve(call->plans.size());
  call->pending.reserve(call->plans.size());
  for (size_t i = 0; i < call->plans.size(); ++i) {
    call->ids.push_back(absl::StrCat(options_.run_id, "-", first_id + i));
    call->pending.push_back(i);
  }
  in_flight_.fetch_add(1);  // Until Finish lets go of the call, retries included.
  retry_budget_.OnFirstAttempt();
  Send(call);
}

std::vector<PlannedCall> Driver::NextPlans(Workload& workload) const {
  std::vector<PlannedCall> plans;
  plans.reserve(static_cast<size_t>(options_.batch));
  for (int32_t i = 0; i < options_.batch; ++i) plans.push_back(workload.Next());
  return plans;
}

void Driver::Send(Call* call) {
  ++call->attempts;
  call->context = std::make_unique<grpc::ClientContext>();
  call->context->set_deadline(call->deadline);
  call->context->set_wait_for_ready(options_.wait_for_ready);
  if (!call->batched) {
    SendUnary(call);
    return;
  }
  call->apply.Clear();
  call->apply_response.Clear();
  for (size_t index : call->pending) {
    AddApplyOperation(call->plans[index], call->ids[index], names_, &call->apply);
  }
  call->stub->async()->Apply(call->context.get(), &call->apply, &call->apply_response,
                             [this, call](const grpc::Status& status) { Finish(call, status); });
}

void Driver::SendUnary(Call* call) {
  auto done = [this, call](const grpc::Status& status) { Finish(call, status); };
  const PlannedCall& plan = call->plans[0];
  const std::string& account = names_[plan.account];
  const std::string& id = call->ids[0];
  switch (plan.op) {
    case CallKind::kDeposit:
      call->deposit.set_account_id(account);
      call->deposit.set_amount(plan.amount);
      call->deposit.set_request_id(id);
      call->stub->async()->Deposit(call->context.get(), &call->deposit, &call->deposit_response,
                                   done);
      return;
    case CallKind::kWithdraw:
      call->withdraw.set_account_id(account);
      call->withdraw.set_amount(plan.amount);
      call->withdraw.set_request_id(id);
      call->stub->async()->Withdraw(call->context.get(), &call->withdraw, &call->withdraw_response,
                                    done);
      return;
    case CallKind::kBalance:
      call->balance.set_account_id(account);
      call->stub->async()->Balance(call->context.get(), &call->balance, &call->balance_response,
                                   done);
      return;
    case CallKind::kTransfer:
      call->transfer.set_transfer_id(id);
      call->transfer.set_from_account_id(account);
      call->transfer.set_to_account_id(names_[plan.to_account]);
      call->transfer.set_amount(plan.amount);
      call->stub->async()->Transfer(call->context.get(), &call->transfer, &call->transfer_response,
                                    done);
      return;
  }
  LEDGER_CHECK(false);  // Only a value cast from outside the enum.
}

std::optional<Clock::duration> Driver::RetryDelay(Call* call) {
  using RetryEvent = Stats::RetryEvent;
  const std::optional<std::chrono::milliseconds> pushback =
      RetryPushback(call->context->GetServerTrailingMetadata());
  if (!pushback.has_value()) return std::nullopt;  // None, or the server said "do not retry".
  const auto count = [&](RetryEvent event) {
    if (call->measured) stats_.CountRetry(event);
  };
  if (call->attempts > options_.max_retries) {
    count(RetryEvent::kDeniedByMaxRetries);
    return std::nullopt;
  }
  thread_local std::minstd_rand random(std::random_device{}());
  const auto jitter = std::chrono::duration_cast<Clock::duration>(
      *pushback * std::uniform_real_distribution<double>(0, kPushbackJitter)(random));
  const auto delay = std::chrono::duration_cast<Clock::duration>(*pushback) + jitter;
  // A retry that could not start before the deadline would only end DEADLINE_EXCEEDED, and turn
  // a certain "not applied" into an unknown outcome.
  if (std::chrono::system_clock::now() + delay >= call->deadline) {
    count(RetryEvent::kDeniedByDeadline);
    return std::nullopt;
  }
  if (!retry_budget_.TryRetry()) {
    count(RetryEvent::kDeniedByBudget);
    return std::nullopt;
  }
  count(RetryEvent::kSent);
  return delay;
}

void Driver::FinishOperation(const Call& call, size_t index, grpc::StatusCode code,
                             std::vector<OperationOutcome>* outcomes,
                             std::vector<AmbiguousCall>* ambiguous) {
  const PlannedCall& plan = call.plans[index];
  if (plan.op == CallKind::kTransfer) {
    book_.RecordTransfer(plan.account, plan.to_account, plan.amount, code);
  } else {
    book_.Record(plan.account, plan.op, plan.amount, code);
  }
  if (EffectOf(plan.op, code) == Effect::kUnknown) {
    ambiguous->push_back({plan.account, plan.op, plan.amount, call.ids[index], plan.to_account});
  }
  // A transfer counts at its source's shard, which decides it first.
  outcomes->push_back({plan.op, code, shard_of_[plan.account]});
}

void Driver::Finish(Call* call, const grpc::Status& status) {
  // The throttle's "accepted": the server took the attempt on (whatever its answer), rather than
  // refusing it for overload or leaving it unanswered.
  const grpc::StatusCode code = status.error_code();
  if (options_.rate > 0 && options_.adaptive_in_flight) {
    in_flight_limit_.OnAnswer(code != grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  throttle_.CountAnswer(Clock::now(), code != grpc::StatusCode::RESOURCE_EXHAUSTED &&
                                          code != grpc::StatusCode::UNAVAILABLE &&
                                          code != grpc::StatusCode::DEADLINE_EXCEEDED);
  const std::vector<grpc::StatusCode> codes =
      call->batched ? ApplyOperationCodes(status, call->apply_response, call->pending.size())
                    : std::vector<grpc::StatusCode>{code};
  if (code == grpc::StatusCode::RESOURCE_EXHAUSTED && call->measured) {
    stats_.RecordShedAttempt(Clock::now() - call->attempt_start);
  }
  // A shed operation applied nothing, so retrying it under the same request_id keeps it one
  // logical operation; only its final code reaches the book and the report.
  const bool any_shed =
      std::find(codes.begin(), codes.end(), grpc::StatusCode::RESOURCE_EXHAUSTED) != codes.end();
  const std::optional<Clock::duration> retry_in =
      any_shed ? RetryDelay(call) : std::optional<Clock::duration>();
  const auto now = Clock::now();
  const auto latency = now - call->intended_start;  // From the first attempt's start.
  std::vector<OperationOutcome> outcomes;
  std::vector<AmbiguousCall> ambiguous;
  std::vector<size_t> retried;
  for (size_t j = 0; j < codes.size(); ++j) {
    if (retry_in.has_value() && codes[j] == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      retried.push_back(call->pending[j]);
    } else {
      FinishOperation(*call, call->pending[j], codes[j], &outcomes, &ambiguous);
    }
  }
  if (!ambiguous.empty()) {
    absl::MutexLock lock(&ambiguous_mu_);
    for (AmbiguousCall& one : ambiguous) ambiguous_.push_back(std::move(one));
  }
  if (call->setup) setup_done_.fetch_add(static_cast<int64_t>(outcomes.size()));
  stats_.RecordOperations(
      outcomes, call->measured,
      call->batched ? std::optional<std::chrono::nanoseconds>() : std::optional(latency));
  if (retry_in.has_value()) {
    // Set before the retry is scheduled: its Send reads it, maybe on another thread at once.
    call->pending = std::move(retried);
    retry_timer_.Schedule(now + *retry_in, [this, call] {
      call->attempt_start = Clock::now();
      Send(call);
    });
    return;
  }
  if (call->measured && status.ok()) stats_.RecordOkAttempt(now - call->attempt_start);
  stats_.RecordCall(code, latency, call->measured);
  if (call->measured && call->attempts > 1 && status.ok()) {
    stats_.CountRetry(Stats::RetryEvent::kOkAfterRetry);
  }
  EndCall(call);
}

void Driver::EndCall(Call* call) {
  std::unique_ptr<Workload> workload = std::move(call->workload);
  const bool setup = call->setup;
  delete call;
  // Issued before this one is let go of, so in_flight_ cannot touch 0 in between. It can reach 0
  // just below, though: the next call may already have finished, seeing the stop.
  bool measured = false;
  if (setup) {
    IssueSetup();
  } else if (workload != nullptr && ClaimCall(&measured)) {  // Closed loop: this slot's next.
    std::vector<PlannedCall> next = NextPlans(*workload);
    Issue(std::move(workload), std::move(next), Clock::now(), measured);
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
                                    options_.amount_max, std::random_device{}(), partners_);
}

void Driver::Run() {
  start_ = Clock::now();
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

int64_t Driver::Fund() {
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

bool Driver::IssueSetup() {
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

void Driver::StartClosedLoop() {
  for (int32_t i = 0; i < options_.concurrency; ++i) {
    bool measured = false;
    if (!ClaimCall(&measured)) break;
    std::unique_ptr<Workload> workload = NewWorkload();
    std::vector<PlannedCall> plans = NextPlans(*workload);
    Issue(std::move(workload), std::move(plans), Clock::now(), measured);
  }
}

void Driver::RunOpenLoop() {
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

void Driver::Supervise() {
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

std::string Driver::ProgressLine(Clock::time_point now, double interval_seconds) {
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

void Driver::Drain() {
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

// How verification ended, besides PASS or FAIL.
struct BalanceReads {
  std::vector<std::optional<int64_t>> balances;  // Index: account; nullopt: NOT_FOUND (0).
  int64_t wanted = 0;
  int64_t read = 0;
  std::string failure;  // Empty when every balance was read.
  bool server_gone = false;
};

// Why reading one balance stopped without it.
struct ReadStop {
  std::string why;
  bool server_gone = false;
};

// Why a read that `status` left unanswered should not be retried: ledgerd silent for longer
// than GoneAfter (per `watch`), or the reads past `give_up`; nullopt while it may be.
std::optional<ReadStop> StopWaiting(const Options& options, const ServerWatch& watch,
                                    const grpc::Status& status, absl::Time give_up) {
  if (watch.Gone(GoneAfter(options))) {
    return ReadStop{
        absl::StrCat("no answer from ledgerd at ", options.target, " for ",
                     absl::FormatDuration(GoneAfter(options)), " (", Describe(status), ")"),
        true};
  }
  if (absl::Now() >= give_up) {
    return ReadStop{absl::StrCat("reading the balances took longer than their bound (",
                                 absl::FormatDuration(kVerifyTimeLimit), " plus ",
                                 absl::FormatDuration(kVerifyTimePerAccount), " per account)")};
  }
  return std::nullopt;
}

// Reads `account`'s balance into `balance` (nullopt: NOT_FOUND, which means 0), retrying shed
// and unanswered reads with a back-off (a loaded server may shed them too). Returns why it
// stopped instead: a refusal, ledgerd gone (per `watch`), `give_up`, a signal, or `stop`.
std::optional<ReadStop> ReadOneBalance(Driver& driver, const Options& options, size_t account,
                                       absl::Time give_up, ServerWatch& watch,
                                       const std::atomic<bool>& stop,
                                       std::optional<int64_t>* balance) {
  v1::BalanceRequest request;
  request.set_account_id(driver.names()[account]);
  auto backoff = std::chrono::milliseconds(5);
  while (!stop) {
    v1::BalanceResponse response;
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::min(options.deadline, give_up - absl::Now())));
    const grpc::Status status = driver.stub().Balance(&context, request, &response);
    const grpc::StatusCode code = status.error_code();
    if (code == grpc::StatusCode::OK || code == grpc::StatusCode::NOT_FOUND) {
      if (code == grpc::StatusCode::OK) *balance = response.balance();
      watch.Answered();
      return std::nullopt;
    }
    if (ServerAnswered(code)) {
      watch.Answered();
    } else {
      watch.NotAnswered(status);
    }
    if (Interrupted()) return ReadStop{absl::StrCat("interrupted by ", SignalName(g_signal))};
    if (code != grpc::StatusCode::RESOURCE_EXHAUSTED && ServerAnswered(code)) {
      return ReadStop{absl::StrCat("reading ", request.account_id(), ": ", Describe(status))};
    }
    if (auto stop_waiting = StopWaiting(options, watch, status, give_up)) return stop_waiting;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
  return ReadStop{"another read stopped"};
}

// Reads the balances of `accounts` into `balances` (index: account) with Apply calls of Balance
// operations (--batch > 1), adding each one read to `read`: the reads a unary verification would
// make, a batch at a time. Retries the operations shed or left unanswered, and whole calls as
// ReadOneBalance does; stops for the same reasons.
std::optional<ReadStop> ReadBalanceBatch(Driver& driver, const Options& options,
                                         std::vector<size_t> accounts, absl::Time give_up,
                                         ServerWatch& watch, const std::atomic<bool>& stop,
                                         std::vector<std::optional<int64_t>>* balances,
                                         std::atomic<int64_t>* read) {
  auto backoff = std::chrono::milliseconds(5);
  while (!stop && !accounts.empty()) {
    v1::ApplyRequest request;
    for (size_t account : accounts) {
      request.add_operations()->mutable_balance()->set_account_id(driver.names()[account]);
    }
    v1::ApplyResponse response;
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::min(options.deadline, give_up - absl::Now())));
    const grpc::Status status = driver.stub().Apply(&context, request, &response);
    const grpc::StatusCode code = status.error_code();
    if (ServerAnswered(code)) {
      watch.Answered();
    } else {
      watch.NotAnswered(status);
    }
    if (status.ok()) {
      if (static_cast<size_t>(response.results_size()) != accounts.size()) {
        return ReadStop{absl::StrCat("reading balances: an Apply call of ", accounts.size(),
                                     " operations was answered with ", response.results_size(),
                                     " results")};
      }
      std::vector<size_t> again;  // Shed or unanswered: a read is safe to repeat.
      for (size_t j = 0; j < accounts.size(); ++j) {
        const v1::ApplyResult& result = response.results(static_cast<int>(j));
        const auto result_code = static_cast<grpc::StatusCode>(result.code());
        if (result_code == grpc::StatusCode::OK) (*balances)[accounts[j]] = result.balance();
        if (result_code == grpc::StatusCode::OK || result_code == grpc::StatusCode::NOT_FOUND) {
          read->fetch_add(1);
        } else if (result_code == grpc::StatusCode::RESOURCE_EXHAUSTED ||
                   !ServerAnswered(result_code)) {
          again.push_back(accounts[j]);
        } else {
          return ReadStop{absl::StrCat("reading ", driver.names()[accounts[j]], ": ",
                                       StatusCodeName(result.code()), ": ", result.message())};
        }
      }
      if (again.size() < accounts.size()) backoff = std::chrono::milliseconds(5);
      accounts = std::move(again);
      if (accounts.empty()) return std::nullopt;
    }
    if (Interrupted()) return ReadStop{absl::StrCat("interrupted by ", SignalName(g_signal))};
    if (!status.ok() && code != grpc::StatusCode::RESOURCE_EXHAUSTED && ServerAnswered(code)) {
      return ReadStop{absl::StrCat("reading balances: ", Describe(status))};
    }
    if (auto stop_waiting = StopWaiting(options, watch, status, give_up)) return stop_waiting;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
  return accounts.empty() ? std::nullopt : std::optional(ReadStop{"another read stopped"});
}

// Reads every touched account's balance, a few calls at a time (with --batch, a batch of reads
// per call). Stops early, with the reason in
// `failure`, when a read is refused for good, when ledgerd is gone (GoneAfter), when the overall
// bound passes, or on a signal.
BalanceReads ReadBalances(Driver& driver, const Options& options) {
  BalanceReads result;
  result.balances.resize(static_cast<size_t>(options.accounts));
  const std::vector<size_t> touched = driver.book().TouchedAccounts();
  result.wanted = static_cast<int64_t>(touched.size());
  const absl::Duration time_limit =
      kVerifyTimeLimit + kVerifyTimePerAccount * static_cast<double>(touched.size());
  const absl::Time give_up = absl::Now() + time_limit;
  std::atomic<size_t> next{0};
  std::atomic<int64_t> read{0};
  std::atomic<bool> stop{false};
  std::mutex failure_mu;
  ServerWatch watch;
  ProgressTicker ticker(ShowProgress(options), [&](double seconds) {
    return absl::StrFormat("[verify %4.0fs] %d of %d balances read%s", seconds, read.load(),
                           touched.size(), watch.Silence());
  });
  constexpr int kReaders = 4;
  std::vector<std::thread> readers;
  readers.reserve(kReaders);
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&] {
      const size_t per_call = static_cast<size_t>(options.batch);
      for (size_t i = next.fetch_add(per_call); i < touched.size() && !stop;
           i = next.fetch_add(per_call)) {
        std::optional<ReadStop> stopped;
        if (per_call == 1) {
          stopped = ReadOneBalance(driver, options, touched[i], give_up, watch, stop,
                                   &result.balances[touched[i]]);
          if (!stopped.has_value()) read.fetch_add(1);
        } else {
          std::vector<size_t> accounts(
              touched.begin() + static_cast<ptrdiff_t>(i),
              touched.begin() + static_cast<ptrdiff_t>(std::min(i + per_call, touched.size())));
          stopped = ReadBalanceBatch(driver, options, std::move(accounts), give_up, watch, stop,
                                     &result.balances, &read);
        }
        if (!stopped.has_value()) continue;
        std::lock_guard<std::mutex> lock(failure_mu);
        if (!stop.exchange(true)) {  // The first reason is the one reported.
          result.failure = std::move(stopped->why);
          result.server_gone = stopped->server_gone;
        }
        return;
      }
    });
  }
  for (std::thread& reader : readers) reader.join();
  result.read = read.load();
  return result;
}

struct Resolution {
  int64_t calls = 0;        // Ambiguous calls at the end of the run, transfers included.
  int64_t applied = 0;      // Settled: the server applied them (then or now).
  int64_t not_applied = 0;  // Settled: the server rejected them (then or now).
  int64_t unresolved = 0;   // Still unknown when --resolve_for ran out, or settling stopped.
  // The ambiguous transfers among them, and how each was settled.
  int64_t transfers = 0;
  int64_t transfers_committed = 0;
  int64_t transfers_refused = 0;
  int64_t transfers_unresolved = 0;
  // Transfers GetTransfer could not settle because the server keeps no transfer records
  // (--durability=none answers FAILED_PRECONDITION); a same-id retry is not safe there.
  int64_t transfers_without_records = 0;
  std::string stopped;  // Why settling stopped before --resolve_for ran out; empty if not.
  bool server_gone = false;
};

// How long settling waits for one transfer that GetTransfer keeps answering PENDING: the server
// finishes a pending transfer on its own, within a mailbox round trip or two unless it is
// restarting; one that stays pending longer is left unsettled (its amount widens the check).
constexpr absl::Duration kPendingWaitMax = absl::Seconds(10);

// How an ambiguous transfer was settled.
enum class TransferSettlement { kCommitted, kRefused, kUnsettled, kNoRecords };

// Codes with which a Transfer (or a same-id retry of it) is refused for good: nothing applied.
bool TransferRefused(grpc::StatusCode code) {
  return code == grpc::StatusCode::FAILED_PRECONDITION || code == grpc::StatusCode::NOT_FOUND ||
         code == grpc::StatusCode::OUT_OF_RANGE || code == grpc::StatusCode::INVALID_ARGUMENT;
}

// Asks GetTransfer what became of one ambiguous transfer: COMMITTED or REFUSED settle it,
// PENDING is asked again (for up to kPendingWaitMax). NOT_FOUND means the server holds no
// durable record: the call was skipped, or is still somewhere between the client and its shard;
// a retry with the same transfer_id settles either case exactly (it applies the transfer now, or
// replays the record the first call made), so it is sent. Returns kNoRecords when the server
// keeps no transfer records (FAILED_PRECONDITION: --durability=none, where a retry is not
// deduplicated and could apply the transfer twice). Until `give_up` or `stop`.
TransferSettlement SettleTransfer(Driver& driver, const Options& options,
                                  const Driver::AmbiguousCall& call, absl::Time give_up,
                                  ServerWatch& watch, const std::atomic<bool>& stop) {
  v1::TransferRequest transfer;
  transfer.set_transfer_id(call.request_id);
  transfer.set_from_account_id(driver.names()[call.account]);
  transfer.set_to_account_id(driver.names()[call.to_account]);
  transfer.set_amount(call.amount);
  v1::GetTransferRequest query;
  query.set_transfer_id(call.request_id);
  std::optional<absl::Time> pending_until;  // Set when first seen PENDING.
  auto backoff = std::chrono::milliseconds(10);
  const auto settle = [&](bool applied) {
    driver.book().ResolveTransfer(call.account, call.to_account, call.amount, applied);
    return applied ? TransferSettlement::kCommitted : TransferSettlement::kRefused;
  };
  while (!stop) {
    const absl::Duration left = give_up - absl::Now();
    if (left <= absl::ZeroDuration()) return TransferSettlement::kUnsettled;
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::min(options.deadline, left)));
    context.set_wait_for_ready(true);  // Through a restart, within --resolve_for.
    v1::GetTransferResponse state;
    grpc::Status status = driver.stub().GetTransfer(&context, query, &state);
    if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
      grpc::ClientContext retry_context;
      retry_context.set_deadline(DeadlineIn(std::min(options.deadline, left)));
      retry_context.set_wait_for_ready(true);
      v1::TransferResponse response;
      status = driver.stub().Transfer(&retry_context, transfer, &response);
      if (status.ok()) return settle(true);
      if (TransferRefused(status.error_code())) return settle(false);
    }
    const grpc::StatusCode code = status.error_code();
    // ClassifyAnswer counts a retry's "still pending" as the server's answer, whatever its code.
    if (ClassifyAnswer(code, status.error_message()).server_answered) {
      watch.Answered();
    } else {
      watch.NotAnswered(status);
    }
    if (code == grpc::StatusCode::OK) {
      // Its own id, so its own fields; anything else would be a bug worth seeing unsettled.
      if (state.from_account_id() != transfer.from_account_id() ||
          state.to_account_id() != transfer.to_account_id() || state.amount() != call.amount) {
        return TransferSettlement::kUnsettled;
      }
      if (state.state() == v1::TRANSFER_STATE_COMMITTED) return settle(true);
      if (state.state() == v1::TRANSFER_STATE_REFUSED) return settle(false);
      if (!pending_until.has_value()) pending_until = absl::Now() + kPendingWaitMax;
      if (absl::Now() >= *pending_until) return TransferSettlement::kUnsettled;
    } else if (code == grpc::StatusCode::FAILED_PRECONDITION) {
      return TransferSettlement::kNoRecords;
    } else if (code != grpc::StatusCode::RESOURCE_EXHAUSTED &&
               code != grpc::StatusCode::UNAVAILABLE && ServerAnswered(code)) {
      return TransferSettlement::kUnsettled;  // ALREADY_EXISTS, INTERNAL, ...: cannot settle.
    }
    // PENDING, shed, timed out, still pending on a retry, or the server is (re)starting.
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
  return TransferSettlement::kUnsettled;
}

// Every ambiguous call counted, none settled yet.
Resolution UnsettledResolution(const std::vector<Driver::AmbiguousCall>& calls) {
  Resolution result;
  result.calls = static_cast<int64_t>(calls.size());
  result.transfers = std::count_if(calls.begin(), calls.end(),
                                   [](const auto& call) { return call.op == CallKind::kTransfer; });
  result.unresolved = result.calls;
  result.transfers_unresolved = result.transfers;
  return result;
}

// Retries one ambiguous call with its request_id until a definite answer, `give_up`, or `stop`.
// True when settled (and recorded in the book).
bool SettleOne(Driver& driver, const Options& options, const Driver::AmbiguousCall& call,
               absl::Time give_up, ServerWatch& watch, const std::atomic<bool>& stop,
               bool* was_applied) {
  auto backoff = std::chrono::milliseconds(10);
  while (!stop) {
    const absl::Duration left = give_up - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    grpc::ClientContext context;
    // Through a restart the answer is worth waiting for, but never past --resolve_for.
    context.set_deadline(DeadlineIn(std::min(options.deadline, left)));
    context.set_wait_for_ready(true);
    grpc::Status status;
    if (call.op == CallKind::kDeposit) {
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
    if (ServerAnswered(code)) {
      watch.Answered();
    } else {
      watch.NotAnswered(status);
    }
    if (code == grpc::StatusCode::OK || code == grpc::StatusCode::FAILED_PRECONDITION ||
        code == grpc::StatusCode::NOT_FOUND || code == grpc::StatusCode::OUT_OF_RANGE) {
      *was_applied = code == grpc::StatusCode::OK;
      driver.book().Resolve(call.account, call.op, call.amount, *was_applied);
      return true;
    }
    // Shed, timed out, or the server is (re)starting: the answer is still to come. Any other
    // code (ALREADY_EXISTS would mean a reused request_id) cannot settle it.
    if (code != grpc::StatusCode::RESOURCE_EXHAUSTED && ServerAnswered(code)) return false;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
  return false;
}

// Retries every ambiguous call with its own request_id until the server gives a definite
// answer. The server applies a request_id at most once and replays the recorded outcome, so OK
// means "applied exactly once" and a rule rejection means "never applied", whichever attempt got
// there first. Ambiguous transfers are settled by SettleTransfer (GetTransfer, or a same-id
// retry). Bounded by --resolve_for; stops early when ledgerd is gone or on a signal.
Resolution ResolveAmbiguous(Driver& driver, const Options& options) {
  const std::vector<Driver::AmbiguousCall> calls = driver.ambiguous_calls();
  Resolution result = UnsettledResolution(calls);
  if (calls.empty() || options.resolve_for <= absl::ZeroDuration()) return result;
  const absl::Time give_up = absl::Now() + options.resolve_for;
  std::atomic<size_t> next{0};
  std::atomic<int64_t> applied{0}, not_applied{0}, unresolved{0};
  std::atomic<int64_t> committed{0}, refused{0}, transfers_unresolved{0}, without_records{0};
  std::atomic<bool> stop{false};
  ServerWatch watch;
  ProgressTicker ticker(ShowProgress(options), [&](double seconds) {
    const int64_t settled = applied.load() + not_applied.load();
    return absl::StrFormat(
        "[settle %4.0fs of %s] %d of %d ambiguous calls settled (%d applied, %d not applied)%s",
        seconds, absl::FormatDuration(options.resolve_for), settled, calls.size(), applied.load(),
        not_applied.load(), watch.Silence());
  });
  // Watches for a signal or a server that is gone, and stops the resolvers.
  std::atomic<bool> resolvers_done{false};
  std::thread watcher([&] {
    while (!resolvers_done) {
      if (Interrupted()) {
        result.stopped = absl::StrCat("interrupted by ", SignalName(g_signal.load()));
      } else if (watch.Gone(GoneAfter(options))) {
        result.stopped = absl::StrCat("no answer from ledgerd at ", options.target, " for ",
                                      absl::FormatDuration(GoneAfter(options)), " (",
                                      Describe(driver.Probe()), ")");
        result.server_gone = true;
      }
      if (!result.stopped.empty()) {
        stop = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  constexpr int kResolvers = 16;
  std::vector<std::thread> resolvers;
  resolvers.reserve(kResolvers);
  for (int r = 0; r < kResolvers; ++r) {
    resolvers.emplace_back([&] {
      for (size_t i = next.fetch_add(1); i < calls.size(); i = next.fetch_add(1)) {
        if (calls[i].op == CallKind::kTransfer) {
          switch (SettleTransfer(driver, options, calls[i], give_up, watch, stop)) {
            case TransferSettlement::kCommitted:
              committed.fetch_add(1);
              applied.fetch_add(1);
              break;
            case TransferSettlement::kRefused:
              refused.fetch_add(1);
              not_applied.fetch_add(1);
              break;
            case TransferSettlement::kNoRecords:
              without_records.fetch_add(1);
              [[fallthrough]];
            case TransferSettlement::kUnsettled:
              transfers_unresolved.fetch_add(1);
              unresolved.fetch_add(1);
              break;
          }
          continue;
        }
        bool was_applied = false;
        if (SettleOne(driver, options, calls[i], give_up, watch, stop, &was_applied)) {
          (was_applied ? applied : not_applied).fetch_add(1);
        } else {
          unresolved.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& resolver : resolvers) resolver.join();
  resolvers_done = true;
  watcher.join();
  result.applied = applied.load();
  result.not_applied = not_applied.load();
  result.unresolved = unresolved.load();
  result.transfers_committed = committed.load();
  result.transfers_refused = refused.load();
  result.transfers_unresolved = transfers_unresolved.load();
  result.transfers_without_records = without_records.load();
  return result;
}

// Rounded to a tenth, as the report has always printed them: finer would only be noise.
double Tenths(double value) { return std::round(value * 10) / 10; }

void FillLatency(const LatencyHistogram& histogram, loadtest::Latency* latency) {
  auto us = [&](double q) {
    return Tenths(static_cast<double>(histogram.Percentile(q).count()) / 1e3);
  };
  latency->set_count(static_cast<int64_t>(histogram.count()));
  latency->set_p50(us(0.5));
  latency->set_p90(us(0.9));
  latency->set_p99(us(0.99));
  latency->set_p999(us(0.999));
  latency->set_max(Tenths(static_cast<double>(histogram.max().count()) / 1e3));
}

// Each non-zero count by its code's name.
void FillCodes(const std::array<uint64_t, kStatusCodeCount>& counts,
               google::protobuf::Map<std::string, int64_t>* codes) {
  for (size_t code = 0; code < kStatusCodeCount; ++code) {
    if (counts[code] > 0) (*codes)[kStatusCodeNames[code]] = static_cast<int64_t>(counts[code]);
  }
}

std::string LatencyLine(const char* label, const LatencyHistogram& histogram) {
  auto ms = [&](double q) { return static_cast<double>(histogram.Percentile(q).count()) / 1e6; };
  return absl::StrFormat(
      "%-20s p50 %8.3f  p90 %8.3f  p99 %8.3f  p99.9 %8.3f  max %8.3f ms  (%d calls)\n", label,
      ms(0.5), ms(0.9), ms(0.99), ms(0.999), static_cast<double>(histogram.max().count()) / 1e6,
      histogram.count());
}

// The operations with measured calls: a per-operation report only when there are two or more.
std::vector<CallKind> OpsCalled(const Stats::Snapshot& s) {
  std::vector<CallKind> called;
  for (CallKind op : kCallKinds) {
    if (s.op(op).calls() > 0) called.push_back(op);
  }
  return called;
}

// The measured transfers refused for good, by code (shed ones included: they applied nothing
// either).
std::array<uint64_t, kStatusCodeCount> TransferRefusals(const Stats::Snapshot& s) {
  std::array<uint64_t, kStatusCodeCount> refused{};
  const Stats::OpStats& transfers = s.op(CallKind::kTransfer);
  for (size_t code = 1; code < kStatusCodeCount; ++code) {
    if (EffectOf(CallKind::kTransfer, static_cast<grpc::StatusCode>(code)) == Effect::kNotApplied) {
      refused[code] = transfers.codes[code];
    }
  }
  return refused;
}

// "FAILED_PRECONDITION=3 NOT_FOUND=1": the non-zero counts by code, in code order.
std::string CodeCounts(const std::array<uint64_t, kStatusCodeCount>& counts) {
  std::string out;
  for (size_t code = 0; code < kStatusCodeCount; ++code) {
    if (counts[code] == 0) continue;
    absl::StrAppend(&out, out.empty() ? "" : " ", kStatusCodeNames[code], "=", counts[code]);
  }
  return out;
}

// What the run found, for the text and JSON reports and the exit code.
struct RunOutcome {
  Stats::Snapshot stats;
  double seconds = 0;
  double client_cpu_seconds = 0;     // User + system CPU of ledger-loadtest over `seconds`.
  std::string interrupted;           // "SIGINT", "SIGTERM", or empty.
  bool measurement_complete = true;  // False when a signal cut the measurement short.
  // PASS, FAIL, SKIPPED (--verify=false or a signal) or INCOMPLETE (ledgerd gone, or the reads
  // were refused or out of time).
  std::string verification = "SKIPPED";
  std::string verification_note;  // Why SKIPPED or INCOMPLETE.
  VerificationResult checked;
  Resolution resolution;
  bool server_gone = false;
};

// Settles, reads and checks, unless a signal or a lost server says to stop.
void Verify(Driver& driver, const Options& options, RunOutcome& outcome) {
  if (!options.verify) {
    outcome.verification_note = "--verify=false";
    return;
  }
  outcome.resolution = UnsettledResolution(driver.ambiguous_calls());
  if (Interrupted()) {
    outcome.verification_note = "interrupted; the report covers what was measured";
    return;
  }
  outcome.resolution = ResolveAmbiguous(driver, options);
  if (!outcome.resolution.stopped.empty()) {
    outcome.verification = Interrupted() ? "SKIPPED" : "INCOMPLETE";
    outcome.verification_note =
        absl::StrCat("settling ambiguous calls stopped: ", outcome.resolution.stopped);
    outcome.server_gone = outcome.resolution.server_gone;
    return;
  }
  BalanceReads reads = ReadBalances(driver, options);
  if (!reads.failure.empty()) {
    outcome.verification = Interrupted() ? "SKIPPED" : "INCOMPLETE";
    outcome.verification_note = absl::StrCat("read ", reads.read, " of ", reads.wanted,
                                             " balances, then stopped: ", reads.failure);
    outcome.server_gone = reads.server_gone;
    return;
  }
  outcome.checked = driver.book().Verify(reads.balances, driver.names());
  outcome.verification = outcome.checked.pass ? "PASS" : "FAIL";
}

std::string TextReport(const Options& options, const RunOutcome& o) {
  const Stats::Snapshot& s = o.stats;
  const double seconds = o.seconds > 0 ? o.seconds : 1;
  std::ostringstream report;
  if (!o.interrupted.empty()) {
    report << "INTERRUPTED by " << o.interrupted << ": partial report, "
           << (o.measurement_complete ? "the measurement was complete"
               : o.seconds > 0        ? "measured until the signal"
                                      : "nothing measured (still warming up)")
           << "\n";
  }
  const uint64_t calls = s.attempted + s.not_sent + s.not_sent_late + s.not_sent_throttled;
  report << absl::StrFormat("measured %.1f s: %d calls, %.0f OK/s, %.0f attempted/s, %.0f sent/s",
                            o.seconds, calls, static_cast<double>(s.codes[0]) / seconds,
                            static_cast<double>(calls) / seconds,
                            static_cast<double>(s.attempted) / seconds);
  if (options.rate > 0) report << absl::StrFormat(" (offered %.0f/s)", options.rate);
  report << "\n";
  const bool batched = options.batch > 1;
  // Operations are what the batches carry; unary calls are operations already.
  const char* const unit = batched ? "operations" : "calls";
  if (batched) {
    report << absl::StrFormat(
        "batches of %d: %d operations, %.0f OK/s beside %.0f OK calls/s; by result: %s\n",
        options.batch, s.operations(), static_cast<double>(s.operation_codes[0]) / seconds,
        static_cast<double>(s.codes[0]) / seconds, CodeCounts(s.operation_codes));
  }
  report << LatencyLine("latency OK", s.ok) << LatencyLine("latency SHED", s.shed);
  const std::vector<CallKind> called = OpsCalled(s);
  if (called.size() > 1 && !batched) {  // An operation of a batch has no latency of its own.
    for (CallKind op : called) {
      report << LatencyLine(absl::StrCat("latency OK ", CallKindName(op)).c_str(), s.op(op).ok);
    }
  }
  // Only when some shed call was retried: otherwise it is the line above.
  if (s.shed_attempts.count() != s.shed.count()) {
    report << LatencyLine("latency SHED attempt", s.shed_attempts);
  }
  // Only when some OK call was retried: otherwise it is "latency OK".
  if (s.retry(Stats::RetryEvent::kOkAfterRetry) > 0) {
    report << LatencyLine("latency OK attempt", s.ok_attempts);
  }
  report << "codes:";
  for (size_t code = 0; code < kStatusCodeCount; ++code) {
    if (s.codes[code] > 0) report << " " << kStatusCodeNames[code] << "=" << s.codes[code];
  }
  if (s.not_sent > 0) report << " NOT_SENT(in-flight cap)=" << s.not_sent;
  if (s.not_sent_late > 0) report << " NOT_SENT(late)=" << s.not_sent_late;
  if (s.not_sent_throttled > 0) report << " NOT_SENT(throttled)=" << s.not_sent_throttled;
  report << "\n";
  if (called.size() > 1) {
    report << "operations:";
    for (CallKind op : called) {
      report << absl::StrFormat(" %s %d %s (%d OK)", CallKindName(op), s.op(op).calls(), unit,
                                s.op(op).codes[0]);
    }
    report << "\n";
  }
  using RetryEvent = Stats::RetryEvent;
  if (std::any_of(s.retries.begin(), s.retries.end(), [](uint64_t n) { return n > 0; })) {
    report << absl::StrFormat(
        "retries after pushback: %d sent (%d calls OK after retrying); denied: %d by the "
        "budget, %d by the deadline, %d by --max_retries\n",
        s.retry(RetryEvent::kSent), s.retry(RetryEvent::kOkAfterRetry),
        s.retry(RetryEvent::kDeniedByBudget), s.retry(RetryEvent::kDeniedByDeadline),
        s.retry(RetryEvent::kDeniedByMaxRetries));
  }
  if (o.seconds > 0) {
    report << absl::StrFormat("client CPU: %.2f s over %.1f s (%.0f%% of one core)\n",
                              o.client_cpu_seconds, o.seconds,
                              100 * o.client_cpu_seconds / o.seconds);
  }
  for (size_t shard = 0; shard < s.shard_calls.size(); ++shard) {
    report << absl::StrFormat("shard %d: %d %s, %d shed\n", shard, s.shard_calls[shard], unit,
                              s.shard_sheds[shard]);
  }
  const Resolution& r = o.resolution;
  if (options.verify && r.calls > 0) {
    report << absl::StrFormat(
        "ambiguous %s: %d; settled by retrying with their request_id%s: %d applied, %d not "
        "applied; unresolved: %d\n",
        unit, r.calls, r.transfers > 0 ? " (transfers: GetTransfer, or a same-id retry)" : "",
        r.applied, r.not_applied, r.unresolved);
  }
  if (s.op(CallKind::kTransfer).calls() > 0 || r.transfers > 0) {
    const std::string refusals = CodeCounts(TransferRefusals(s));
    report << absl::StrFormat(
        "transfers: %d OK, refused: %s; ambiguous %d (settled by GetTransfer or a same-id retry: "
        "%d committed, %d refused; unresolved %d)\n",
        s.op(CallKind::kTransfer).codes[0], refusals.empty() ? "none" : refusals, r.transfers,
        r.transfers_committed, r.transfers_refused, r.transfers_unresolved);
  }
  if (r.transfers_without_records > 0) {
    report << absl::StrFormat(
        "  %d ambiguous transfers left unsettled: the server keeps no transfer records "
        "(GetTransfer: FAILED_PRECONDITION, as with --durability=none), and a retry there is not "
        "deduplicated; their amounts widen the check\n",
        r.transfers_without_records);
  }
  report << "verification: " << o.verification;
  if (o.verification == "PASS" || o.verification == "FAIL") {
    report << absl::StrFormat(
        " (%d accounts; balances sum %d, acknowledged net %d, ambiguous +%d/-%d%s)",
        o.checked.accounts_checked, o.checked.balance_sum, o.checked.acknowledged_net,
        o.checked.ambiguous_deposits, o.checked.ambiguous_withdrawals,
        o.checked.ambiguous_transfers > 0
            ? absl::StrCat(", transfers in doubt ", o.checked.ambiguous_transfers)
            : "");
  } else {
    report << " (" << o.verification_note << ")";
  }
  report << "\n";
  for (const std::string& mismatch : o.checked.mismatches) report << "  " << mismatch << "\n";
  return report.str();
}

loadtest::Report ReportMessage(const Options& options, const RunOutcome& o) {
  const Stats::Snapshot& s = o.stats;
  const double seconds = o.seconds > 0 ? o.seconds : 1;
  const uint64_t calls = s.attempted + s.not_sent + s.not_sent_late + s.not_sent_throttled;
  const auto per_second = [&](uint64_t n) { return Tenths(static_cast<double>(n) / seconds); };
  loadtest::Report report;
  report.set_run_id(options.run_id);
  report.set_measured_seconds(std::round(o.seconds * 1000) / 1000);
  report.set_measured_calls(static_cast<int64_t>(calls));
  report.set_ok_per_second(per_second(s.codes[0]));
  report.set_attempted_per_second(per_second(calls));
  report.set_offered_per_second(Tenths(options.rate));
  report.set_sent_per_second(per_second(s.attempted));
  report.set_client_cpu_seconds(std::round(o.client_cpu_seconds * 1000) / 1000);
  report.set_interrupted(o.interrupted);
  FillCodes(s.codes, report.mutable_codes());
  report.set_not_sent(static_cast<int64_t>(s.not_sent));
  report.set_not_sent_late(static_cast<int64_t>(s.not_sent_late));
  report.set_not_sent_throttled(static_cast<int64_t>(s.not_sent_throttled));
  using RetryEvent = Stats::RetryEvent;
  loadtest::Retries* retries = report.mutable_retries();
  retries->set_sent(static_cast<int64_t>(s.retry(RetryEvent::kSent)));
  retries->set_denied_by_budget(static_cast<int64_t>(s.retry(RetryEvent::kDeniedByBudget)));
  retries->set_denied_by_deadline(static_cast<int64_t>(s.retry(RetryEvent::kDeniedByDeadline)));
  retries->set_denied_by_max_retries(
      static_cast<int64_t>(s.retry(RetryEvent::kDeniedByMaxRetries)));
  retries->set_ok_after_retry(static_cast<int64_t>(s.retry(RetryEvent::kOkAfterRetry)));
  loadtest::CallLatencies* latency = report.mutable_latency_us();
  FillLatency(s.ok, latency->mutable_ok());
  FillLatency(s.shed, latency->mutable_resource_exhausted());
  FillLatency(s.shed_attempts, latency->mutable_resource_exhausted_attempt());
  FillLatency(s.ok_attempts, latency->mutable_ok_attempt());
  for (size_t shard = 0; shard < s.shard_calls.size(); ++shard) {
    loadtest::ShardCount* count = report.add_shards();
    count->set_calls(static_cast<int64_t>(s.shard_calls[shard]));
    count->set_shed(static_cast<int64_t>(s.shard_sheds[shard]));
  }
  const Resolution& r = o.resolution;
  loadtest::Ambiguous* ambiguous = report.mutable_ambiguous();
  ambiguous->set_calls(r.calls);
  ambiguous->set_applied(r.applied);
  ambiguous->set_not_applied(r.not_applied);
  ambiguous->set_unresolved(r.unresolved);
  for (CallKind op : OpsCalled(s)) {
    loadtest::OperationKind& kind = (*report.mutable_ops())[std::string(CallKindName(op))];
    kind.set_calls(static_cast<int64_t>(s.op(op).calls()));
    kind.set_ok(static_cast<int64_t>(s.op(op).codes[0]));
    FillLatency(s.op(op).ok, kind.mutable_latency_us());
  }
  // ok and refused_by_code: measured calls, as "codes"; ambiguous and its settlement: the whole
  // run, warm-up included, as "ambiguous" (every call is verified).
  loadtest::Transfers* transfers = report.mutable_transfers();
  transfers->set_ok(static_cast<int64_t>(s.op(CallKind::kTransfer).codes[0]));
  FillCodes(TransferRefusals(s), transfers->mutable_refused_by_code());
  transfers->set_ambiguous(r.transfers);
  transfers->set_settled_committed(r.transfers_committed);
  transfers->set_settled_refused(r.transfers_refused);
  transfers->set_unresolved(r.transfers_unresolved);
  transfers->set_unresolved_without_records(r.transfers_without_records);
  transfers->set_in_doubt_amount(o.checked.ambiguous_transfers);
  report.set_verification(o.verification);
  report.set_batch(options.batch);
  report.set_calls_per_second(per_second(s.codes[0]));
  report.set_ops_per_second(per_second(s.operation_codes[0]));
  report.mutable_operations()->set_measured(static_cast<int64_t>(s.operations()));
  FillCodes(s.operation_codes, report.mutable_operations()->mutable_codes());
  return report;
}

// One line of protobuf's JSON: proto field names, every field printed (zero counts included, so
// that a reader finds each key), int64 as strings.
std::string JsonReport(const Options& options, const RunOutcome& o) {
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  print.always_print_primitive_fields = true;
  std::string json;
  const auto printed =
      google::protobuf::util::MessageToJsonString(ReportMessage(options, o), &json, print);
  LEDGER_CHECK(printed.ok());  // Only a message with invalid UTF-8 strings could fail.
  return json + "\n";
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
  std::optional<TransferPartners> partners;
  if (options->mix.transfer > 0) {
    absl::StatusOr<TransferPartners> made = NewTransferPartners(*options);
    if (!made.ok()) {
      std::cerr << "ledger-loadtest: " << made.status().message() << "\n";
      return 2;
    }
    partners = *std::move(made);
  }
  InstallSignalHandlers();
  Driver driver(*options, &*accounts, partners.has_value() ? &*partners : nullptr);
  if (const absl::Status connected = driver.Connect(kConnectTimeout); !connected.ok()) {
    std::cerr << "ledger-loadtest: " << connected.message() << "; nothing was sent\n";
    return Interrupted() ? 128 + g_signal.load() : kExitUnavailable;
  }
  std::cerr << "ledger-loadtest: run " << options->run_id << " against " << options->target
            << (options->rate > 0
                    ? absl::StrCat(", open loop at ", options->rate, " calls/s")
                    : absl::StrCat(", closed loop, ", options->concurrency, " in flight"))
            << (options->batch > 1 ? absl::StrCat(", ", options->batch, " operations per call")
                                   : "")
            << "\n";
  driver.Fund();
  driver.Run();

  RunOutcome outcome;
  outcome.stats = driver.stats().Take();
  outcome.seconds = driver.measured_seconds();
  outcome.client_cpu_seconds = driver.client_cpu_seconds();
  outcome.measurement_complete = driver.stop_reason() != StopReason::kInterrupted;
  Verify(driver, *options, outcome);
  if (Interrupted()) outcome.interrupted = SignalName(g_signal.load());
  const std::string json = JsonReport(*options, outcome);
  std::cout << (options->json ? json : TextReport(*options, outcome)) << std::flush;
  if (!options->json_file.empty() && !(std::ofstream(options->json_file) << json)) {
    std::cerr << "ledger-loadtest: cannot write " << options->json_file << "\n";
    return 1;
  }
  if (outcome.verification == "FAIL") return 1;  // Money lost or invented: above all else.
  if (Interrupted()) return 128 + g_signal.load();
  if (outcome.verification == "INCOMPLETE") {
    std::cerr << "ledger-loadtest: verification incomplete: " << outcome.verification_note << "\n";
    return outcome.server_gone ? kExitUnavailable : 1;
  }
  return 0;
}

}  // namespace
}  // namespace ledger

int main(int argc, char** argv) {
  const ledger::cli::ProgramSpec program{
      "ledger-loadtest",
      __FILE__,
      "drives ledgerd with Deposit/Withdraw/Balance/Transfer calls (or Apply calls of many\n"
      "operations, --batch), reports throughput and latency, and verifies that every balance\n"
      "matches the operations made and that transfers conserve money (exit 0 on PASS, 1 on\n"
      "FAIL, 2 on bad flags, 5 when ledgerd cannot be reached or is lost before verification\n"
      "ends, 130 on SIGINT, 143 on SIGTERM).\n"
      "\n"
      "Usage:\n"
      "  ledger-loadtest [--target=HOST:PORT] [--duration=10s | --requests=N] [--json] ...",
      {ledger::kTlsFlagsFile}};
  const std::vector<std::string> stray = ledger::cli::ParseCommandLineOrExit(argc, argv, program);
  if (!stray.empty()) {
    ledger::cli::ExitUsage(program, absl::StrCat("unexpected argument \"", stray[0],
                                                 "\"; ledger-loadtest takes only flags"));
  }
  return ledger::Main();
}
