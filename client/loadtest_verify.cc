#include "client/loadtest_verify.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_code_names.h"
#include "client/call_outcome.h"
#include "client/interrupt_signals.h"
#include "client/loadtest_progress.h"
#include "client/loadtest_settle.h"
#include "grpcpp/grpcpp.h"
#include "ledger/v1/ledger.grpc.pb.h"

namespace ledger {
namespace {

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
std::optional<ReadStop> StopWaiting(const LoadtestOptions& options, const ServerWatch& watch,
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

// Whether a read that ended with `status` may be made again: shed, unanswered, or refused
// NOT_LEADER by a cluster that has no leader yet (the next read follows the one it finds).
bool Retryable(const grpc::Status& status) {
  const CallOutcome outcome = ReadCallOutcome(status);
  return outcome.code == grpc::StatusCode::RESOURCE_EXHAUSTED || !ServerAnswered(outcome) ||
         outcome.reason == v1::NOT_LEADER;
}

// Reads `account`'s balance into `balance` (nullopt: NOT_FOUND, which means 0), retrying shed
// and unanswered reads with a back-off (a loaded server may shed them too). Returns why it
// stopped instead: a refusal, ledgerd gone (per `watch`), `give_up`, a signal, or `stop`.
std::optional<ReadStop> ReadOneBalance(LoadtestDriver& driver, const LoadtestOptions& options,
                                       size_t account, absl::Time give_up, ServerWatch& watch,
                                       const std::atomic<bool>& stop,
                                       std::optional<int64_t>* balance) {
  v1::BalanceRequest request;
  request.set_account_id(driver.names()[account]);
  auto backoff = std::chrono::milliseconds(5);
  while (!stop) {
    v1::BalanceResponse response;
    // From the leader, wherever it is now.
    const grpc::Status status = driver.CallLeader(
        [&](v1::Ledger::Stub& stub, grpc::ClientContext* context) {
          return stub.Balance(context, request, &response);
        },
        DeadlineIn(std::min(options.deadline, give_up - absl::Now())), /*wait_for_ready=*/false);
    const grpc::StatusCode code = status.error_code();
    if (code == grpc::StatusCode::OK || code == grpc::StatusCode::NOT_FOUND) {
      if (code == grpc::StatusCode::OK) *balance = response.balance();
      watch.Answered();
      return std::nullopt;
    }
    if (ServerAnswered(status)) {
      watch.Answered();
    } else {
      watch.NotAnswered(status);
    }
    if (Interrupted())
      return ReadStop{absl::StrCat("interrupted by ", SignalName(InterruptSignal()))};
    if (!Retryable(status)) {
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
std::optional<ReadStop> ReadBalanceBatch(LoadtestDriver& driver, const LoadtestOptions& options,
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
    // From the leader, wherever it is now.
    const grpc::Status status = driver.CallLeader(
        [&](v1::Ledger::Stub& stub, grpc::ClientContext* context) {
          response.Clear();
          return stub.Apply(context, request, &response);
        },
        DeadlineIn(std::min(options.deadline, give_up - absl::Now())), /*wait_for_ready=*/false);
    if (ServerAnswered(status)) {
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
        } else if (ReadApplyResult(result).advice != CallAdvice::kDone) {
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
    if (Interrupted())
      return ReadStop{absl::StrCat("interrupted by ", SignalName(InterruptSignal()))};
    if (!status.ok() && !Retryable(status)) {
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
BalanceReads ReadBalances(LoadtestDriver& driver, const LoadtestOptions& options) {
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

}  // namespace

void Verify(LoadtestDriver& driver, const LoadtestOptions& options, RunOutcome& outcome) {
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
  outcome.balances_read = std::move(reads.balances);
  outcome.verification = outcome.checked.pass ? "PASS" : "FAIL";
}

}  // namespace ledger
