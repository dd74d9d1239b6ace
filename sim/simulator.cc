#include "sim/simulator.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/check.h"
#include "shard/message.h"
#include "sim/auditor.h"
#include "sim/sim_watcher.h"
#include "sim/transfer_auditor.h"

namespace ledger::sim {
namespace {

// Named bounds of the workload: few accounts so that calls collide, small batches so that
// faults hit varied mixes, a short TTL so that the clock crosses it often.
constexpr std::array<const char*, 4> kAccounts = {"a0", "a1", "a2", "a3"};
constexpr size_t kMaxBatch = 12;
// The largest batch of one Apply part in the simulation (the real bound is the mailbox capacity).
constexpr size_t kApplyPartMax = 8 * kMaxBatch;
constexpr int64_t kOverdraftLimit = 50;
constexpr absl::Duration kTtl = absl::Seconds(60);
constexpr size_t kRecentRequestsMax = 32;
constexpr size_t kTraceEvents = 12;

// Transfers run on accounts of their own (no deposit or withdrawal touches them, so the Auditor's
// exact model stays exact). Two pretend shards: "A" holds t0, t1 and tx, "B" holds t2, t3 and ty;
// a transfer within one is local (decided at once), across them it is carried by the simulated
// coordinator, step by step, though every step runs on the one core (it does not know shards).
// tx and ty are never opened; t3 starts close to INT64_MAX, so credits to it overflow.
struct TransferAccount {
  const char* id;
  char shard;
  int64_t initial;  // < 0: never opened.
};
constexpr int64_t kHugeBalance = std::numeric_limits<int64_t>::max() - 500;
constexpr std::array<TransferAccount, 6> kTransferAccounts = {{{"t0", 'A', 200},
                                                               {"t1", 'A', 200},
                                                               {"tx", 'A', -1},
                                                               {"t2", 'B', 200},
                                                               {"t3", 'B', kHugeBalance},
                                                               {"ty", 'B', -1}}};
constexpr size_t kRecentTransfersMax = 32;
// The coordinator's fault-free rounds at the end of a run before transfers still carried count as
// stuck.
constexpr int kQuiesceRounds = 200;

char ShardOf(const std::string& account) {
  for (const TransferAccount& known : kTransferAccounts) {
    if (account == known.id) return known.shard;
  }
  return '?';
}

// The message the shard core is handed for `call`, answered through `completion`.
Message MessageFor(const AuditedCall& call, Completion* completion) {
  Message message{.account_id = call.account_id, .completion = completion};
  switch (call.op) {
    case Op::kTransfer:
      message.kind = TransferCall{.transfer_id = call.request_id,
                                  .to = call.counterparty,
                                  .amount = call.amount,
                                  .local = call.local_transfer,
                                  .resume_only = call.resume_only};
      return message;
    case Op::kTransferCredit:
      message.kind = CreditStep{
          .transfer_id = call.request_id, .from = call.counterparty, .amount = call.amount};
      return message;
    case Op::kTransferSettle:
      message.kind = SettleStep{.transfer_id = call.request_id,
                                .to = call.counterparty,
                                .amount = call.amount,
                                .credit_outcome = call.credit_outcome,
                                .credit_balance = call.credit_balance,
                                .credited_at = call.credited_at};
      return message;
    case Op::kDeposit:
    case Op::kWithdraw:
    case Op::kBalance:
      break;
  }
  return MakeAccountCall(call.op, call.account_id, call.amount, call.request_id, completion);
}

TransferWorld MakeTransferWorld(bool funded) {
  TransferWorld world;
  world.policy.overdraft_limit = kOverdraftLimit;
  world.huge = "t3";
  for (const TransferAccount& account : kTransferAccounts) {
    world.accounts.insert(account.id);
    if (account.initial < 0) {
      world.missing.insert(account.id);
    } else {
      if (funded) world.initial_total += account.initial;
    }
  }
  return world;
}

// A uniform draw in [0, n): modulo of the generator's fixed output, so the same on every
// standard library (std::uniform_int_distribution is not specified bit for bit).
uint64_t Uniform(std::mt19937_64& rng, uint64_t n) { return rng() % n; }
bool Percent(std::mt19937_64& rng, uint64_t percent) { return Uniform(rng, 100) < percent; }

class Simulation;

// A message's completion: hands every reply to the simulation, which audits when and in which
// order it was released.
class SimCompletion final : public Completion {
 public:
  SimCompletion(Simulation* simulation, uint64_t batch, size_t index, AuditedCall* call)
      : simulation_(simulation), batch_(batch), index_(index), call_(call) {}
  bool handler_throws() const { return call_->handler_throws; }
  bool CallerGone() const override { return call_->caller_gone; }
  void Complete(const Reply& reply) override;

