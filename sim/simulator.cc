#include "sim/simulator.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "shard/check.h"
#include "shard/message.h"
#include "sim/auditor.h"

namespace ledger::sim {
namespace {

// Named bounds of the workload: few accounts so that calls collide, small batches so that
// faults hit varied mixes, a short TTL so that the clock crosses it often.
constexpr std::array<const char*, 4> kAccounts = {"a0", "a1", "a2", "a3"};
constexpr size_t kMaxBatch = 12;
constexpr int64_t kOverdraftLimit = 50;
constexpr absl::Duration kTtl = absl::Seconds(60);
constexpr size_t kRecentRequestsMax = 32;
constexpr size_t kTraceEvents = 12;

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
  enum class Kind : uint8_t { kBatch, kWrite, kRollBack, kRestart };
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
};

std::string DescribeEvent(const TraceEvent& event) {
  std::string text = absl::StrCat("  step ", event.step, ": ", event.note);
  switch (event.kind) {
    case TraceEvent::Kind::kRestart:
      absl::StrAppend(&text, event.note.empty()
                                 ? "restart (sealed batches written, then rebuilt from the store)\n"
                                 : "in-flight batches never answered; rebuilt from the store\n");
      return text;
    case TraceEvent::Kind::kWrite:
      absl::StrAppend(&text, "group write of batches ", event.batch, "..",
                      event.batch + event.count - 1, ": ",
                      !event.write_called                     ? "nothing to write"
                      : event.plan.write == WriteFault::kNone ? "ok"
                      : event.plan.write == WriteFault::kFail ? "fails"
                                                              : "fails but lands",
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
        auditor_(LedgerPolicy{.overdraft_limit = kOverdraftLimit}, kTtl) {
    LEDGER_CHECK_GE(options_.max_in_flight, 1);
    RebuildCore();
  }

  SimResult Run() {
    for (int64_t step = 1; step <= options_.steps; ++step) {
      if (options_.on_step != nullptr) options_.on_step(options_.seed, step);
      result_.steps = step;
      step_ = step;
      std::string failure = Step();
      // The end: what is still in flight is written and answered, as at a stop.
      if (failure.empty() && step == options_.steps) failure = Drain();
      if (failure.empty()) failure = auditor_.CheckStore(store_);
      if (failure.empty()) failure = CheckMemory();
      if (!failure.empty()) return Fail(failure);
    }
    result_.undurable_reads = auditor_.undurable_reads();
    result_.in_flight_record_answers = auditor_.in_flight_record_answers();
    return result_;
  }

  void OnRelease(uint64_t batch, size_t index, const Reply& reply) {
    auditor_.Released(batch, index, reply);
    ++result_.outcomes[static_cast<size_t>(reply.outcome)];
    if (reply.replayed) ++result_.replays;
  }

 private:
  SimResult Fail(const std::string& failure) {
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
    core.test_before_handle = [](const Message& message) {
      if (static_cast<const SimCompletion*>(message.completion)->handler_throws()) {
        throw std::runtime_error("simulated handler fault");
      }
    };
    core.bug_for_testing = options_.core_bug;
    core.log_errors = false;
    core_ = std::make_unique<ShardCore>(std::move(core));
    for (const auto& [id, state] : store_.accounts()) core_->LoadAccount(id, state);
    finished_through_ = 0;
    auditor_.Restart();
  }

  // Shard::Stop: the pipeline writes and answers every sealed batch (in groups, faults and all),
  // then the shard is rebuilt.
  std::string Restart() {
    std::string failure = Drain();
    if (!failure.empty()) return failure;
    RebuildCore();
    ++result_.restarts;
    Trace({.kind = TraceEvent::Kind::kRestart});
    return "";
  }

  // The process dies: what is in flight is never answered, and the group the journal thread was
  // writing may have reached the disk. The shard is rebuilt from the store.
  std::string Crash() {
    if (!in_flight_.empty() && !recovery_pending_ && Percent(rng_, 50)) {
      size_t count = GroupSize();
      std::vector<const BatchWrite*> writes;
      for (size_t k = 0; k < count; ++k) {
        if (!in_flight_[k].sealed->write.empty()) writes.push_back(&in_flight_[k].sealed->write);
      }
      // Landed, never acknowledged: to the auditor, a failed write that landed. (A group with
      // nothing to write leaves nothing behind.)
      store_.PlanWrite({.write = WriteFault::kFailLanded});
      if (writes.empty()) count = 0;
      if (!writes.empty()) (void)store_.WriteGroup(writes);
      Trace({.kind = TraceEvent::Kind::kWrite,
             .note = "crash during a ",
             .batch = in_flight_.front().batch,
             .count = count,
             .plan = {.write = WriteFault::kFailLanded},
             .write_called = !writes.empty()});
      std::string failure = count == 0 ? "" : auditor_.GroupWritten(count, store_.write_facts());
      if (!failure.empty()) return failure;
    }
    auditor_.Crashed();
    in_flight_.clear();
    recovery_pending_ = false;
    RebuildCore();
    ++result_.crashes;
    Trace({.kind = TraceEvent::Kind::kRestart, .note = "crash; "});
    return "";
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
    if (restart_roll < 2) return Restart();
    if (restart_roll < 3) return Crash();
    std::string note = AdvanceClock();
    LookupPlan lookups;
    if (Percent(rng_, 15)) lookups.fail_percent = Percent(rng_, 70) ? 30 : 100;
    if (Percent(rng_, 50)) lookups.memory_miss_percent = Percent(rng_, 50) ? 20 : 100;
    store_.PlanLookups(lookups);

    const size_t size = 1 + Uniform(rng_, kMaxBatch);
    // Rarely, the shutdown grace runs out part way through a batch; a restart follows.
    const size_t abandon_from = Percent(rng_, 2) ? Uniform(rng_, size) : size;
    const uint64_t id = auditor_.BeginBatch();
    Calls calls = std::make_shared<std::vector<AuditedCall>>();
    calls->reserve(size);
    for (size_t i = 0; i < size; ++i) calls->push_back(NextCall(i >= abandon_from));
    auto completions = std::make_unique<std::vector<SimCompletion>>();
    completions->reserve(size);
    std::vector<Message>& batch = core_->batch();
    for (size_t i = 0; i < size; ++i) {
      const AuditedCall& call = (*calls)[i];
      completions->emplace_back(this, id, i, &(*calls)[i]);
      batch.push_back(Message{.op = call.op,
                              .amount = call.amount,
                              .account_id = call.account_id,
                              .completion = &completions->back(),
                              .enqueued_at = {},
                              .request_id = call.request_id});
    }

    // An inline sender may not wait for the disk: when Prefetch needs it, the shard thread
    // prefetches again, and the journal thread may finish (or fail) a write in between.
    if (Percent(rng_, 50)) {
      const int failures_before = store_.lookup_failures();
      if (!core_->Prefetch(/*may_block=*/false, finished_through_)) {
        store_.ForgetLookupFailures(failures_before);
        ++result_.prefetch_retries;
        if (!in_flight_.empty() && Percent(rng_, 50)) {
          std::string failure = WriteOldest(GroupSize(), /*deciding=*/false);
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
        std::string failure = WriteOldest(GroupSize(), /*deciding=*/true);
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
    // The journal thread's turn: the queue must not grow without bound.
    if (!in_flight_.empty() &&
        (in_flight_.size() >= static_cast<size_t>(options_.max_in_flight) || Percent(rng_, 45))) {
      failure = WriteOldest(GroupSize(), /*deciding=*/false);
      if (!failure.empty()) return failure;
    }
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
    LEDGER_CHECK(count >= 1 && count <= in_flight_.size() && !recovery_pending_);
    WritePlan plan;
    const uint64_t roll = Uniform(rng_, 100);
    plan.write = roll < 84   ? WriteFault::kNone
                 : roll < 92 ? WriteFault::kFail
                             : WriteFault::kFailLanded;
    if (Percent(rng_, 10)) {
      plan.write_delay = absl::Seconds(static_cast<int64_t>(1 + Uniform(rng_, 30)));
    }
    store_.PlanWrite(plan);
    std::vector<const BatchWrite*> writes;
    for (size_t k = 0; k < count; ++k) {
      if (!in_flight_[k].sealed->write.empty()) writes.push_back(&in_flight_[k].sealed->write);
    }
    // A group of reads that only waited for earlier writes needs no write of its own.
    const absl::Status written = writes.empty() ? absl::OkStatus() : store_.WriteGroup(writes);
    ++result_.groups;
    result_.grouped_batches += static_cast<int64_t>(count);
    if (!written.ok()) ++result_.write_faults;
    Trace({.kind = TraceEvent::Kind::kWrite,
           .note = deciding ? "while deciding: " : "",
           .batch = in_flight_.front().batch,
           .count = count,
           .plan = plan,
           .write_called = !writes.empty()});
    std::string failure = auditor_.GroupWritten(count, store_.write_facts());
    if (!failure.empty()) return failure;
    if (!written.ok()) {
      for (size_t k = 0; k < count; ++k) in_flight_[k].sealed->failure = written;
      recovery_pending_ = true;
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

  // Shard::RecoverFailedWrites: the failed batches and every one sealed after them (the whole
  // in-flight queue, oldest first) are rolled back, then answered.
  std::string Recover() {
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
  std::unique_ptr<ShardCore> core_;
  // Sealed batches not yet written, oldest first, and the newest sequence answered.
  std::deque<InFlight> in_flight_;
  uint64_t finished_through_ = 0;
  // A write failed while a batch was being decided: roll back once it is sealed.
  bool recovery_pending_ = false;
  std::vector<RecentRequest> recent_;
  int64_t next_request_ = 0;
  int64_t step_ = 0;
  std::deque<TraceEvent> trace_;
  std::vector<std::pair<std::string, std::optional<AccountState>>> memory_;  // CheckMemory's.
  SimResult result_;
};

void SimCompletion::Complete(const Reply& reply) {
  call_->reply = reply;
  ++call_->completions;
  simulation_->OnRelease(batch_, index_, reply);
}

}  // namespace

SimResult Simulate(const SimOptions& options) { return Simulation(options).Run(); }

}  // namespace ledger::sim
