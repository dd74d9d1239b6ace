#include "client/loadtest_settle.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/call_outcome.h"
#include "client/interrupt_signals.h"
#include "client/loadtest_progress.h"
#include "grpcpp/grpcpp.h"
#include "ledger/v1/ledger.grpc.pb.h"

namespace ledger {
namespace {

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
TransferSettlement SettleTransfer(LoadtestDriver& driver, const LoadtestOptions& options,
                                  const LoadtestDriver::AmbiguousCall& call, absl::Time give_up,
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
    v1::GetTransferResponse state;
    // Through a restart (or a failover) the answer is worth waiting for, within --resolve_for.
    grpc::Status status = driver.CallLeader(
        [&](v1::Ledger::Stub& stub, grpc::ClientContext* context) {
          state.Clear();
          return stub.GetTransfer(context, query, &state);
        },
        DeadlineIn(std::min(options.deadline, left)), /*wait_for_ready=*/true);
    if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
      status = driver.CallLeader(
          [&](v1::Ledger::Stub& stub, grpc::ClientContext* context) {
            v1::TransferResponse response;
            return stub.Transfer(context, transfer, &response);
          },
          DeadlineIn(std::min(options.deadline, left)), /*wait_for_ready=*/true);
      if (status.ok()) return settle(true);
      if (TransferRefused(status.error_code())) return settle(false);
    }
    const grpc::StatusCode code = status.error_code();
    // A retry's TRANSFER_PENDING is the server's answer, though its code is UNAVAILABLE.
    if (ServerAnswered(status)) {
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
               code != grpc::StatusCode::UNAVAILABLE && ServerAnswered(status)) {
      return TransferSettlement::kUnsettled;  // ALREADY_EXISTS, INTERNAL, ...: cannot settle.
    }
    // PENDING, shed, timed out, still pending on a retry, or the server is (re)starting.
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
  return TransferSettlement::kUnsettled;
}

// Retries one ambiguous call with its request_id until a definite answer, `give_up`, or `stop`.
// True when settled (and recorded in the book).
bool SettleOne(LoadtestDriver& driver, const LoadtestOptions& options,
               const LoadtestDriver::AmbiguousCall& call, absl::Time give_up, ServerWatch& watch,
               const std::atomic<bool>& stop, bool* was_applied) {
  auto backoff = std::chrono::milliseconds(10);
  while (!stop) {
    const absl::Duration left = give_up - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    // Through a restart (or a failover) the answer is worth waiting for, but never past
    // --resolve_for.
    const auto deadline = DeadlineIn(std::min(options.deadline, left));
    v1::DepositRequest deposit;
    v1::WithdrawRequest withdraw;
    if (call.op == CallKind::kDeposit) {
      deposit.set_account_id(driver.names()[call.account]);
      deposit.set_amount(call.amount);
      deposit.set_request_id(call.request_id);
    } else {
      withdraw.set_account_id(driver.names()[call.account]);
      withdraw.set_amount(call.amount);
      withdraw.set_request_id(call.request_id);
    }
    const grpc::Status status = driver.CallLeader(
        [&](v1::Ledger::Stub& stub, grpc::ClientContext* context) {
          if (call.op == CallKind::kDeposit) {
            v1::DepositResponse response;
            return stub.Deposit(context, deposit, &response);
          }
          v1::WithdrawResponse response;
          return stub.Withdraw(context, withdraw, &response);
        },
        deadline, /*wait_for_ready=*/true);
    const grpc::StatusCode code = status.error_code();
    if (ServerAnswered(status)) {
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
    // Shed, timed out, no leader yet (NOT_LEADER), a leader that lost its leadership
    // (OUTCOME_UNKNOWN), or the server is (re)starting: the answer is still to come. Any other
    // code (ALREADY_EXISTS would mean a reused request_id) cannot settle it.
    const CallOutcome outcome = ReadCallOutcome(status);
    if (code != grpc::StatusCode::RESOURCE_EXHAUSTED && ServerAnswered(outcome) &&
        outcome.advice == CallAdvice::kDone) {
      return false;
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
  return false;
}

// How the ambiguous calls settled so far were settled. Thread-safe: the resolvers count
// concurrently; CopyTo once they have finished.
struct SettleCounts {
  std::atomic<int64_t> applied{0}, not_applied{0}, unresolved{0};
  std::atomic<int64_t> committed{0}, refused{0}, transfers_unresolved{0}, without_records{0};

  void CopyTo(Resolution& result) const {
    result.applied = applied.load();
    result.not_applied = not_applied.load();
    result.unresolved = unresolved.load();
    result.transfers_committed = committed.load();
    result.transfers_refused = refused.load();
    result.transfers_unresolved = transfers_unresolved.load();
    result.transfers_without_records = without_records.load();
  }
};

// Settles one ambiguous call, a transfer by SettleTransfer and any other by SettleOne, and counts
// how in `counts`.
void SettleAndCount(LoadtestDriver& driver, const LoadtestOptions& options,
                    const LoadtestDriver::AmbiguousCall& call, absl::Time give_up,
                    ServerWatch& watch, const std::atomic<bool>& stop, SettleCounts& counts) {
  if (call.op == CallKind::kTransfer) {
    switch (SettleTransfer(driver, options, call, give_up, watch, stop)) {
      case TransferSettlement::kCommitted:
        counts.committed.fetch_add(1);
        counts.applied.fetch_add(1);
        break;
      case TransferSettlement::kRefused:
        counts.refused.fetch_add(1);
        counts.not_applied.fetch_add(1);
        break;
      case TransferSettlement::kNoRecords:
        counts.without_records.fetch_add(1);
        [[fallthrough]];
      case TransferSettlement::kUnsettled:
        counts.transfers_unresolved.fetch_add(1);
        counts.unresolved.fetch_add(1);
        break;
    }
    return;
  }
  bool was_applied = false;
  if (SettleOne(driver, options, call, give_up, watch, stop, &was_applied)) {
    (was_applied ? counts.applied : counts.not_applied).fetch_add(1);
  } else {
    counts.unresolved.fetch_add(1);
  }
}

}  // namespace

Resolution UnsettledResolution(const std::vector<LoadtestDriver::AmbiguousCall>& calls) {
  Resolution result;
  result.calls = static_cast<int64_t>(calls.size());
  result.transfers = std::count_if(calls.begin(), calls.end(),
                                   [](const auto& call) { return call.op == CallKind::kTransfer; });
  result.unresolved = result.calls;
  result.transfers_unresolved = result.transfers;
  return result;
}

Resolution ResolveAmbiguous(LoadtestDriver& driver, const LoadtestOptions& options) {
  const std::vector<LoadtestDriver::AmbiguousCall> calls = driver.ambiguous_calls();
  Resolution result = UnsettledResolution(calls);
  if (calls.empty() || options.resolve_for <= absl::ZeroDuration()) return result;
  const absl::Time give_up = absl::Now() + options.resolve_for;
  std::atomic<size_t> next{0};
  SettleCounts counts;
  std::atomic<bool> stop{false};
  ServerWatch watch;
  ProgressTicker ticker(ShowProgress(options), [&](double seconds) {
    const int64_t applied = counts.applied.load();
    const int64_t not_applied = counts.not_applied.load();
    return absl::StrFormat(
        "[settle %4.0fs of %s] %d of %d ambiguous calls settled (%d applied, %d not applied)%s",
        seconds, absl::FormatDuration(options.resolve_for), applied + not_applied, calls.size(),
        applied, not_applied, watch.Silence());
  });
  // Watches for a signal or a server that is gone, and stops the resolvers.
  std::atomic<bool> resolvers_done{false};
  std::thread watcher([&] {
    while (!resolvers_done) {
      if (Interrupted()) {
        result.stopped = absl::StrCat("interrupted by ", SignalName(InterruptSignal()));
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
        SettleAndCount(driver, options, calls[i], give_up, watch, stop, counts);
      }
    });
  }
  for (std::thread& resolver : resolvers) resolver.join();
  resolvers_done = true;
  watcher.join();
  counts.CopyTo(result);
  return result;
}

}  // namespace ledger