 private:
  Simulation* const simulation_;
  const uint64_t batch_;
  const size_t index_;
  AuditedCall* const call_;
};

struct RecentTransfer {
  std::string id;
  std::string from;
  std::string to;
  int64_t amount;
};

// One transfer the simulated coordinator carries: TransferCoordinator's Flight
// (shard/transfer_coordinator.cc), with a step that is either sent (in a batch, waiting for its
// reply) or due at a seeded step.
struct Flight {
  enum class Phase : uint8_t { kTransfer, kCredit, kSettle };
  std::string id;
  std::string from;
  std::string to;
  int64_t amount = 0;
  bool client = false;  // False: resumed from the store, nobody waits for it.
  Phase phase = Phase::kTransfer;
  bool resume_only = false;
  bool sent = false;
  int64_t due = 0;  // The step from which its next message may be sent.
  int64_t from_balance = 0;
  Outcome credit_outcome = Outcome::kOk;
  int64_t credit_balance = 0;
  absl::Time credited_at = absl::InfinitePast();
};

struct RecentRequest {
  std::string account_id;
  std::string request_id;
  Op op;
  int64_t amount;
};

// A batch's calls, shared by its completions, the in-flight queue and the trace.
using Calls = std::shared_ptr<std::vector<AuditedCall>>;

// One event of the trace printed with a failure; formatted only then.
struct TraceEvent {
  // kRestart: a clean stop; kCrash: a death; kFollowerRestart: a lost leadership's restart.
  enum class Kind : uint8_t {
    kBatch,
    kWrite,
    kRollBack,
    kRestart,
    kCrash,
    kFollowerRestart,
    kReopen
  };
  int64_t step = 0;
  Kind kind = Kind::kBatch;
  std::string note{};  // Clock jumps, why a write happened.
  // kBatch: the batch, its sequence (0: answered at once), its lookup plan and failures.
  uint64_t batch = 0;
  uint64_t sequence = 0;
  absl::Time time{};
  LookupPlan lookups{};
  int lookup_failures = 0;
  Calls calls{};
  // kWrite: the group's first batch and size, its plan and whether the store was called;
  // kRollBack: the first batch rolled back and how many.
  size_t count = 0;
  WritePlan plan{};
  bool write_called = false;
  // kReopen: what the log did with the entry of a failed sync.
  std::string note_of_log{};
};

std::string DescribeEvent(const TraceEvent& event) {
  std::string text = absl::StrCat("  step ", event.step, ": ", event.note);
  switch (event.kind) {
    case TraceEvent::Kind::kRestart:
      absl::StrAppend(&text, "restart (sealed batches written, then rebuilt from the store)\n");
      return text;
    case TraceEvent::Kind::kCrash:
      absl::StrAppend(&text, "crash; in-flight batches never answered; rebuilt from the store\n");
      return text;
    case TraceEvent::Kind::kFollowerRestart:
      absl::StrAppend(&text,
                      "leadership lost; starts again as a follower, rebuilt from the store\n");
      return text;
    case TraceEvent::Kind::kReopen:
      absl::StrAppend(&text, "the store reopened; its log ", event.note_of_log, "\n");
      return text;
    case TraceEvent::Kind::kWrite:
      absl::StrAppend(
          &text, "group write of batches ", event.batch, "..", event.batch + event.count - 1, ": ",
          !event.write_called                          ? "nothing to write"
          : event.plan.write == WriteFault::kNone      ? "ok"
          : event.plan.write == WriteFault::kFail      ? "the write fails"
          : event.plan.write == WriteFault::kSyncFails ? "the sync fails"
                                                       : "leadership is lost with the entry sent",
          "\n");
      return text;
    case TraceEvent::Kind::kRollBack:
      absl::StrAppend(&text, "roll back batches ", event.batch, "..", event.batch + event.count - 1,
                      "\n");
      return text;
    case TraceEvent::Kind::kBatch:
      break;
  }
  absl::StrAppend(&text, "batch ", event.batch,
                  event.sequence == 0 ? std::string(" (answered at once)")
                                      : absl::StrCat(" (sealed as ", event.sequence, ")"),
                  " at ", absl::FormatTime("%H:%M:%S", event.time, absl::UTCTimeZone()),
                  ", lookups fail ", event.lookups.fail_percent, "% (", event.lookup_failures,
                  " failed), memory misses ", event.lookups.memory_miss_percent, "%\n");
  for (const AuditedCall& call : *event.calls) {
    AuditedCall shown = call;
    if (call.completions == 0) shown.reply = call.decided;
    absl::StrAppend(&text, "    ", DescribeCall(shown));
    if (call.completions == 0) {
      absl::StrAppend(&text, " (decided; not answered yet)");
    } else if (call.decided.outcome != call.reply.outcome ||
               call.decided.balance != call.reply.balance) {
      absl::StrAppend(&text, " (decided ", OutcomeName(call.decided.outcome), " ",
                      call.decided.balance, ")");
    }
    absl::StrAppend(&text, "\n");
  }
  return text;
}

// A sealed batch the simulator holds instead of writing it, as the commit pipeline's queue does.
struct InFlight {
  uint64_t batch = 0;  // The auditor's id.
  std::unique_ptr<SealedBatch> sealed;
  Calls calls;
  std::unique_ptr<std::vector<SimCompletion>> completions;
};

class Simulation {
 public:
  explicit Simulation(const SimOptions& options)
      : options_(options),
        rng_(options.seed),
        clock_(absl::FromUnixSeconds(1767225600)),  // 2026-01-01, any fixed instant will do.
        store_(&clock_, &rng_, options.store_bug),
        auditor_(LedgerPolicy{.overdraft_limit = kOverdraftLimit}, kTtl),
        transfer_auditor_(MakeTransferWorld(options.transfers)),
        // Its own stream of choices, so that it changes none of the run's.
        watcher_rng_(options.seed ^ 0x5741544348ULL),
        watcher_(&watcher_rng_, options.watcher_skips_positions),
        writes_in_flight_(options.writes_in_flight > 0
                              ? static_cast<size_t>(options.writes_in_flight)
                              : static_cast<size_t>(1 + options.seed % 3)) {
    LEDGER_CHECK_GE(options_.max_in_flight, 1);
    result_.writes_in_flight = static_cast<int64_t>(writes_in_flight_);
    if (options_.transfers) OpenTransferAccounts();
    RebuildCore();
  }

  SimResult Run() {
    for (int64_t step = 1; step <= options_.steps; ++step) {
      if (options_.on_step != nullptr) options_.on_step(options_.seed, step);
      result_.steps = step;
      step_ = step;
      std::string failure = Step();
      // The end: what is still in flight is written and answered, as at a stop; then the
      // coordinator carries every transfer to its end, and none may be left pending.
      if (failure.empty() && step == options_.steps) failure = Drain();
      if (failure.empty() && step == options_.steps) failure = Quiesce();
      if (failure.empty()) failure = TakeTransferViolation();
      if (failure.empty()) failure = auditor_.CheckStore(store_);
      if (failure.empty()) failure = transfer_auditor_.CheckStore(store_);
      if (failure.empty() && (step == options_.steps || Percent(watcher_rng_, 60))) {
        failure = watcher_.Follow(store_);
      }
      if (failure.empty()) failure = watcher_.Check(store_);
      if (failure.empty()) failure = CheckMemory();
      if (!failure.empty()) return Fail(failure);
    }
    result_.undurable_reads = auditor_.undurable_reads();
    result_.in_flight_record_answers = auditor_.in_flight_record_answers();
    result_.unapplied_answers = store_.unapplied_answers();
    result_.failed_lookup_batches = store_.failed_lookup_batches();
    result_.torn_tails = store_.log().torn_tails();
    result_.kept_failed_entries = store_.log().kept_failed_entries();
    result_.watched_operations = watcher_.events();
    result_.watcher_resyncs = watcher_.resyncs();
    CountJournal();
    return result_;
  }

  void OnRelease(uint64_t batch, size_t index, const AuditedCall& call, const Reply& reply) {
    auditor_.Released(batch, index, reply);
    ++result_.outcomes[static_cast<size_t>(reply.outcome)];
    if (reply.replayed) ++result_.replays;
    if (call.op < Op::kTransfer) return;
    if (transfer_violation_.empty()) {
      transfer_violation_ = transfer_auditor_.CheckReleased(call, reply, store_);
    }
    if (call.flight >= 0) OnStepDone(call.flight, reply);
  }

