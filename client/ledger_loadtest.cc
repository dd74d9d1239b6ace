// ledger-loadtest: drives ledgerd hard, reports what a capacity planner needs, and checks at the
// end that no money was lost or invented.
//
// This file holds the flags and main only: the flags become a LoadtestOptions here and nowhere
// else; the run itself is loadtest_lib (loadtest_driver.h, loadtest_verify.h, loadtest_reports.h).
#include <cstdint>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cli/command_line.h"
#include "client/exit_codes.h"
#include "client/interrupt_signals.h"
#include "client/loadtest_driver.h"
#include "client/loadtest_options.h"
#include "client/loadtest_outcome.h"
#include "client/loadtest_reports.h"
#include "client/loadtest_verify.h"
#include "client/loadtest_watch.h"
#include "client/tls_flags.h"
#include "client/workload.h"

ABSL_FLAG(std::string, target, "localhost:50051",
          "HOST:PORT of ledgerd; :PORT is localhost, [::1]:PORT an IPv6 address. A cluster: "
          "HOST:PORT,HOST:PORT,... names its members (at most 16). Only its leader serves: a "
          "call refused NOT_LEADER (nothing applied) is sent again, the same request with the "
          "same ids, to the leader the refusal names, else to the next address after the "
          "refusal's delay, at most 10 hops per call within its --deadline; every call then "
          "goes to that leader, and a lost connection moves them to the next address. Refusals "
          "count as NOT_LEADER in the report, never as errors; the settling and the "
          "verification read from the leader too");
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
ABSL_FLAG(bool, watch, false,
          "also follow ledger.v1.Ledger/Watch through the run (from the newest position when it "
          "starts; opened again from the last position after a restart of ledgerd or a new "
          "leader), rebuild every balance from the operations it streams, and check them against "
          "the balances verification reads: an operation repeated, skipped or wrong is a FAIL "
          "(needs --verify and a durable server)");
ABSL_FLAG(absl::Duration, resolve_for, absl::Seconds(60),
          "at the end, retry each call whose outcome is unknown (DEADLINE_EXCEEDED, CANCELLED, "
          "UNAVAILABLE) with its request_id for up to this long, so that verification is exact; "
          "0 disables. Needs a server that deduplicates request_ids (--durability sync or async)");
ABSL_FLAG(bool, json, false, "print the report as one JSON object on stdout instead of text");
ABSL_FLAG(std::string, json_file, "", "also write the report as JSON to this file");
ABSL_FLAG(bool, progress, false, "progress once a second on stderr even when it is not a terminal");

