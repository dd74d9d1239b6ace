#include "shard/shard.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "shard/check.h"

namespace ledger {
namespace {

NullShardObserver null_observer;

}  // namespace

absl::Status ValidateShardOptions(const ShardOptions& options) {
  if (options.mailbox_capacity < 1 || options.mailbox_capacity > kMailboxCapacityMax) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mailbox capacity must be 1 to ", kMailboxCapacityMax, "; got ", options.mailbox_capacity));
  }
  if (options.max_batch < 1 || options.max_batch > kMaxBatchMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("max batch must be 1 to ", kMaxBatchMax, "; got ", options.max_batch));
  }
  if (options.policy.overdraft_limit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("overdraft limit must be >= 0; got ", options.policy.overdraft_limit));
  }
  if (options.debug_handler_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("debug handler delay must not be negative");
  }
  if (options.debug_handler_delay > absl::ZeroDuration() && options.inline_execution) {
    return absl::InvalidArgumentError(
        "a debug handler delay needs inline execution off: it must not sleep on a sender's thread");
  }
  if (options.store != nullptr && options.inline_execution) {
    return absl::InvalidArgumentError(
        "a durable store needs inline execution off: it must not write on a sender's thread");
  }
  if (options.idempotency_ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("idempotency TTL must be greater than zero");
  }
  return absl::OkStatus();
}

namespace {

ShardCoreOptions CoreOptions(const ShardOptions& options, ShardObserver* observer) {
  return ShardCoreOptions{.index = options.index,
                          .max_batch = options.max_batch,
                          .policy = options.policy,
                          .observer = observer,
                          .store = options.store,
                          .idempotency_ttl = options.idempotency_ttl,
                          .clock = options.clock,
                          .steady_clock = nullptr,
                          .debug_handler_delay = options.debug_handler_delay,
                          .test_before_handle = options.test_before_handle};
}

}  // namespace

Shard::Shard(ShardOptions options)
    : options_(std::move(options)),
      observer_(options_.observer != nullptr ? options_.observer : &null_observer),
      mailbox_(options_.mailbox_capacity),
      core_(CoreOptions(options_, observer_)) {
  LEDGER_CHECK(ValidateShardOptions(options_).ok());
}

void Shard::LoadAccount(std::string account_id, AccountState state) {
  LEDGER_CHECK(!started_);
  // Before Start nobody else can hold the token; taking it says so to the thread-safety analysis.
  LEDGER_CHECK(drain_.TryAcquire());
  core_.LoadAccount(std::move(account_id), state);
  drain_.Release();
}

Shard::~Shard() {
  // Destroying a started shard without Stop would drop accepted messages unanswered.
  LEDGER_CHECK(!started_ || stopped_);
}

void Shard::Start() {
  LEDGER_CHECK(!started_);
  started_ = true;
  if (options_.inline_execution) {
    thread_ = std::thread([this] { RunHandoffLoop(); });
  } else {
    thread_ = std::thread([this] { Run(); });
  }
}

void Shard::Stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  mailbox_.Close();
  stopping_.store(true, std::memory_order_release);
  HandOffToShardThread();
  thread_.join();
  // A sender may still hold the token for messages it accepted before the close; it drains them
  // before it lets go, and whatever it leaves is taken here.
  while (drain_.IsHeld() || mailbox_.Depth() > 0) {
    if (!DrainWhileOwner(1, options_.max_batch)) std::this_thread::yield();
  }
}

SendOutcome Shard::TrySend(Message&& message) {
  LEDGER_CHECK(message.completion != nullptr);
  message.enqueued_at = SteadyClock::now();
  const SendOutcome outcome = mailbox_.TrySend(std::move(message));
  if (outcome == SendOutcome::kFull) observer_->OnShed();
  if (outcome == SendOutcome::kAccepted && options_.inline_execution &&
      DrainWhileOwner(kInlineBatchesMax, std::min(kInlineBatchMax, options_.max_batch))) {
    HandOffToShardThread();  // A backlog: the shard thread takes it from here.
  }
  return outcome;
}

// Dedicated mode: the shard thread is the only consumer and sleeps in the mailbox. It holds the
// drain token for its whole life (no sender ever takes it in this mode).
void Shard::Run() {
  LEDGER_CHECK(drain_.TryAcquire());
  while (mailbox_.WaitAndDrain(core_.batch(), options_.max_batch) > 0) {
    ProcessBatch();
  }
  drain_.Release();
}

// Inline mode: the shard thread sleeps until a sender hands it a backlog (or Stop), then drains
// until the mailbox is empty or a sender holds the token.
void Shard::RunHandoffLoop() {
  for (;;) {
    const uint32_t epoch = handoff_epoch_.load(std::memory_order_acquire);
    while (DrainWhileOwner(1, options_.max_batch)) {
    }
    if (stopping_.load(std::memory_order_acquire)) return;  // Stop drains what is left.
    handoff_epoch_.wait(epoch, std::memory_order_acquire);
  }
}

bool Shard::DrainWhileOwner(int max_batches, size_t batch_limit) {
  for (int i = 0; i < max_batches; ++i) {
    // seq_cst (inside the token): pairs with Mailbox::HeadPublished below, see there.
    if (!drain_.TryAcquire()) return false;
    if (mailbox_.TryDrain(core_.batch(), batch_limit) > 0) ProcessBatch();
    drain_.Release();
    // A message published while we held the token was left to us by its sender.
    if (!mailbox_.HeadPublished()) return false;
  }
  return true;
}

void Shard::HandOffToShardThread() {
  handoff_epoch_.fetch_add(1, std::memory_order_release);
  handoff_epoch_.notify_one();
}

void Shard::ProcessBatch() {
  core_.BeginBatch();
  // The flag is read per message: AbandonUndecided refuses every message not yet decided.
  while (!core_.AllDecided()) core_.DecideNext(abandoning_.load(std::memory_order_acquire));
  core_.CommitAndComplete();
}

}  // namespace ledger