 private:
  SimResult Fail(const std::string& failure) {
    CountJournal();
    result_.ok = false;
    result_.failure =
        absl::StrCat("seed ", options_.seed, " step ", step_, ": ", failure, "\nlast events:\n");
    for (const TraceEvent& event : trace_) absl::StrAppend(&result_.failure, DescribeEvent(event));
    return result_;
  }

  std::string CheckMemory() {
    memory_.clear();
    for (const char* account : kAccounts) {
      memory_.emplace_back(account, core_->FindAccountForTesting(account));
    }
    return auditor_.CheckMemory(memory_);
  }

  // A restart: the core is rebuilt from the store's durable accounts, as the router does when
  // ledgerd starts.
  void RebuildCore() {
    ShardCoreOptions core;
    core.max_batch = kMaxBatch;
    core.policy.overdraft_limit = kOverdraftLimit;
    core.store = &store_;
    core.idempotency_ttl = kTtl;
    core.clock = [this] { return clock_; };
    // Steady time only feeds the observer's durations; a constant keeps the run deterministic.
    core.steady_clock = [] { return SteadyClock::time_point{}; };
    // A handler fault (a bug the shard survives): every SimCompletion is the simulator's own.
    ShardTestHooks hooks;
    hooks.before_handle = [](const Message& message) {
      if (static_cast<const SimCompletion*>(message.completion)->handler_throws()) {
        throw std::runtime_error("simulated handler fault");
      }
    };
    hooks.core_bug = options_.core_bug;
    core.log_errors = false;
    core_ = std::make_unique<ShardCore>(std::move(core), std::move(hooks));
    // ledgerd's start replays the log into the derived state before it loads the accounts.
    store_.ApplyAll();
    for (const auto& [id, state] : store_.accounts()) core_->LoadAccount(id, state);
    finished_through_ = 0;
    auditor_.Restart();
    // The coordinator stopped: what it carried is parked; ledgerd's start-up resumes every
    // transfer the store holds as pending (its credit is sent again).
    for (const auto& [id, flight] : flights_) {
      if (flight.client) ++result_.transfers_parked;
    }
    flights_.clear();
    for (const auto& [key, record] : store_.pending()) {
      core_->LoadPendingTransfer(key.first, record);
      Flight flight{.id = key.first,
                    .from = record.from,
                    .to = record.to,
                    .amount = record.amount,
                    .client = false,
                    .phase = Flight::Phase::kCredit,
                    .due = step_ + static_cast<int64_t>(Uniform(rng_, 3)),
                    .from_balance = record.from_balance};
      flights_.emplace(next_flight_++, std::move(flight));
      ++result_.transfers_resumed;
    }
  }

  // Funds the transfer accounts with one deposit each, before the first core starts.
  void OpenTransferAccounts() {
    BatchWrite write;
    std::set<std::string> accounts;
    for (const TransferAccount& account : kTransferAccounts) {
      accounts.insert(account.id);
      if (account.initial < 0) continue;
      write.accounts.push_back(
          {.account_id = account.id, .state = {.balance = account.initial, .sequence = 1}});
      write.journal.push_back({.account_id = account.id,
                               .sequence = 1,
                               .kind = EntryKind::kDeposit,
                               .amount = account.initial,
                               .balance_after = account.initial,
                               .request_id = "",
                               .time = clock_});
    }
    store_.PlanWrite({});
    LEDGER_CHECK(store_.Write(write).ok());
    auditor_.ExcludeAccounts(std::move(accounts));
  }

  std::string TakeTransferViolation() {
    if (transfer_violation_.empty()) return "";
    return absl::StrCat("transfers: ", std::exchange(transfer_violation_, ""));
  }

  void CountJournal() {
    result_.journal_credits = transfer_auditor_.credits();
    result_.journal_refunds = transfer_auditor_.refunds();
    result_.max_transfers_in_flight = transfer_auditor_.max_in_flight();
  }

  // TransferCoordinator::OnStepDone: a flight's step was answered; what comes next.
  void OnStepDone(int64_t flight_id, const Reply& reply) {
    auto found = flights_.find(flight_id);
    if (found == flights_.end()) {
      if (transfer_violation_.empty()) {
        transfer_violation_ =
            absl::StrCat("a step of flight ", flight_id, " was answered after the flight ended");
      }
      return;
    }
    Flight& flight = found->second;
    flight.sent = false;
    const bool retryable =
        reply.outcome == Outcome::kStorageFailed || reply.outcome == Outcome::kInternal;
    if (reply.outcome == Outcome::kShuttingDown && flight.phase != Flight::Phase::kTransfer) {
      return Finish(found, reply);  // Parked: the store keeps it pending for the next start.
    }
    switch (flight.phase) {
      case Flight::Phase::kTransfer:
        if (reply.outcome == Outcome::kStorageFailed) {
          // The debit's write failed, yet may have landed: the client hears "unknown" now and the
          // flight asks the source (resume_only) until it can say.
          flight.client = false;
          flight.resume_only = true;
          return Retry(flight);
        }
        // An ask that could not be answered (its handler failed) is asked again: the debit may
        // be there.
        if (flight.resume_only && retryable) return Retry(flight);
        if (reply.outcome != Outcome::kOk || !reply.transfer().debited) return Finish(found, reply);
        flight.from_balance = reply.balance;
        flight.phase = Flight::Phase::kCredit;
        return Next(flight);
      case Flight::Phase::kCredit:
        if (retryable) return Retry(flight);
        if (reply.outcome != Outcome::kOk && reply.outcome != Outcome::kCounterpartyNotFound &&
            reply.outcome != Outcome::kOverflow && reply.outcome != Outcome::kTransferIdReused &&
            transfer_violation_.empty()) {
          // The real coordinator LEDGER_CHECKs this.
          transfer_violation_ =
              absl::StrCat("transfer ", flight.id, ": the credit was answered ",
                           OutcomeName(reply.outcome), ", which the coordinator cannot settle");
        }
        flight.credit_outcome = reply.outcome;
        if (options_.coordinator_bug == CoordinatorBugForTesting::kSettleRefusedAsCommitted) {
          flight.credit_outcome = Outcome::kOk;
        }
        flight.credit_balance = reply.transfer().to_balance;
        flight.credited_at = reply.transfer().credited_at;
        flight.phase = Flight::Phase::kSettle;
        return Next(flight);
      case Flight::Phase::kSettle:
        if (retryable) return Retry(flight);
        if (reply.outcome == Outcome::kOk) {
          ++result_.transfers_committed;
        } else {
          ++result_.transfers_refunded;
        }
        return Finish(found, reply);
    }
  }