namespace ledger {
namespace {

// How long the start may take to reach ledgerd before the run is refused.
constexpr absl::Duration kConnectTimeout = absl::Seconds(3);

// The flags, validated (ValidateOptions).
absl::StatusOr<LoadtestOptions> OptionsFromFlags() {
  LoadtestOptions o;
  o.target = absl::GetFlag(FLAGS_target);
  o.concurrency = absl::GetFlag(FLAGS_concurrency);
  o.rate = absl::GetFlag(FLAGS_rate);
  o.max_in_flight = absl::GetFlag(FLAGS_max_in_flight);
  o.duration = absl::GetFlag(FLAGS_duration);
  o.requests = absl::GetFlag(FLAGS_requests);
  o.warmup = absl::GetFlag(FLAGS_warmup);
  o.accounts = absl::GetFlag(FLAGS_accounts);
  o.distribution = absl::GetFlag(FLAGS_distribution);
  o.amount_min = absl::GetFlag(FLAGS_amount_min);
  o.amount_max = absl::GetFlag(FLAGS_amount_max);
  o.channels = absl::GetFlag(FLAGS_channels);
  o.deadline = absl::GetFlag(FLAGS_deadline);
  o.wait_for_ready = absl::GetFlag(FLAGS_wait_for_ready);
  o.run_id = absl::GetFlag(FLAGS_run_id);
  o.shards = absl::GetFlag(FLAGS_server_shards);
  o.verify = absl::GetFlag(FLAGS_verify);
  o.watch = absl::GetFlag(FLAGS_watch);
  o.resolve_for = absl::GetFlag(FLAGS_resolve_for);
  o.json = absl::GetFlag(FLAGS_json);
  o.progress = absl::GetFlag(FLAGS_progress);
  o.json_file = absl::GetFlag(FLAGS_json_file);
  o.max_send_delay = absl::GetFlag(FLAGS_max_send_delay);
  o.max_retries = absl::GetFlag(FLAGS_max_retries);
  o.retry_budget = absl::GetFlag(FLAGS_retry_budget);
  o.throttle_k = absl::GetFlag(FLAGS_throttle_k);
  o.adaptive_in_flight = absl::GetFlag(FLAGS_adaptive_in_flight);
  o.batch = absl::GetFlag(FLAGS_batch);
  o.fund = absl::GetFlag(FLAGS_fund);
  o.tls = ClientTlsOptionsFromFlags();
  return ValidateOptions(std::move(o), absl::GetFlag(FLAGS_mix),
                         absl::GetFlag(FLAGS_transfer_scope));
}

int Main() {
  absl::StatusOr<LoadtestOptions> options = OptionsFromFlags();
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
  InstallSignalHandlers(
      "\nledger-loadtest: interrupted; stopping and printing the partial report (press Ctrl-C "
      "again to exit at once)\n",
      "\nledger-loadtest: interrupted again; exiting at once\n");
  LoadtestDriver driver(*options, &*accounts, partners.has_value() ? &*partners : nullptr);
  if (const absl::Status connected = driver.Connect(kConnectTimeout); !connected.ok()) {
    std::cerr << "ledger-loadtest: " << connected.message() << "; nothing was sent\n";
    return Interrupted() ? 128 + InterruptSignal() : kExitUnavailable;
  }
  std::cerr << "ledger-loadtest: run " << options->run_id << " against " << options->target
            << (options->rate > 0
                    ? absl::StrCat(", open loop at ", options->rate, " calls/s")
                    : absl::StrCat(", closed loop, ", options->concurrency, " in flight"))
            << (options->batch > 1 ? absl::StrCat(", ", options->batch, " operations per call")
                                   : "")
            << "\n";
  std::optional<WatchRebuild> watch;
  if (options->watch) watch.emplace(driver, kConnectTimeout);
  driver.Fund();
  driver.Run();

  RunOutcome outcome;
  outcome.seconds = driver.measured_seconds();
  outcome.client_cpu_seconds = driver.client_cpu_seconds();
  outcome.measurement_complete = driver.stop_reason() != StopReason::kInterrupted;
  Verify(driver, *options, outcome);
  if (watch.has_value()) {
    if (outcome.balances_read.empty()) {
      outcome.watch = {.verdict = "INCOMPLETE", .note = "verification read no balances"};
    } else {
      outcome.watch = watch->Check(driver.book().TouchedAccounts(), outcome.balances_read);
    }
  }
  // After Verify, whose reads count their NOT_LEADER refusals too.
  outcome.stats = driver.stats().Take();
  outcome.leader_address = driver.leader_address();
  if (Interrupted()) outcome.interrupted = SignalName(InterruptSignal());
  const std::string json = JsonReport(*options, outcome);
  std::cout << (options->json ? json : TextReport(*options, outcome)) << std::flush;
  if (!options->json_file.empty() && !(std::ofstream(options->json_file) << json)) {
    std::cerr << "ledger-loadtest: cannot write " << options->json_file << "\n";
    return 1;
  }
  // Money lost or invented: above all else.
  if (outcome.verification == "FAIL" || outcome.watch.verdict == "FAIL") return 1;
  if (Interrupted()) return 128 + InterruptSignal();
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
      "  ledger-loadtest [--target=HOST:PORT[,HOST:PORT...]] [--duration=10s | --requests=N] "
      "[--json] ...",
      {ledger::kTlsFlagsFile}};
  const std::vector<std::string> stray = ledger::cli::ParseCommandLineOrExit(argc, argv, program);
  if (!stray.empty()) {
    ledger::cli::ExitUsage(program, absl::StrCat("unexpected argument \"", stray[0],
                                                 "\"; ledger-loadtest takes only flags"));
  }
  return ledger::Main();
}
