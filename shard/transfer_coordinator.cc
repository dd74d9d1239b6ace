#include "shard/transfer_coordinator.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/time/clock.h"
#include "base/check.h"
#include "base/steady_wait.h"

namespace ledger {

absl::string_view TransferStepName(TransferStep step) {
  switch (step) {
    case TransferStep::kDebited:
      return "debited";
    case TransferStep::kCredited:
      return "credited";
    case TransferStep::kSettled:
      return "settled";
  }
  return "unknown";
}

// One transfer on its way: owns the strings its messages view, and is the completion of each of
// its steps in turn. Touched by one thread at a time: the thread that answers its current step,
// then (through the coordinator's lock) the courier that sends the next.
class TransferCoordinator::Flight final : public Completion {
 public:
  enum class Phase : uint8_t { kTransfer, kCredit, kSettle };

  Flight(TransferCoordinator* owner, std::string transfer_id, std::string from, std::string to,
         int64_t amount, Completion* client)
      : owner_(owner),
        transfer_id(std::move(transfer_id)),
        from(std::move(from)),
        to(std::move(to)),
        amount(amount),
        client(client) {}

  // Only the client's own first step may be skipped when the caller has gone: once debited, the
  // transfer must finish whether or not anyone waits for it.
  bool CallerGone() const override {
    return phase == Phase::kTransfer && client != nullptr && client->CallerGone();
  }
  void Complete(const Reply& reply) override { owner_->OnStepDone(this, reply); }

  // The message of the current phase, to the shard that owns its account.
  Message NextMessage() const {
    Message message{.account_id = from, .completion = const_cast<Flight*>(this)};
    switch (phase) {
      case Phase::kTransfer:
        message.kind = TransferCall{.transfer_id = transfer_id,
                                    .to = to,
                                    .amount = amount,
                                    .local = from_shard == to_shard,
                                    .resume_only = resume_only};
        break;
      case Phase::kCredit:
        message.account_id = to;
        message.kind = CreditStep{.transfer_id = transfer_id, .from = from, .amount = amount};
        break;
      case Phase::kSettle:
        message.kind = SettleStep{.transfer_id = transfer_id,
                                  .to = to,
                                  .amount = amount,
                                  .credit_outcome = credit_outcome,
                                  .credit_balance = credit_balance,
                                  .credited_at = credited_at};
        break;
    }
    return message;
  }
  int32_t NextShard() const { return phase == Phase::kCredit ? to_shard : from_shard; }

  TransferCoordinator* const owner_;
  const std::string transfer_id;
  const std::string from;
  const std::string to;
  const int64_t amount;
  Completion* client;  // Null for a resumed transfer.
  int32_t from_shard = 0;
  int32_t to_shard = 0;
  Phase phase = Phase::kTransfer;
  int64_t from_balance = 0;  // After the debit.
  Outcome credit_outcome = Outcome::kOk;
  int64_t credit_balance = 0;
  absl::Time credited_at;
  absl::Duration retry_delay;
  // The client was answered that its debit's write failed: the flight only asks whether that
  // write landed after all, and carries the transfer on if so.
  bool resume_only = false;
};

TransferCoordinator::TransferCoordinator(TransferCoordinatorOptions options)
    : TransferCoordinator(std::move(options), TransferTestHooks{}) {}

TransferCoordinator::TransferCoordinator(TransferCoordinatorOptions options,
                                         TransferTestHooks hooks)
    : options_(std::move(options)), hooks_(std::move(hooks)) {
  LEDGER_CHECK(options_.send && options_.shard_for);
  LEDGER_CHECK(options_.retry_delay > absl::ZeroDuration());
  LEDGER_CHECK(options_.max_retry_delay >= options_.retry_delay);
}

TransferCoordinator::~TransferCoordinator() { Stop(); }

void TransferCoordinator::Start() {
  LEDGER_CHECK(!started_);
  started_ = true;
  courier_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "ledger-courier");
    RunCourier();
  });
}

void TransferCoordinator::Stop() {
  std::vector<Flight*> undelivered;
  {
    MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    undelivered.assign(ready_.begin(), ready_.end());
    ready_.clear();
    for (const Delayed& delayed : delayed_) undelivered.push_back(delayed.flight);
    delayed_.clear();
    work_.notify_one();
  }
  if (courier_.joinable()) courier_.join();
  for (Flight* flight : undelivered) Park(flight);
}