  // The next step goes at a seeded moment soon; a step sent again waits a little longer.
  void Next(Flight& flight) { flight.due = step_ + static_cast<int64_t>(Uniform(rng_, 3)); }
  void Retry(Flight& flight) {
    ++result_.step_retries;
    flight.due = step_ + 1 + static_cast<int64_t>(Uniform(rng_, 4));
  }
  void Finish(std::map<int64_t, Flight>::iterator flight, const Reply& reply) {
    if (flight->second.client && reply.outcome == Outcome::kShuttingDown) {
      ++result_.transfers_parked;
    }
    flights_.erase(flight);
  }

  // The message of a flight's next step, as TransferCoordinator's Flight::NextMessage makes it.
  AuditedCall FlightCall(int64_t flight_id, Flight& flight) {
    AuditedCall call;
    call.flight = flight_id;
    call.request_id = flight.id;
    call.amount = flight.amount;
    call.handler_throws = !quiescing_ && Percent(rng_, 1);
    switch (flight.phase) {
      case Flight::Phase::kTransfer:
        // Only a resume_only ask: the client's own Transfer is sent by NextTransfer.
        LEDGER_CHECK(flight.resume_only);
        call.op = Op::kTransfer;
        call.account_id = flight.from;
        call.counterparty = flight.to;
        call.resume_only = true;
        ++result_.resume_only_sent;
        break;
      case Flight::Phase::kCredit:
        call.op = Op::kTransferCredit;
        call.account_id = flight.to;
        call.counterparty = flight.from;
        ++result_.credits_sent;
        break;
      case Flight::Phase::kSettle:
        call.op = Op::kTransferSettle;
        call.account_id = flight.from;
        call.counterparty = flight.to;
        call.credit_outcome = flight.credit_outcome;
        call.credit_balance = flight.credit_balance;
        call.credited_at = flight.credited_at;
        ++result_.settles_sent;
        break;
    }
    flight.sent = true;
    return call;
  }

  // The courier's turn: some of the flights whose step is due join the next batch.
  std::vector<AuditedCall> DueFlightCalls() {
    std::vector<AuditedCall> calls;
    const size_t most = quiescing_ ? kMaxBatch : kMaxBatch / 2;
    for (auto& [id, flight] : flights_) {
      if (calls.size() == most) break;
      if (flight.sent) continue;
      if (!quiescing_ && (flight.due > step_ || !Percent(rng_, 70))) continue;
      batch_transfer_ids_.insert(flight.id);
      calls.push_back(FlightCall(id, flight));
    }
    return calls;
  }

  // Fault-free batches of flight steps only, until no flight is left.
  std::string CarryFlights() {
    quiescing_ = true;
    for (int round = 0; round < kQuiesceRounds && !flights_.empty(); ++round) {
      std::string failure = Step();
      if (failure.empty()) failure = Drain();
      if (failure.empty()) failure = TakeTransferViolation();
      if (!failure.empty()) return failure;
    }
    quiescing_ = false;
    if (!flights_.empty()) {
      return absl::StrCat(flights_.size(), " transfers still carried after ", kQuiesceRounds,
                          " fault-free batches (e.g. ", flights_.begin()->second.id, ")");
    }
    return "";
  }

  // The end of a run: fault-free batches carry every transfer to its end; then none may be left
  // pending in the store with nobody carrying it.
  std::string Quiesce() {
    std::string failure = CarryFlights();
    if (!failure.empty()) return failure;
    // A transfer pending with nobody carrying it fails the check below (CheckQuiescent).
    result_.transfers_stuck += static_cast<int64_t>(store_.pending().size());
    failure = transfer_auditor_.CheckQuiescent(store_);
    if (failure.empty() && core_->pending_transfer_count() != 0) {
      failure = absl::StrCat("quiescent, yet the core holds ", core_->pending_transfer_count(),
                             " pending transfers");
    }
    return failure;
  }

  // Shard::Stop: the pipeline writes and answers every sealed batch (in groups, faults and all),
  // then the shard is rebuilt.
  std::string Restart() {
    std::string failure = Drain();
    if (!failure.empty()) return failure;
    // A clean stop applies everything and checkpoints (RocksDbStore's destructor).
    store_.ApplyAll();
    store_.Checkpoint();
    // A failed sync no write repaired is still in the log in no known form: the next open
    // decides it, as after a crash.
    Reopen();
    RebuildCore();
    ++result_.restarts;
    Trace({.kind = TraceEvent::Kind::kRestart});
    return "";
  }

  // The process dies: what is in flight is never answered, and the group the journal thread was
  // writing may have reached the disk. The shard is rebuilt from the store.
  std::string Crash() {
    if (!started_.empty() && !recovery_pending_) {
      // Writes in flight were sent: to the cluster, a leader lost with them, whose next leader
      // commits a prefix of them (or none).
      const size_t count = started_.front();
      started_.pop_front();
      const std::vector<const BatchWrite*> writes = WritesOf(0, count);
      if (writes.empty()) {
        // Nothing of its own was sent: the writes behind it are the crash's to decide.
        started_.clear();
      } else {
        store_.PlanWrite({.write = WriteFault::kLeadershipLost});
        (void)store_.WriteGroup(writes);
        Trace({.kind = TraceEvent::Kind::kWrite,
               .note = "crash with writes in flight, the first ",
               .batch = in_flight_.front().batch,
               .count = count,
               .plan = {.write = WriteFault::kLeadershipLost},
               .write_called = true});
        std::string failure = auditor_.GroupWritten(count, store_.write_facts());
        if (failure.empty()) failure = FailStartedBehind(count);
        if (!failure.empty()) return failure;
      }
    } else if (!in_flight_.empty() && !recovery_pending_ && Percent(rng_, 50)) {
      size_t count = GroupSize();
      const std::vector<const BatchWrite*> writes = WritesOf(0, count);
      // Written, never synced nor acknowledged: to the auditor, a failed sync, which the
      // restart finds whole or torn. (A group with nothing to write leaves nothing behind.)
      store_.PlanWrite({.write = WriteFault::kSyncFails});
      if (writes.empty()) count = 0;
      if (!writes.empty()) (void)store_.WriteGroup(writes);
      Trace({.kind = TraceEvent::Kind::kWrite,
             .note = "crash during a ",
             .batch = in_flight_.front().batch,
             .count = count,
             .plan = {.write = WriteFault::kSyncFails},
             .write_called = !writes.empty()});
      std::string failure = count == 0 ? "" : auditor_.GroupWritten(count, store_.write_facts());
      if (!failure.empty()) return failure;
    }
    auditor_.Crashed();
    in_flight_.clear();
    started_.clear();
    recovery_pending_ = false;
    Reopen();
    RebuildCore();
    ++result_.crashes;
    Trace({.kind = TraceEvent::Kind::kCrash});
    return "";
  }

