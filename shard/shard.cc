#include "shard/shard.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <iostream>
#include <optional>
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

Shard::Shard(ShardOptions options)
    : options_(std::move(options)),
      observer_(options_.observer != nullptr ? options_.observer : &null_observer),
      mailbox_(options_.mailbox_capacity) {
  LEDGER_CHECK(ValidateShardOptions(options_).ok());
  batch_.reserve(options_.max_batch);
  replies_.reserve(options_.max_batch);
}

void Shard::LoadAccount(std::string account_id, AccountState state) {
  LEDGER_CHECK(!started_);
  accounts_.insert_or_assign(std::move(account_id), state);
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
  while (draining_.load(std::memory_order_acquire) || mailbox_.Depth() > 0) {
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
  if (options_.store != nullptr) batch_time_ = options_.clock ? options_.clock() : absl::Now();
  // Time is read once per message: each handler's end is the next one's start.
  SteadyClock::time_point start = SteadyClock::now();
  for (const Message& message : batch_) {
    if (message.completion->CallerGone()) {
      observer_->OnExpired();
      replies_.push_back({.outcome = Outcome::kCallerGone});
      continue;
    }
    if (abandoning_.load(std::memory_order_acquire)) {
      // The shutdown grace ran out: this message is answered, certainly not applied.
      replies_.push_back({.outcome = Outcome::kShuttingDown});
      continue;
    }
    replies_.push_back(Handle(message));
    const SteadyClock::time_point end = SteadyClock::now();
    observer_->OnHandled(message.op, start - message.enqueued_at, end - start);
    start = end;
  }
  // Every message of the batch is decided before any is answered, so that one write makes the
  // whole batch durable (group commit) before a caller hears OK.
  if (!write_.empty()) CommitBatch();
  observer_->OnBatch(batch_.size(), accounts_.size());
  for (size_t i = 0; i < batch_.size(); ++i) {
    batch_[i].completion->Complete(replies_[i]);
  }
  batch_.clear();
  replies_.clear();
  write_.clear();
  undo_.clear();
  batch_requests_.clear();
}

void Shard::CommitBatch() {
  const SteadyClock::time_point start = SteadyClock::now();
  const absl::Status status = options_.store->Write(write_);
  observer_->OnJournalWrite(SteadyClock::now() - start);
  if (status.ok()) return;
  observer_->OnStorageError();
  LogStorageError(status, "writing a batch");
  RollBackBatch();
}

// After a failed write nothing of the batch is on disk, so nothing of it may be visible: the
// accounts go back to their state before the batch, every Deposit and Withdraw is answered
// kStorageFailed (not applied; safe to retry), and Balance reads are answered from the restored
// state, as if they had run before the failed operations.
void Shard::RollBackBatch() {
  for (const auto& [account_id, before] : undo_) unsettled_accounts_.insert(account_id);
  for (auto undo = undo_.rbegin(); undo != undo_.rend(); ++undo) {
    if (undo->second.has_value()) {
      accounts_.insert_or_assign(undo->first, *undo->second);
    } else {
      accounts_.erase(undo->first);
    }
  }
  for (size_t i = 0; i < batch_.size(); ++i) {
    Reply& reply = replies_[i];
    if (reply.outcome == Outcome::kCallerGone || reply.outcome == Outcome::kInternal) continue;
    if (batch_[i].op != Op::kBalance) {
      reply = {.outcome = Outcome::kStorageFailed};
      continue;
    }
    auto account = accounts_.find(batch_[i].account_id);
    reply = account == accounts_.end()
                ? Reply{.outcome = Outcome::kAccountNotFound}
                : Reply{.outcome = Outcome::kOk, .balance = account->second.balance};
  }
}

void Shard::LogStorageError(const absl::Status& status, absl::string_view what) {
  const std::optional<int64_t> dropped = storage_error_log_.Admit();
  if (!dropped.has_value()) return;
  std::cerr << "ledgerd: shard " << options_.index << ": storage failed " << what << ": "
            << status.message() << " (" << *dropped
            << " more storage error(s) since the last report); the affected calls were "
               "answered UNAVAILABLE with their outcome unknown (retry with the same "
               "request_id)\n";
}

void Shard::LogInternalError(Op op, absl::string_view what) {
  const std::optional<int64_t> dropped = internal_error_log_.Admit();
  if (!dropped.has_value()) return;
  std::cerr << "ledgerd: shard " << options_.index << ": " << OpName(op)
            << " failed unexpectedly: " << what << "; answered INTERNAL (" << *dropped
            << " more such line(s) dropped)\n";
}

Reply Shard::Handle(const Message& message) {
  try {
    if (options_.test_before_handle) options_.test_before_handle(message);
    if (options_.debug_handler_delay > absl::ZeroDuration()) {
      absl::SleepFor(options_.debug_handler_delay);
    }
    return ApplyToAccounts(message);
  } catch (const std::exception& error) {
    LogInternalError(message.op, error.what());
  } catch (...) {
    LogInternalError(message.op, "an exception that is not a std::exception");
  }
  observer_->OnInternalError();
  return {.outcome = Outcome::kInternal};
}

bool Shard::SettleAccount(absl::string_view account_id) {
  auto unsettled = unsettled_accounts_.find(account_id);
  if (unsettled == unsettled_accounts_.end()) return true;
  absl::StatusOr<std::optional<AccountState>> stored = options_.store->FindAccount(account_id);
  if (!stored.ok()) {
    observer_->OnStorageError();
    LogStorageError(stored.status(), "reloading an account after a failed write");
    return false;
  }
  if (stored->has_value()) {
    accounts_.insert_or_assign(std::string(account_id), **stored);
  } else {
    accounts_.erase(account_id);
  }
  unsettled_accounts_.erase(unsettled);
  return true;
}

Reply Shard::ApplyToAccounts(const Message& message) {
  const bool mutation = message.op != Op::kBalance;
  // A read of an account the store cannot settle yet is answered from memory: the state before
  // the failed write.
  if (!unsettled_accounts_.empty() && !SettleAccount(message.account_id) && mutation) {
    return Reply{.outcome = Outcome::kStorageFailed};
  }
  const bool deduplicated = mutation && options_.store != nullptr && !message.request_id.empty();
  // Key of batch_requests_: account, NUL, request_id.
  std::string request_key;
  if (deduplicated) {
    request_key = absl::StrCat(message.account_id, absl::string_view("\0", 1), message.request_id);
    if (std::optional<Reply> recorded = FindRecordedReply(message, request_key)) return *recorded;
  }
  auto account = accounts_.find(message.account_id);
  const bool exists = account != accounts_.end();
  const Decision decision = ApplyOperation(
      message.op, exists ? std::optional<int64_t>(account->second.balance) : std::nullopt,
      message.amount, options_.policy);
  const Reply reply{.outcome = decision.outcome, .balance = decision.balance};
  if (!mutation || decision.outcome == Outcome::kInvalidAmount) return reply;

  if (decision.outcome == Outcome::kOk) {
    // After this point the operation must succeed: the decision is final and only stored.
    std::optional<AccountState> before;
    if (exists) {
      before = account->second;
    } else {
      account = accounts_.emplace(std::string(message.account_id), AccountState{}).first;
    }
    account->second.balance = decision.balance;
    ++account->second.sequence;
    if (options_.store != nullptr) RecordApplied(message, before, account->second);
  }
  if (deduplicated) {
    batch_requests_.insert_or_assign(std::move(request_key), write_.requests.size());
    write_.requests.push_back({.account_id = std::string(message.account_id),
                               .request_id = std::string(message.request_id),
                               .record = {.op = message.op,
                                          .amount = message.amount,
                                          .outcome = decision.outcome,
                                          .balance = decision.balance,
                                          .recorded_at = batch_time_}});
  }
  return reply;
}

std::optional<Reply> Shard::FindRecordedReply(const Message& message,
                                              const std::string& request_key) {
  RequestRecord record;
  auto in_batch = batch_requests_.find(request_key);
  if (in_batch != batch_requests_.end()) {
    record = write_.requests[in_batch->second].record;
  } else {
    absl::StatusOr<std::optional<RequestRecord>> found =
        options_.store->FindRequest(message.account_id, message.request_id);
    if (!found.ok()) {
      observer_->OnStorageError();
      LogStorageError(found.status(), "looking up a request_id");
      return Reply{.outcome = Outcome::kStorageFailed};
    }
    if (!found->has_value()) return std::nullopt;
    record = **found;
    // An expired record may linger until compaction purges it; it no longer counts.
    if (record.recorded_at + options_.idempotency_ttl <= batch_time_) return std::nullopt;
  }
  if (record.op != message.op || record.amount != message.amount) {
    return Reply{.outcome = Outcome::kRequestIdReused,
                 .recorded_op = record.op,
                 .recorded_amount = record.amount};
  }
  return Reply{.outcome = record.outcome, .balance = record.balance, .replayed = true};
}

void Shard::RecordApplied(const Message& message, std::optional<AccountState> before,
                          const AccountState& after) {
  undo_.emplace_back(std::string(message.account_id), before);
  write_.accounts.push_back({.account_id = std::string(message.account_id), .state = after});
  write_.journal.push_back({.account_id = std::string(message.account_id),
                            .sequence = after.sequence,
                            .op = message.op,
                            .amount = message.amount,
                            .balance_after = after.balance,
                            .request_id = std::string(message.request_id),
                            .time = batch_time_});
}

}  // namespace ledger