bool TransferCoordinator::Drain(absl::Duration timeout) const {
  if (!started_) return active_.load(std::memory_order_acquire) == 0;  // Nothing would move.
  const SteadyDeadline deadline(timeout);
  while (active_.load(std::memory_order_acquire) > 0) {
    if (deadline.Passed()) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

SendOutcome TransferCoordinator::Submit(absl::string_view transfer_id, absl::string_view from,
                                        absl::string_view to, int64_t amount, Completion* client) {
  std::optional<Message> message = Prepare(transfer_id, from, to, amount, client);
  if (!message.has_value()) return SendOutcome::kClosed;
  const Message unsent = *message;
  // The shard owns the flight once it accepts it (and may finish it before TrySend returns).
  const SendOutcome outcome = options_.send(options_.shard_for(from), std::move(*message));
  if (outcome != SendOutcome::kAccepted) Unsent(unsent);
  return outcome;
}

std::optional<Message> TransferCoordinator::Prepare(absl::string_view transfer_id,
                                                    absl::string_view from, absl::string_view to,
                                                    int64_t amount, Completion* client) {
  if (!accepting_.load(std::memory_order_acquire)) return std::nullopt;
  auto* flight = new Flight(this, std::string(transfer_id), std::string(from), std::string(to),
                            amount, client);
  flight->from_shard = options_.shard_for(from);
  flight->to_shard = options_.shard_for(to);
  flight->retry_delay = options_.retry_delay;
  active_.fetch_add(1, std::memory_order_relaxed);
  return flight->NextMessage();
}

void TransferCoordinator::Unsent(const Message& message) {
  delete static_cast<Flight*>(message.completion);
  active_.fetch_sub(1, std::memory_order_relaxed);
}

void TransferCoordinator::Resume(std::string transfer_id, const TransferRecord& record) {
  LEDGER_CHECK(record.state == TransferState::kPending);
  auto* flight =
      new Flight(this, std::move(transfer_id), record.from, record.to, record.amount, nullptr);
  flight->from_shard = options_.shard_for(record.from);
  flight->to_shard = options_.shard_for(record.to);
  flight->retry_delay = options_.retry_delay;
  flight->phase = Flight::Phase::kCredit;
  flight->from_balance = record.from_balance;
  active_.fetch_add(1, std::memory_order_relaxed);
  MoneyLeft(record.amount);
  Enqueue(flight, /*retry=*/false);
}

namespace {

// Outcomes after which a step is sent again: the shard could not say (a failed write or lookup,
// a handler fault); the step itself is idempotent.
bool Retryable(Outcome outcome) {
  return outcome == Outcome::kStorageFailed || outcome == Outcome::kInternal;
}

}  // namespace

void TransferCoordinator::OnStepDone(Flight* flight, const Reply& reply) {
  if (reply.outcome == Outcome::kShuttingDown && flight->phase != Flight::Phase::kTransfer) {
    Park(flight);  // The shard stopped before deciding it; the store still has it pending.
    return;
  }
  switch (flight->phase) {
    case Flight::Phase::kTransfer:
      if (reply.outcome == Outcome::kStorageFailed && flight->from_shard != flight->to_shard) {
        // The debit's write failed, yet may have reached the disk: the caller hears "outcome
        // unknown" now, and the flight asks the source again until it can say. Should the
        // debit be there, the transfer goes on without waiting for a retry or a restart.
        if (flight->client != nullptr) flight->client->Complete(reply);
        flight->client = nullptr;
        flight->resume_only = true;
        Enqueue(flight, /*retry=*/true);
        return;
      }
      if (flight->resume_only && Retryable(reply.outcome)) {
        // The ask itself failed (its handler, or the read-back): the debit may still be there.
        Enqueue(flight, /*retry=*/true);
        return;
      }
      if (reply.outcome != Outcome::kOk || !reply.transfer().debited) {
        // Decided on one shard (both sides, a refusal, a replay), never applied, or (asked
        // after a failed debit) nothing to carry on.
        Finish(flight, reply);
        return;
      }
      MoneyLeft(flight->amount);
      if (hooks_.after_step) hooks_.after_step(TransferStep::kDebited, flight->transfer_id);
      flight->from_balance = reply.balance;
      flight->phase = Flight::Phase::kCredit;
      Enqueue(flight, /*retry=*/false);
      return;
    case Flight::Phase::kCredit:
      if (Retryable(reply.outcome)) {
        Enqueue(flight, /*retry=*/true);
        return;
      }
      LEDGER_CHECK(
          reply.outcome == Outcome::kOk || reply.outcome == Outcome::kCounterpartyNotFound ||
          reply.outcome == Outcome::kOverflow || reply.outcome == Outcome::kTransferIdReused);
      if (reply.outcome == Outcome::kOk) {
        // The money reached the destination.
        MoneyLanded(flight->amount);
      }
      if (hooks_.after_step) hooks_.after_step(TransferStep::kCredited, flight->transfer_id);
      flight->credit_outcome = reply.outcome;
      flight->credit_balance = reply.transfer().to_balance;
      flight->credited_at = reply.transfer().credited_at;
      flight->phase = Flight::Phase::kSettle;
      flight->retry_delay = options_.retry_delay;
      Enqueue(flight, /*retry=*/false);
      return;
    case Flight::Phase::kSettle:
      if (Retryable(reply.outcome)) {
        Enqueue(flight, /*retry=*/true);
        return;
      }
      if (flight->credit_outcome != Outcome::kOk) {
        // Refunded to the source.
        MoneyLanded(flight->amount);
      }
      if (hooks_.after_step) hooks_.after_step(TransferStep::kSettled, flight->transfer_id);
      // The caller's answer is the settle's, with the balances of both steps; replayed only when
      // the whole transfer was (a settle replayed after a failed write is still this call's).
      Reply answer = reply;
      answer.replayed = false;
      answer.balance = flight->from_balance;
      answer.detail = TransferReply{.to_balance = flight->credit_balance};
      Finish(flight, answer);
      return;
  }
}

void TransferCoordinator::MoneyLeft(int64_t amount) {
  in_flight_count_.fetch_add(1, std::memory_order_relaxed);
  in_flight_amount_.fetch_add(amount, std::memory_order_relaxed);
}

void TransferCoordinator::MoneyLanded(int64_t amount) {
  in_flight_count_.fetch_sub(1, std::memory_order_relaxed);
  in_flight_amount_.fetch_sub(amount, std::memory_order_relaxed);
}

void TransferCoordinator::Finish(Flight* flight, const Reply& reply) {
  if (flight->client != nullptr) flight->client->Complete(reply);
  delete flight;
  active_.fetch_sub(1, std::memory_order_relaxed);
}

void TransferCoordinator::Park(Flight* flight) {
  Finish(flight, Reply{.outcome = Outcome::kTransferPending, .balance = flight->from_balance});
}

void TransferCoordinator::Enqueue(Flight* flight, bool retry) {
  {
    MutexLock lock(&mu_);
    if (!stopping_) {
      if (retry) {
        step_retries_.fetch_add(1, std::memory_order_relaxed);
        delayed_.push_back(
            {SteadyClock::now() + absl::ToChronoNanoseconds(flight->retry_delay), flight});
        flight->retry_delay = std::min(flight->retry_delay * 2, options_.max_retry_delay);
      } else {
        ready_.push_back(flight);
      }
      work_.notify_one();
      return;
    }
  }
  Park(flight);
}

void TransferCoordinator::Deliver(Flight* flight) {
  const int32_t shard = flight->NextShard();
  switch (options_.send(shard, flight->NextMessage())) {
    case SendOutcome::kAccepted:
      return;  // The shard answers it; `flight` may be gone already.
    case SendOutcome::kFull:
      Enqueue(flight, /*retry=*/true);  // Never dropped, never waited for: sent again later.
      return;
    case SendOutcome::kClosed:
      Park(flight);
      return;
  }
}

void TransferCoordinator::RunCourier() {
  std::vector<Flight*> due;
  for (;;) {
    {
      MutexLock lock(&mu_);
      for (;;) {
        if (stopping_) return;
        const SteadyClock::time_point now = SteadyClock::now();
        due.assign(ready_.begin(), ready_.end());
        ready_.clear();
        SteadyClock::time_point next = SteadyClock::time_point::max();
        auto keep = delayed_.begin();
        for (const Delayed& delayed : delayed_) {
          if (delayed.due <= now) {
            due.push_back(delayed.flight);
          } else {
            next = std::min(next, delayed.due);
            *keep++ = delayed;
          }
        }
        delayed_.erase(keep, delayed_.end());
        if (!due.empty()) break;
        if (next == SteadyClock::time_point::max()) {
          mu_.Wait(work_);
        } else {
          mu_.WaitUntil(work_, next);
        }
      }
    }
    for (Flight* flight : due) Deliver(flight);
    due.clear();
  }
}

}  // namespace ledger