  // The store opens again after a stop: the auditor learns what its log kept.
  void Reopen() {
    demoted_ = false;
    const SimLogRecovery recovery = store_.Reopen();
    auditor_.Reopened(recovery.kept_entries);
    if (recovery.undecided_entries > 1) {
      ++result_.several_undecided;
      if (recovery.kept_entries > 1) ++result_.several_kept;
    }
    if (recovery.had_failed_entry) {
      Trace({.kind = TraceEvent::Kind::kReopen,
             .note_of_log =
                 recovery.leadership_lost && recovery.undecided_entries > 1
                     ? absl::StrCat("has the first ", recovery.kept_entries, " of the ",
                                    recovery.undecided_entries,
                                    " entries in flight at the loss of leadership: the next "
                                    "leader committed those")
                 : recovery.leadership_lost
                     ? (recovery.kept ? "has the entry in flight at the loss of leadership: the "
                                        "next leader committed it"
                                      : "lacks the entry in flight at the loss of leadership: the "
                                        "next leader did not commit it")
                 : recovery.kept
                     ? "kept the entry of the failed sync whole"
                     : absl::StrCat("dropped the entry of the failed write as a torn tail (",
                                    recovery.torn_bytes, " bytes)")});
    }
  }

  std::string Drain() {
    while (!in_flight_.empty()) {
      std::string failure = WriteOldest(GroupSize(), /*deciding=*/false);
      if (!failure.empty()) return failure;
    }
    return auditor_.CheckAllReleased();
  }

  std::string Step() {
    const uint64_t restart_roll = Uniform(rng_, 100);
    if (!quiescing_ && restart_roll < 2) return Restart();
    if (!quiescing_ && restart_roll < 3) return Crash();
    // The store's applier runs behind the log at its own pace: often not at all between two
    // batches, so that decisions look up records only the log has.
    if (quiescing_ || Percent(rng_, 40)) {
      store_.ApplyEntries(quiescing_ ? store_.unapplied_entries()
                                     : Uniform(rng_, store_.unapplied_entries() + 1));
    }
    // A checkpoint, as the applier takes one when a log segment fills: the idempotency records
    // held in memory reach the tables.
    if (!quiescing_ && Percent(rng_, 5)) {
      ++result_.checkpoints;
      store_.Checkpoint();
    }
    // A backup while the applier lags: its tables and the log after them restore to exactly
    // what the log holds now (issue 31, item 6).
    if (!quiescing_ && Percent(rng_, 3)) {
      ++result_.backups;
      if (std::string differs = store_.CheckBackup(store_.TakeBackup()); !differs.empty()) {
        return "a backup restores to a state the log never held: " + differs;
      }
    }
    std::string note = AdvanceClock();
    LookupPlan lookups;
    if (Percent(rng_, 15)) lookups.fail_percent = Percent(rng_, 70) ? 30 : 100;
    if (Percent(rng_, 50)) lookups.memory_miss_percent = Percent(rng_, 50) ? 20 : 100;
    if (quiescing_) lookups = {};
    store_.PlanLookups(lookups);

    batch_transfer_ids_.clear();
    std::vector<AuditedCall> steps = DueFlightCalls();
    // Sometimes a batch the size of an Apply call's part, which the shard takes whole however
    // far past max_batch it goes: many operations on few accounts, ids reused within it.
    const size_t most_calls =
        Percent(rng_, 5) ? kApplyPartMax - steps.size() : kMaxBatch - steps.size();
    const size_t random_calls = quiescing_ ? 0 : 1 + Uniform(rng_, most_calls);
    const size_t size = steps.size() + random_calls;
    if (size == 0) return "";
    // Rarely, the shutdown grace runs out part way through a batch; a restart follows.
    const size_t abandon_from = !quiescing_ && Percent(rng_, 2) ? Uniform(rng_, size) : size;
    const uint64_t id = auditor_.BeginBatch();
    Calls calls = std::make_shared<std::vector<AuditedCall>>();
    calls->reserve(size);
    for (size_t i = 0; i < random_calls; ++i) calls->push_back(NextCall(false));
    for (AuditedCall& step : steps) {
      calls->insert(calls->begin() + static_cast<std::ptrdiff_t>(Uniform(rng_, calls->size() + 1)),
                    std::move(step));
    }
    for (size_t i = abandon_from; i < size; ++i) (*calls)[i].abandoned = true;
    auto completions = std::make_unique<std::vector<SimCompletion>>();
    completions->reserve(size);
    std::vector<Message>& batch = core_->batch();
    for (size_t i = 0; i < size; ++i) {
      const AuditedCall& call = (*calls)[i];
      completions->emplace_back(this, id, i, &(*calls)[i]);
      batch.push_back(MessageFor(call, &completions->back()));
    }

    // An inline sender may not wait for the disk: when Prefetch needs it, the shard thread
    // prefetches again, and the journal thread may finish (or fail) a write in between.
    if (Percent(rng_, 50)) {
      const int failures_before = store_.lookup_failures();
      if (!core_->Prefetch(/*may_block=*/false, finished_through_)) {
        store_.ForgetLookupFailures(failures_before);
        ++result_.prefetch_retries;
        if (!in_flight_.empty() && Percent(rng_, 50)) {
          std::string failure = JournalTurn(/*deciding=*/false);
          if (!failure.empty()) return failure;
        }
        LEDGER_CHECK(core_->Prefetch(/*may_block=*/true, finished_through_));
      }
    } else {
      LEDGER_CHECK(core_->Prefetch(/*may_block=*/true, finished_through_));
    }
    auditor_.Prefetched();
    const absl::Time batch_time = clock_;  // The core reads the clock once, in BeginBatch.
    core_->BeginBatch();
    for (size_t i = 0; !core_->AllDecided(); ++i) {
      // The journal thread writes while the shard decides; a failure is recovered after Seal.
      if (!in_flight_.empty() && !recovery_pending_ && Percent(rng_, 3)) {
        ++result_.writes_while_deciding;
        std::string failure = JournalTurn(/*deciding=*/true);
        if (!failure.empty()) return failure;
      }
      core_->DecideNext(i >= abandon_from);
    }
    SealResult sealed = core_->Seal(finished_through_);
    LEDGER_CHECK(core_->batch().empty());
    const bool is_sealed = sealed.to_write != nullptr;
    LEDGER_CHECK_EQ(sealed.completed_now, is_sealed ? 0 : size);
    for (size_t i = 0; i < size; ++i) {
      (*calls)[i].decided = is_sealed ? sealed.to_write->replies[i] : (*calls)[i].reply;
    }
    result_.messages += static_cast<int64_t>(size);
    result_.lookup_faults += store_.lookup_failures();
    Trace({.kind = TraceEvent::Kind::kBatch,
           .note = std::move(note),
           .batch = id,
           .sequence = is_sealed ? sealed.to_write->sequence : 0,
           .time = batch_time,
           .lookups = lookups,
           .lookup_failures = store_.lookup_failures(),
           .calls = calls});
    std::string failure = auditor_.Decide(id, *calls, batch_time, store_.lookup_failures(),
                                          is_sealed, is_sealed && !sealed.to_write->write.empty());
    if (failure.empty()) failure = auditor_.TakeViolation();
    for (size_t i = 0; failure.empty() && i < size; ++i) {
      if ((*calls)[i].op >= Op::kTransfer) failure = transfer_auditor_.CheckDecided((*calls)[i]);
    }
    if (failure.empty()) failure = TakeTransferViolation();
    if (!failure.empty()) return failure;
    if (is_sealed) {
      if (options_.pipeline_bug == PipelineBugForTesting::kReleaseBeforeWrite &&
          Percent(rng_, 20)) {
        sealed.to_write->CompleteAll();
      }
      in_flight_.push_back({.batch = id,
                            .sealed = std::move(sealed.to_write),
                            .calls = std::move(calls),
                            .completions = std::move(completions)});
      result_.max_in_flight =
          std::max(result_.max_in_flight, static_cast<int64_t>(in_flight_.size()));
    }
    // The shard takes back a failed write before it decides anything else (Submit refused).
    if (recovery_pending_) failure = Recover();
    if (failure.empty()) failure = auditor_.TakeViolation();
    if (!failure.empty()) return failure;
    // The journal thread's turn: the queue must not grow without bound (at the bound a write
    // ends rather than starts).
    if (!in_flight_.empty()) {
      if (in_flight_.size() >= static_cast<size_t>(options_.max_in_flight)) {
        failure = WriteOldest(GroupSize(), /*deciding=*/false);
      } else if (Percent(rng_, 45)) {
        failure = JournalTurn(/*deciding=*/false);
      }
      if (!failure.empty()) return failure;
    }
    if (demoted_) return StartAgainAsFollower();
    if (abandon_from < size) return Restart();
    return "";
  }

