#include "sim/simulator.h"

#include <array>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
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
constexpr size_t kTraceSteps = 6;

// A uniform draw in [0, n): modulo of the generator's fixed output, so the same on every
// standard library (std::uniform_int_distribution is not specified bit for bit).
uint64_t Uniform(std::mt19937_64& rng, uint64_t n) { return rng() % n; }
bool Percent(std::mt19937_64& rng, uint64_t percent) { return Uniform(rng, 100) < percent; }

class SimCompletion final : public Completion {
 public:
  SimCompletion(bool gone, bool handler_throws) : gone_(gone), handler_throws_(handler_throws) {}
  bool handler_throws() const { return handler_throws_; }
  bool CallerGone() const override { return gone_; }
  void Complete(const Reply& reply) override {
    reply_ = reply;
    ++completions_;
  }
  const Reply& reply() const { return reply_; }
  int completions() const { return completions_; }

 private:
  bool gone_;
  bool handler_throws_;
  Reply reply_;
  int completions_ = 0;
};

struct RecentRequest {
  std::string account_id;
  std::string request_id;
  Op op;
  int64_t amount;
};

struct StepRecord {
  int64_t step = 0;
  std::string event;  // What happened besides the batch (clock jump, restart).
  absl::Time batch_time;
  FaultPlan plan;
  BatchFacts facts;
  std::vector<AuditedCall> calls;
};

std::string DescribeStep(const StepRecord& record) {
  std::string text = absl::StrCat("  step ", record.step, ": ", record.event);
  if (record.calls.empty()) return text;
  absl::StrAppend(&text, "batch at ",
                  absl::FormatTime("%H:%M:%S", record.batch_time, absl::UTCTimeZone()));
  absl::StrAppend(&text, ", plan: write ",
                  record.plan.write == WriteFault::kNone   ? "ok"
                  : record.plan.write == WriteFault::kFail ? "fails"
                                                           : "fails but lands",
                  ", lookups fail ", record.plan.lookup_fail_percent, "%");
  absl::StrAppend(&text, "; store: ", record.facts.write_called ? "wrote" : "no write", ", ",
                  record.facts.lookup_failures, " failed lookup(s)\n");
  for (const AuditedCall& call : record.calls) {
    absl::StrAppend(&text, "    ", DescribeCall(call), "\n");
  }
  return text;
}

class Simulation {
 public:
  explicit Simulation(const SimOptions& options)
      : options_(options),
        rng_(options.seed),
        clock_(absl::FromUnixSeconds(1767225600)),  // 2026-01-01, any fixed instant will do.
        store_(&clock_, &rng_, options.store_bug),
        auditor_(LedgerPolicy{.overdraft_limit = kOverdraftLimit}, kTtl) {
    RebuildCore();
  }

  SimResult Run() {
    for (int64_t step = 1; step <= options_.steps; ++step) {
      if (options_.on_step != nullptr) options_.on_step(options_.seed, step);
      result_.steps = step;
      std::string failure = Step(step);
      if (failure.empty()) failure = auditor_.CheckStore(store_);
      if (!failure.empty()) {
        result_.ok = false;
        result_.failure =
            absl::StrCat("seed ", options_.seed, " step ", step, ": ", failure, "\nlast steps:\n");
        for (const StepRecord& record : trace_) {
          absl::StrAppend(&result_.failure, DescribeStep(record));
        }
        return result_;
      }
    }
    return result_;
  }

