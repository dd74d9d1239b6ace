// One call's life in a LoadtestDriver: issued, sent (unary or Apply), retried after a pushback,
// finished into the book and the statistics. The run's phases are in loadtest_driver_loops.cc.
#include "client/loadtest_driver.h"

#include <algorithm>
#include <functional>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/check.h"
#include "base/stable_hash.h"
#include "client/batch_call.h"
#include "client/call_outcome.h"
#include "client/channel_credentials.h"
#include "client/loadtest_progress.h"
#include "client/pushback.h"

namespace ledger {
namespace {

// The most jitter added to a pushback, as a fraction of it, so that calls shed together do not
// all come back in the same millisecond.
constexpr double kPushbackJitter = 0.1;

// How long Connect waits for one address's channels before it looks at the next address's.
constexpr absl::Duration kConnectPoll = absl::Milliseconds(50);

// Whether a call sent at `sent_at` that `outcome` (not the server's answer) ended found no server
// at `route`: the connection was lost or refused (UNAVAILABLE); or its deadline passed while it
// waited for a connection (--wait_for_ready), or while the server answered no call at all (a
// paused process, or a leader cut off from its followers: their connections stay up). A deadline
// that passed while the server answered others is a slow server, not a missing one.
bool FoundNoServer(const CallOutcome& outcome, const LeaderRouter::Route& route,
                   std::chrono::steady_clock::time_point sent_at) {
  if (outcome.code == grpc::StatusCode::UNAVAILABLE) return true;
  if (outcome.code != grpc::StatusCode::DEADLINE_EXCEEDED) return false;
  return route.channels.front()->GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_READY ||
         !LeaderRouter::AnsweredSince(&route, sent_at);
}

// Makes the channels of each address: --channels of them, each its own connection.
LeaderRouter::ChannelMaker NewChannelMaker(const LoadtestOptions& options) {
  return [&options](const std::string& address, int32_t index) {
    grpc::ChannelArguments arguments;
    arguments.SetInt("ledger.loadtest.channel", index);  // Distinct args: distinct connections.
    // Reconnect soon after a server restart instead of after gRPC's default back-off (up to
    // two minutes): the crash tests restart ledgerd under load.
    arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    return NewLedgerChannel(address, options.tls, options.credentials, arguments);
  };
}

}  // namespace

std::chrono::system_clock::time_point DeadlineIn(absl::Duration duration) {
  return std::chrono::system_clock::now() + absl::ToChronoNanoseconds(duration);
}

struct LoadtestDriver::Call {
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
  // Where this attempt went (the router's route then), and the stub used there.
  const LeaderRouter::Route* route = nullptr;
  v1::Ledger::Stub* stub = nullptr;
  uint64_t sequence = 0;  // Picks one of a route's channels.
  int32_t hops = 0;       // Attempts sent on after a NOT_LEADER refusal.
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
  // When this attempt was sent (a hop to the leader is sent anew, but is the same attempt).
  Clock::time_point sent_at;
  bool measured = false;
};

LoadtestDriver::LoadtestDriver(const LoadtestOptions& options, const AccountDistribution* accounts,
                               const TransferPartners* partners)
    : options_(options),
      accounts_(accounts),
      partners_(partners),
      router_(options.targets.empty() ? std::vector<std::string>{options.target} : options.targets,
              options.channels, NewChannelMaker(options)),
      book_(static_cast<size_t>(options.accounts)),
      stats_(options.shards),
      retry_budget_(options.retry_budget),
      throttle_(options.rate > 0 ? options.throttle_k : 0),
      in_flight_limit_(/*min=*/1, /*max=*/options.max_in_flight) {
  for (int64_t i = 0; i < options.accounts; ++i) {
    names_.push_back(AccountName(options.run_id, i));
    shard_of_.push_back(options.shards > 0 ? ShardOf(names_.back(), options.shards) : -1);
  }
}

absl::Status LoadtestDriver::Connect(absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  // Every --target address at once: the first whose channels are all ready is where calls go
  // (its NOT_LEADER refusals, if it follows, lead them on from there).
  const std::vector<const LeaderRouter::Route*>& targets = router_.targets();
  for (const LeaderRouter::Route* route : targets) {
    for (const auto& channel : route->channels) channel->GetState(/*try_to_connect=*/true);
  }
  while (absl::Now() < give_up) {
    for (const LeaderRouter::Route* route : targets) {
      // Waiting is what drives the connection (gRPC polls its sockets for a waiter), so each
      // channel is waited for, briefly, in turn.
      const auto poll_until = std::min(DeadlineIn(kConnectPoll), absl::ToChronoTime(give_up));
      const bool ready = std::all_of(route->channels.begin(), route->channels.end(),
                                     [&](const std::shared_ptr<grpc::Channel>& channel) {
                                       return channel->WaitForConnected(poll_until);
                                     });
      if (ready) {
        router_.MoveTo(route);
        return absl::OkStatus();
      }
    }
  }
  const grpc::Status status = Probe();
  if (ServerAnswered(status)) return absl::OkStatus();  // Just came up.
  return absl::UnavailableError(absl::StrCat("cannot connect to ledgerd at ", options_.target,
                                             " within ", absl::FormatDuration(timeout), ": ",
                                             Describe(status)));
}

grpc::Status LoadtestDriver::Probe() {
  v1::BalanceRequest request;
  request.set_account_id(names_[0]);
  return CallLeader(
      [&](v1::Ledger::Stub& stub, grpc::ClientContext* context) {
        v1::BalanceResponse response;
        return stub.Balance(context, request, &response);
      },
      DeadlineIn(absl::Seconds(1)), /*wait_for_ready=*/false);
}

grpc::Status LoadtestDriver::CallLeader(const Attempt& attempt,
                                        std::chrono::system_clock::time_point deadline,
                                        bool wait_for_ready) {
  const uint64_t sequence = call_sequence_.fetch_add(1);
  for (int hop = 0;; ++hop) {
    const LeaderRouter::Route* route = router_.Current();
    const auto sent_at = std::chrono::steady_clock::now();
    grpc::ClientContext context;
    context.set_deadline(deadline);
    context.set_wait_for_ready(wait_for_ready);
    grpc::Status status = attempt(*route->stubs[sequence % route->stubs.size()], &context);
    const CallOutcome outcome = ReadCallOutcome(status);
    if (ServerAnswered(outcome)) {
      LeaderRouter::Answered(route);
    } else if (FoundNoServer(outcome, *route, sent_at)) {
      router_.Unanswered(route);
    }
    if (outcome.reason != v1::NOT_LEADER) return status;
    const LeaderRouter::Hop next = router_.Follow(route, outcome);
    const bool follow =
        hop < kLoadtestLeaderHopsMax && std::chrono::system_clock::now() + next.wait < deadline;
    stats_.CountNotLeader(follow);
    if (!follow) return status;
    std::this_thread::sleep_for(next.wait);
  }
}

bool LoadtestDriver::ClaimCall(bool* measured) {
  if (Stopping()) return false;
  *measured = Measuring();
  if (!*measured || options_.requests <= 0) return true;
  return measured_claimed_.fetch_add(1) < options_.requests;
}

void LoadtestDriver::Issue(std::unique_ptr<Workload> workload, std::vector<PlannedCall> plans,
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
  call->sequence = call_sequence_.fetch_add(1);
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

std::vector<PlannedCall> LoadtestDriver::NextPlans(Workload& workload) const {
  std::vector<PlannedCall> plans;
  plans.reserve(static_cast<size_t>(options_.batch));
  for (int32_t i = 0; i < options_.batch; ++i) plans.push_back(workload.Next());
  return plans;
}

void LoadtestDriver::Send(Call* call) {
  ++call->attempts;
  call->sent_at = Clock::now();
  call->route = router_.Current();
  call->stub = call->route->stubs[call->sequence % call->route->stubs.size()].get();
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

void LoadtestDriver::SendUnary(Call* call) {
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

std::optional<LoadtestDriver::Clock::duration> LoadtestDriver::RetryDelay(Call* call) {
  using RetryEvent = Stats::RetryEvent;
  const std::optional<std::chrono::milliseconds> pushback =
      RetryPushback(call->context->GetServerTrailingMetadata());
  if (!pushback.has_value()) return std::nullopt;  // None, or the server said "do not retry".
  const auto count = [&](RetryEvent event) {
    if (call->measured) stats_.CountRetry(event);
  };
  if (call->attempts - call->hops > options_.max_retries) {
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

void LoadtestDriver::FinishOperation(const Call& call, size_t index, const CallOutcome& answer,
                                     std::vector<OperationOutcome>* outcomes,
                                     std::vector<AmbiguousCall>* ambiguous) {
  const PlannedCall& plan = call.plans[index];
  // A Balance applies nothing, whatever its answer.
  const CallEffect effect = plan.op == CallKind::kBalance ? CallEffect::kNotApplied : answer.effect;
  if (plan.op == CallKind::kTransfer) {
    book_.RecordTransfer(plan.account, plan.to_account, plan.amount, effect);
  } else {
    book_.Record(plan.account, plan.op, plan.amount, effect);
  }
  if (effect == CallEffect::kUnknown || effect == CallEffect::kPending) {
    ambiguous->push_back({plan.account, plan.op, plan.amount, call.ids[index], plan.to_account});
  }
  // A transfer counts at its source's shard, which decides it first.
  outcomes->push_back(
      {plan.op, answer.code, shard_of_[plan.account], effect, answer.reason == v1::NOT_LEADER});
}

bool LoadtestDriver::FollowLeader(Call* call, const CallOutcome& refusal) {
  LeaderRouter::Answered(call->route);
  const LeaderRouter::Hop hop = router_.Follow(call->route, refusal);
  const bool follow = call->hops < kLoadtestLeaderHopsMax &&
                      std::chrono::system_clock::now() + hop.wait < call->deadline;
  stats_.CountNotLeader(follow);
  if (!follow) return false;
  ++call->hops;
  // Sent where calls go when the wait is over, which another call's refusal may have moved.
  retry_timer_.Schedule(Clock::now() + hop.wait, [this, call] { Send(call); });
  return true;
}

void LoadtestDriver::Finish(Call* call, const grpc::Status& status) {
  const CallOutcome call_answer = ReadCallOutcome(status);
  // Nothing was applied: the same request (the same ids) goes to the leader.
  if (call_answer.reason == v1::NOT_LEADER && FollowLeader(call, call_answer)) return;
  // The connection was lost or refused (a killed leader), or never came while the call waited
  // for it: the next calls try another member.
  const bool server_answered = ServerAnswered(call_answer);
  const bool found_no_server =
      !server_answered && FoundNoServer(call_answer, *call->route, call->sent_at);
  if (server_answered) {
    LeaderRouter::Answered(call->route);
  } else if (found_no_server) {
    router_.Unanswered(call->route);
  }
  const grpc::StatusCode code = status.error_code();
  if (options_.rate > 0 && options_.adaptive_in_flight) {
    in_flight_limit_.OnAnswer(code != grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  // The throttle hears of load only: a call the server took on (whatever its answer) is
  // accepted; one refused for overload, or left past its deadline by a server busy with others,
  // is not. A call that found no server, or that ran out of hops to the leader, says nothing of
  // load: counted as refused, a failover would throttle the client for a minute after the
  // cluster is back (the refusals it makes itself would keep it throttled).
  if (!found_no_server && call_answer.reason != v1::NOT_LEADER) {
    throttle_.CountAnswer(Clock::now(),
                          server_answered && code != grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  const std::vector<CallOutcome> answers =
      call->batched
          ? ApplyOperationOutcomes(call_answer, call->apply_response, call->pending.size())
          : std::vector<CallOutcome>{call_answer};
  if (code == grpc::StatusCode::RESOURCE_EXHAUSTED && call->measured) {
    stats_.RecordShedAttempt(Clock::now() - call->attempt_start);
  }
  // A shed operation applied nothing, so retrying it under the same request_id keeps it one
  // logical operation; only its final code reaches the book and the report.
  const bool any_shed = std::any_of(answers.begin(), answers.end(),
                                    [](const CallOutcome& answer) { return answer.overloaded; });
  const std::optional<Clock::duration> retry_in =
      any_shed ? RetryDelay(call) : std::optional<Clock::duration>();
  const auto now = Clock::now();
  const auto latency = now - call->intended_start;  // From the first attempt's start.
  std::vector<OperationOutcome> outcomes;
  std::vector<AmbiguousCall> ambiguous;
  std::vector<size_t> retried;
  for (size_t j = 0; j < answers.size(); ++j) {
    if (retry_in.has_value() && answers[j].overloaded) {
      retried.push_back(call->pending[j]);
    } else {
      FinishOperation(*call, call->pending[j], answers[j], &outcomes, &ambiguous);
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
  stats_.RecordCall(code, ServerAnswered(call_answer), latency, call->measured,
                    call_answer.reason == v1::NOT_LEADER);
  // Retried after a pushback; hops to the leader are not retries.
  if (call->measured && call->attempts - call->hops > 1 && status.ok()) {
    stats_.CountRetry(Stats::RetryEvent::kOkAfterRetry);
  }
  EndCall(call);
}

void LoadtestDriver::EndCall(Call* call) {
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

void LoadtestDriver::ReleaseInFlight() {
  if (in_flight_.fetch_sub(1) == 1) {
    std::lock_guard<std::mutex> lock(done_mu_);
    done_cv_.notify_all();
  }
}

std::unique_ptr<Workload> LoadtestDriver::NewWorkload() {
  return std::make_unique<Workload>(options_.mix, accounts_, options_.amount_min,
                                    options_.amount_max, std::random_device{}(), partners_);
}

}  // namespace ledger