  // How many of the oldest in-flight batches the next write takes: usually all of them, as the
  // journal thread takes its whole queue; sometimes fewer, as when more arrive during a write.
  size_t GroupSize() {
    if (in_flight_.empty()) return 0;
    return Percent(rng_, 60) ? in_flight_.size() : 1 + Uniform(rng_, in_flight_.size());
  }

  // Writes the oldest `count` in-flight batches as one group (CommitPipeline::Run), then answers
  // them in order, or rolls back every in-flight batch. `deciding`: a batch is being decided, so
  // the rollback waits until it is sealed (Shard::RecoverFailedWrites runs between batches).
  std::string WriteOldest(size_t count, bool deciding) {
    // A group whose write has started is the next to end, whatever `count` says.
    if (!started_.empty()) {
      count = started_.front();
      started_.pop_front();
    }
    LEDGER_CHECK(count >= 1 && count <= in_flight_.size() && !recovery_pending_);
    WritePlan plan;
    const uint64_t roll = Uniform(rng_, 100);
    plan.write = roll < 84 || quiescing_ ? WriteFault::kNone
                 : roll < 91             ? WriteFault::kFail
                 : roll < 97             ? WriteFault::kSyncFails
                                         : WriteFault::kLeadershipLost;
    if (Percent(rng_, 10)) {
      plan.write_delay = absl::Seconds(static_cast<int64_t>(1 + Uniform(rng_, 30)));
    }
    store_.PlanWrite(plan);
    const std::vector<const BatchWrite*> writes = WritesOf(0, count);
    // A group of reads that only waited for earlier writes needs no write of its own.
    const bool refused = demoted_ && !writes.empty();  // The log refuses until the restart.
    const absl::Status written = writes.empty() ? absl::OkStatus() : store_.WriteGroup(writes);
    ++result_.groups;
    result_.grouped_batches += static_cast<int64_t>(count);
    if (!written.ok()) ++result_.write_faults;
    Trace({.kind = TraceEvent::Kind::kWrite,
           .note = absl::StrCat(deciding ? "while deciding: " : "",
                                refused ? "no longer leading, the log refuses: " : ""),
           .batch = in_flight_.front().batch,
           .count = count,
           .plan = refused ? WritePlan{.write = WriteFault::kFail} : plan,
           .write_called = !writes.empty()});
    std::string failure = auditor_.GroupWritten(count, store_.write_facts());
    if (!failure.empty()) return failure;
    if (!written.ok()) {
      for (size_t k = 0; k < count; ++k) in_flight_[k].sealed->failure = written;
      failure = FailStartedBehind(count);
      if (!failure.empty()) return failure;
      recovery_pending_ = true;
      demoted_ = demoted_ || plan.write == WriteFault::kLeadershipLost;
      return deciding ? "" : Recover();
    }
    std::vector<InFlight> durable;
    for (size_t k = 0; k < count; ++k) {
      durable.push_back(std::move(in_flight_.front()));
      in_flight_.pop_front();
    }
    if (options_.pipeline_bug == PipelineBugForTesting::kReleaseOutOfOrder) {
      std::reverse(durable.begin(), durable.end());
    }
    // CommitLane::OnDurable, in sequence order.
    for (InFlight& batch : durable) {
      batch.sealed->CompleteAll();
      finished_through_ = std::max(finished_through_, batch.sealed->sequence);
    }
    return auditor_.TakeViolation();
  }

  // The writes of in-flight batches [first, first + count): what their group's write stores
  // (a group of reads has none).
  std::vector<const BatchWrite*> WritesOf(size_t first, size_t count) const {
    std::vector<const BatchWrite*> writes;
    for (size_t k = first; k < first + count; ++k) {
      if (!in_flight_[k].sealed->write.empty()) writes.push_back(&in_flight_[k].sealed->write);
    }
    return writes;
  }