 private:
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
    auditor_.Restart();
  }

  std::string Step(int64_t step) {
    StepRecord record;
    record.step = step;
    if (Percent(rng_, 2)) {
      RebuildCore();
      ++result_.restarts;
      record.event = "restart (rebuilt from the store)";
      Remember(std::move(record));
      return "";
    }
    AdvanceClock(record);
    PlanFaults(record.plan);

    const size_t size = 1 + Uniform(rng_, kMaxBatch);
    // Rarely, the shutdown grace runs out part way through a batch; a restart follows.
    const size_t abandon_from = Percent(rng_, 2) ? Uniform(rng_, size) : size;
    record.calls.reserve(size);
    for (size_t i = 0; i < size; ++i) record.calls.push_back(NextCall(i >= abandon_from));

    std::vector<SimCompletion> completions;
    completions.reserve(size);
    std::vector<Message>& batch = core_->batch();
    for (const AuditedCall& call : record.calls) {
      completions.emplace_back(call.caller_gone, call.handler_throws);
      batch.push_back(Message{.op = call.op,
                              .amount = call.amount,
                              .account_id = call.account_id,
                              .completion = &completions.back(),
                              .enqueued_at = {},
                              .request_id = call.request_id});
    }
    store_.BeginBatch(record.plan);
    record.batch_time = clock_;  // The core reads the clock once, in BeginBatch.
    LEDGER_CHECK(core_->Prefetch(/*may_block=*/true, core_->last_sealed()));
    core_->BeginBatch();
    for (size_t i = 0; !core_->AllDecided(); ++i) core_->DecideNext(i >= abandon_from);
    core_->CommitAndComplete();
    LEDGER_CHECK(core_->batch().empty());
    for (size_t i = 0; i < size; ++i) {
      record.calls[i].reply = completions[i].reply();
      record.calls[i].completions = completions[i].completions();
      ++result_.outcomes[static_cast<size_t>(completions[i].reply().outcome)];
      if (completions[i].reply().replayed) ++result_.replays;
    }
    record.facts = store_.facts();
    result_.messages += static_cast<int64_t>(size);
    if (record.facts.write_called && record.facts.write_result != WriteFault::kNone) {
      ++result_.write_faults;
    }
    result_.lookup_faults += record.facts.lookup_failures;
    std::string failure = auditor_.CheckBatch(record.calls, record.batch_time, record.facts);
    const bool abandoned = abandon_from < size;
    Remember(std::move(record));
    if (!failure.empty()) return failure;
    if (abandoned) {
      RebuildCore();
      ++result_.restarts;
    }
    return "";
  }

  void AdvanceClock(StepRecord& record) {
    const uint64_t roll = Uniform(rng_, 100);
    if (roll < 88) {
      clock_ += absl::Seconds(static_cast<int64_t>(Uniform(rng_, 3)));
    } else if (roll < 98) {
      // Around the TTL: a recorded request_id expires within a second or two of here.
      const int64_t jump = absl::ToInt64Seconds(kTtl) - 3 + static_cast<int64_t>(Uniform(rng_, 7));
      clock_ += absl::Seconds(jump);
      record.event = absl::StrCat("clock +", jump, "s; ");
    } else {
      clock_ -= absl::Seconds(static_cast<int64_t>(1 + Uniform(rng_, 5)));
      record.event = "clock steps back; ";  // Wall clocks do (NTP); records must cope.
    }
  }

  void PlanFaults(FaultPlan& plan) {
    const uint64_t roll = Uniform(rng_, 100);
    if (roll < 65) {
      plan = {};
    } else if (roll < 75) {
      plan.write = WriteFault::kFail;
    } else if (roll < 85) {
      plan.write = WriteFault::kFailLanded;
    } else {
      plan.lookup_fail_percent = Percent(rng_, 70) ? 30 : 100;
    }
    if (Percent(rng_, 10)) {
      plan.write_delay = absl::Seconds(static_cast<int64_t>(1 + Uniform(rng_, 30)));
    }
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

  void Remember(StepRecord record) {
    trace_.push_back(std::move(record));
    if (trace_.size() > kTraceSteps) trace_.pop_front();
  }

  const SimOptions options_;
  std::mt19937_64 rng_;
  absl::Time clock_;
  FaultStore store_;
  Auditor auditor_;
  std::unique_ptr<ShardCore> core_;
  std::vector<RecentRequest> recent_;
  int64_t next_request_ = 0;
  std::deque<StepRecord> trace_;
  SimResult result_;
};

}  // namespace

SimResult Simulate(const SimOptions& options) { return Simulation(options).Run(); }

}  // namespace ledger::sim
