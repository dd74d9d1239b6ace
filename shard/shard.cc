#include "shard/shard.h"

#include <algorithm>
#include <cassert>
#include <exception>
#include <iostream>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

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
  return absl::OkStatus();
}

Shard::Shard(ShardOptions options)
    : options_(std::move(options)),
      observer_(options_.observer != nullptr ? options_.observer : &null_observer),
      mailbox_(options_.mailbox_capacity) {
  assert(ValidateShardOptions(options_).ok());
  batch_.reserve(options_.max_batch);
  replies_.reserve(options_.max_batch);
}

Shard::~Shard() {
  // Destroying a started shard without Stop would drop accepted messages unanswered.
  assert(!started_ || stopped_);
}

void Shard::Start() {
  assert(!started_);
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
  while (draining_.load(std::memory_order_acquire) || mailbox_.Depth() > 0) {
    if (!DrainWhileOwner(1, options_.max_batch)) std::this_thread::yield();
  }
}

SendOutcome Shard::TrySend(Message&& message) {
  assert(message.completion != nullptr);
  message.enqueued_at = SteadyClock::now();
  const SendOutcome outcome = mailbox_.TrySend(std::move(message));
  if (outcome == SendOutcome::kFull) observer_->OnShed();
  if (outcome == SendOutcome::kAccepted && options_.inline_execution &&
      DrainWhileOwner(kInlineBatchesMax, std::min(kInlineBatchMax, options_.max_batch))) {
    HandOffToShardThread();  // A backlog: the shard thread takes it from here.
  }
  return outcome;
}

// Dedicated mode: the shard thread is the only consumer and sleeps in the mailbox.
void Shard::Run() {
  while (mailbox_.WaitAndDrain(batch_, options_.max_batch) > 0) {
    ProcessBatch();
  }
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
    // seq_cst: pairs with Mailbox::HeadPublished below, see there.
    if (draining_.exchange(true, std::memory_order_seq_cst)) return false;
    if (mailbox_.TryDrain(batch_, batch_limit) > 0) ProcessBatch();
    draining_.store(false, std::memory_order_seq_cst);
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
  // Time is read once per message: each handler's end is the next one's start.
  SteadyClock::time_point start = SteadyClock::now();
  for (const Message& message : batch_) {
    if (message.completion->CallerGone()) {
      observer_->OnExpired();
      replies_.push_back({Outcome::kCallerGone, 0});
      continue;
    }
    replies_.push_back(Handle(message));
    const SteadyClock::time_point end = SteadyClock::now();
    observer_->OnHandled(message.op, start - message.enqueued_at, end - start);
    start = end;
  }
  observer_->OnBatch(batch_.size(), balances_.size());
  // Every message of the batch is decided before any is answered: the durability work writes the
  // batch's journal entry here, between deciding and answering.
  for (size_t i = 0; i < batch_.size(); ++i) {
    batch_[i].completion->Complete(replies_[i]);
  }
  batch_.clear();
  replies_.clear();
}

Reply Shard::Handle(const Message& message) {
  try {
    if (options_.test_before_handle) options_.test_before_handle(message);
    if (options_.debug_handler_delay > absl::ZeroDuration()) {
      absl::SleepFor(options_.debug_handler_delay);
    }
    return ApplyToAccounts(message);
  } catch (const std::exception& error) {
    std::cerr << "ledgerd: shard " << options_.index << ": " << OpName(message.op)
              << " failed unexpectedly: " << error.what() << "; answered INTERNAL\n";
  } catch (...) {
    std::cerr << "ledgerd: shard " << options_.index << ": " << OpName(message.op)
              << " failed unexpectedly; answered INTERNAL\n";
  }
  observer_->OnInternalError();
  return {Outcome::kInternal, 0};
}

Reply Shard::ApplyToAccounts(const Message& message) {
  auto account = balances_.find(message.account_id);
  const bool exists = account != balances_.end();
  const Decision decision =
      ApplyOperation(message.op, exists ? std::optional<int64_t>(account->second) : std::nullopt,
                     message.amount, options_.policy);
  if (decision.outcome != Outcome::kOk || message.op == Op::kBalance) {
    return {decision.outcome, decision.balance};
  }
  // After this point the operation must succeed: the decision is final and only stored.
  if (exists) {
    account->second = decision.balance;
  } else {
    balances_.emplace(std::string(message.account_id), decision.balance);
  }
  return {Outcome::kOk, decision.balance};
}

}  // namespace ledger