  // CommitPipeline::Finish after a failed write: every write started behind it (the oldest
  // `failed` in-flight batches were the failed one's) fails too (LedgerStore::StartGroupWrite),
  // sent with it or never, and each ends, in order, before the rollback.
  std::string FailStartedBehind(size_t failed) {
    size_t first = failed;
    while (!started_.empty()) {
      const size_t count = started_.front();
      started_.pop_front();
      const std::vector<const BatchWrite*> writes = WritesOf(first, count);
      // A group of reads fails too: it read what failed.
      store_.PlanWrite({});
      const absl::Status written = writes.empty()
                                       ? absl::UnavailableError("an earlier write failed")
                                       : store_.WriteGroupBehindFailure(writes);
      LEDGER_CHECK(!written.ok());
      const WriteFacts facts = writes.empty() ? WriteFacts{.write_called = false,
                                                           .write_result = WriteFault::kFail,
                                                           .repaired = false}
                                              : store_.write_facts();
      ++result_.groups;
      ++result_.groups_behind_a_failure;
      result_.grouped_batches += static_cast<int64_t>(count);
      Trace({.kind = TraceEvent::Kind::kWrite,
             .note = "started behind the failed write: ",
             .batch = in_flight_[first].batch,
             .count = count,
             .plan = {.write = facts.write_result},
             .write_called = facts.write_called});
      // GroupWritten takes the oldest sealed batches: those before these are failed now.
      std::string failure = auditor_.GroupWritten(count, facts);
      if (!failure.empty()) return failure;
      for (size_t k = first; k < first + count; ++k) in_flight_[k].sealed->failure = written;
      first += count;
    }
    return "";
  }

  // The journal thread's turn (CommitPipeline::Run). With room for another write in flight
  // (a replica's, SimOptions::writes_in_flight) and batches in none yet, it may start the next
  // group's write, whose end comes at a later turn; otherwise the oldest write ends (or, with
  // none started, the oldest batches are written at once).
  std::string JournalTurn(bool deciding) {
    size_t started_batches = 0;
    for (size_t count : started_) started_batches += count;
    const size_t waiting = in_flight_.size() - started_batches;
    if (writes_in_flight_ > 1 && waiting > 0 && started_.size() < writes_in_flight_ &&
        (started_.empty() || Percent(rng_, 50))) {
      const size_t count = Percent(rng_, 60) ? waiting : 1 + Uniform(rng_, waiting);
      started_.push_back(count);
      result_.max_writes_in_flight =
          std::max(result_.max_writes_in_flight, static_cast<int64_t>(started_.size()));
      return "";
    }
    return WriteOldest(GroupSize(), deciding);
  }

  // Shard::RecoverFailedWrites: the failed batches and every one sealed after them (the whole
  // in-flight queue, oldest first) are rolled back, then answered.
  std::string Recover() {
    LEDGER_CHECK(started_.empty());
    recovery_pending_ = false;
    std::vector<std::unique_ptr<SealedBatch>> failed;
    const absl::Status failure = in_flight_.front().sealed->failure;
    for (InFlight& batch : in_flight_) {
      if (batch.sealed->failure.ok()) batch.sealed->failure = failure;
      failed.push_back(std::move(batch.sealed));
    }
    core_->RollBack(failed);
    ++result_.rollbacks;
    result_.rolled_back_batches += static_cast<int64_t>(failed.size());
    Trace({.kind = TraceEvent::Kind::kRollBack,
           .batch = in_flight_.front().batch,
           .count = failed.size()});
    std::vector<std::vector<Reply>> rewritten;
    rewritten.reserve(failed.size());
    for (const std::unique_ptr<SealedBatch>& batch : failed) rewritten.push_back(batch->replies);
    std::string violation = auditor_.RolledBack(rewritten);
    if (!violation.empty()) return violation;
    for (std::unique_ptr<SealedBatch>& batch : failed) batch->CompleteAll();
    finished_through_ = core_->last_sealed();
    in_flight_.clear();
    return auditor_.TakeViolation();
  }

  // A replica that lost its leadership drains and starts again in the same process
  // (server/ledgerd.cc), once the batch being decided is sealed: every batch still in flight is
  // refused by its log (rolled back, outcome unknown), the store closes as on a clean stop, and
  // opens again with the entry in flight at the loss decided by the next leader. The next
  // leader's own entries are not modelled: this core is the ledger's only writer.
  std::string StartAgainAsFollower() {
    while (!in_flight_.empty()) {
      std::string failure = WriteOldest(in_flight_.size(), /*deciding=*/false);
      if (!failure.empty()) return failure;
    }
    store_.ApplyAll();
    store_.Checkpoint();
    Reopen();
    RebuildCore();
    ++result_.demotions;
    Trace({.kind = TraceEvent::Kind::kFollowerRestart});
    return "";
  }

  std::string AdvanceClock() {
    const uint64_t roll = Uniform(rng_, 100);
    if (roll < 88) {
      clock_ += absl::Seconds(static_cast<int64_t>(Uniform(rng_, 3)));
      return "";
    }
    if (roll < 98) {
      // Around the TTL: a recorded request_id expires within a second or two of here.
      const int64_t jump = absl::ToInt64Seconds(kTtl) - 3 + static_cast<int64_t>(Uniform(rng_, 7));
      clock_ += absl::Seconds(jump);
      return absl::StrCat("clock +", jump, "s; ");
    }
    clock_ -= absl::Seconds(static_cast<int64_t>(1 + Uniform(rng_, 5)));
    return "clock steps back; ";  // Wall clocks do (NTP); records must cope.
  }

  AuditedCall NextCall(bool abandoned) {
    AuditedCall call;
    call.abandoned = abandoned;
    call.caller_gone = Percent(rng_, 5);
    call.handler_throws = Percent(rng_, 1);
    if (options_.transfers && Percent(rng_, 25)) return NextTransfer(std::move(call));
    call.account_id = kAccounts[Uniform(rng_, kAccounts.size())];
    const uint64_t op_roll = Uniform(rng_, 100);
    call.op = op_roll < 40 ? Op::kDeposit : op_roll < 82 ? Op::kWithdraw : Op::kBalance;
    if (call.op == Op::kBalance) return call;
    const uint64_t amount_roll = Uniform(rng_, 100);
    if (amount_roll < 1) {
      call.amount = 0;  // The front end refuses it; the core must too, unrecorded.
    } else if (amount_roll < 4) {
      call.amount =
          std::numeric_limits<int64_t>::max() / 2 - static_cast<int64_t>(Uniform(rng_, 1000));
    } else {
      call.amount = 1 + static_cast<int64_t>(Uniform(rng_, 100));
    }
    const uint64_t id_roll = Uniform(rng_, 100);
    if (id_roll < 30) return call;
    if (id_roll < 65 || recent_.empty()) {
      call.request_id = absl::StrCat("r", next_request_++);
      RememberRequest(call);
      return call;
    }
    // Often a retry of a call whose batch is still in flight: recent ids are the likeliest.
    const RecentRequest& recent = recent_[Uniform(rng_, recent_.size())];
    call.account_id = recent.account_id;
    call.request_id = recent.request_id;
    if (id_roll < 90) {
      call.op = recent.op;  // A retry: the same call again.
      call.amount = recent.amount;
    } else if (Percent(rng_, 50)) {
      call.op = recent.op == Op::kDeposit ? Op::kWithdraw : Op::kDeposit;  // A conflicting reuse.
    } else {
      call.amount = recent.amount + 1;
    }
    return call;
  }

  // A client's Transfer: a fresh transfer_id, or one used before (a retry with the same fields,
  // or a reuse with other ones). Across the pretend shards it starts a flight.
  AuditedCall NextTransfer(AuditedCall call) {
    call.op = Op::kTransfer;
    auto pick = [this](const std::string& other, int missing_percent) {
      std::vector<const char*> choices;
      const bool missing = Percent(rng_, missing_percent);
      for (const TransferAccount& account : kTransferAccounts) {
        if ((account.initial < 0) == missing && other != account.id) choices.push_back(account.id);
      }
      return std::string(choices[Uniform(rng_, choices.size())]);
    };
    const RecentTransfer* reused = nullptr;
    if (!recent_transfers_.empty() && Percent(rng_, 30)) {
      reused = &recent_transfers_[Uniform(rng_, recent_transfers_.size())];
      // Two messages of one transfer_id in a batch are allowed on purpose: after a failed write
      // one read-back may fail and the other succeed (an abort the simulator found).
    }
    if (reused != nullptr) {
      const RecentTransfer& recent = *reused;
      call.request_id = recent.id;
      call.account_id = recent.from;
      call.counterparty = recent.to;
      call.amount = recent.amount;
      if (Percent(rng_, 25)) {
        ++result_.transfers_reusing_id;
        // Other fields: the amount, the destination, or another source of the same shard under
        // a transfer's id (which must not drop that transfer's pending record).
        const uint64_t what = Uniform(rng_, 3);
        if (what == 0) {
          call.amount += 1;
        } else if (what == 1) {
          call.counterparty = pick(call.account_id, 5);
        } else {
          call.account_id = pick(call.counterparty, 5);
        }
      }
    } else {
      call.account_id = pick("", 6);
      call.counterparty = pick(call.account_id, 8);
      call.amount = 1 + static_cast<int64_t>(Uniform(rng_, 100));
      call.request_id = absl::StrCat("x", next_transfer_++);
      RecentTransfer recent{call.request_id, call.account_id, call.counterparty, call.amount};
      if (recent_transfers_.size() < kRecentTransfersMax) {
        recent_transfers_.push_back(std::move(recent));
      } else {
        recent_transfers_[Uniform(rng_, recent_transfers_.size())] = std::move(recent);
      }
    }
    call.local_transfer = ShardOf(call.account_id) == ShardOf(call.counterparty);
    batch_transfer_ids_.insert(call.request_id);
    transfer_auditor_.Sent(call);
    if (call.local_transfer) {
      ++result_.transfers_local;
      return call;
    }
    ++result_.transfers_cross;
    call.flight = next_flight_++;
    flights_.emplace(call.flight, Flight{.id = call.request_id,
                                         .from = call.account_id,
                                         .to = call.counterparty,
                                         .amount = call.amount,
                                         .client = true,
                                         .phase = Flight::Phase::kTransfer,
                                         .sent = true});
    return call;
  }

  void RememberRequest(const AuditedCall& call) {
    RecentRequest recent{call.account_id, call.request_id, call.op, call.amount};
    if (recent_.size() < kRecentRequestsMax) {
      recent_.push_back(std::move(recent));
    } else {
      recent_[Uniform(rng_, recent_.size())] = std::move(recent);
    }
  }

  void Trace(TraceEvent event) {
    event.step = step_;

    trace_.push_back(std::move(event));
    if (trace_.size() > kTraceEvents) trace_.pop_front();
  }

  const SimOptions options_;
  std::mt19937_64 rng_;
  absl::Time clock_;
  FaultStore store_;
  Auditor auditor_;
  TransferAuditor transfer_auditor_;
  // The change stream's consumer (issue 33): it follows the log at its own pace, sometimes
  // falling behind a checkpoint (then it resyncs), and its rebuilt accounts are audited.
  std::mt19937_64 watcher_rng_;
  SimWatcher watcher_;
  std::string transfer_violation_;  // Found while releasing; taken after the step.
  std::unique_ptr<ShardCore> core_;
  // Sealed batches not yet written, oldest first, and the newest sequence answered.
  std::deque<InFlight> in_flight_;
  // The writes started and not ended (a replica's writes in flight): how many of the oldest
  // in-flight batches each holds, oldest first; and how many may be started at once.
  std::deque<size_t> started_;
  const size_t writes_in_flight_;
  uint64_t finished_through_ = 0;
  // A write failed while a batch was being decided: roll back once it is sealed.
  bool recovery_pending_ = false;
  // A failed write lost the leadership: the log refuses every write until StartAgainAsFollower,
  // at the end of the step.
  bool demoted_ = false;
  std::vector<RecentRequest> recent_;
  int64_t next_request_ = 0;
  // The simulated coordinator's flights by id (ordered: the courier's order is deterministic).
  std::map<int64_t, Flight> flights_;
  int64_t next_flight_ = 0;
  std::vector<RecentTransfer> recent_transfers_;
  int64_t next_transfer_ = 0;
  // The transfer_ids of the batch being assembled.
  std::set<std::string> batch_transfer_ids_;
  // The end of the run: fault-free batches of flight steps only.
  bool quiescing_ = false;
  int64_t step_ = 0;
  std::deque<TraceEvent> trace_;
  std::vector<std::pair<std::string, std::optional<AccountState>>> memory_;  // CheckMemory's.
  SimResult result_;
};

void SimCompletion::Complete(const Reply& reply) {
  call_->reply = reply;
  ++call_->completions;
  simulation_->OnRelease(batch_, index_, *call_, reply);
}

}  // namespace

SimResult Simulate(const SimOptions& options) { return Simulation(options).Run(); }

}  // namespace ledger::sim
