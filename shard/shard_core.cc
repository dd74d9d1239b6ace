#include "shard/shard_core.h"

#include <exception>
#include <iostream>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace ledger {
namespace {

// The money invariant of one applied change, checked independently of the rules' arithmetic:
// the balance moved by exactly `amount`, without overflow, and a debit left it at or above the
// overdraft floor.
void CheckAppliedChange(bool credit, int64_t amount, const AccountState& before,
                        const AccountState& after, const LedgerPolicy& policy) {
  LEDGER_CHECK_GT(amount, 0);
  LEDGER_CHECK_EQ(after.sequence, before.sequence + 1);
  int64_t expected = 0;
  if (credit) {
    LEDGER_CHECK(!__builtin_add_overflow(before.balance, amount, &expected));
  } else {
    LEDGER_CHECK(!__builtin_sub_overflow(before.balance, amount, &expected));
    LEDGER_CHECK_GE(after.balance, -policy.overdraft_limit);
  }
  LEDGER_CHECK_EQ(after.balance, expected);
}

bool IsCredit(EntryKind kind) {
  return kind == EntryKind::kDeposit || kind == EntryKind::kTransferIn ||
         kind == EntryKind::kTransferRefund;
}

}  // namespace

ShardCore::ShardCore(ShardCoreOptions options) : ShardCore(std::move(options), ShardTestHooks{}) {}

ShardCore::ShardCore(ShardCoreOptions options, ShardTestHooks hooks)
    : options_(std::move(options)),
      hooks_(std::move(hooks)),
      observer_(options_.observer != nullptr ? options_.observer : DiscardingShardObserver()),
      steady_clock_(options_.steady_clock != nullptr ? options_.steady_clock : &SteadyClock::now),
      transfers_(/*durable=*/options_.store != nullptr) {
  LEDGER_CHECK(options_.policy.overdraft_limit >= 0);
  LEDGER_CHECK(options_.idempotency_ttl > absl::ZeroDuration());
  batch_.reserve(options_.max_batch);
  replies_.reserve(options_.max_batch);
}

void ShardCore::LoadAccount(std::string account_id, AccountState state) {
  LEDGER_CHECK(batch_.empty());
  accounts_.insert_or_assign(std::move(account_id), state);
}

std::optional<AccountState> ShardCore::FindAccountForTesting(absl::string_view account_id) const {
  auto account = accounts_.find(account_id);
  if (account == accounts_.end()) return std::nullopt;
  return account->second;
}

void ShardCore::ProcessBatch(bool abandoning) {
  LEDGER_CHECK(Prefetch(/*may_block=*/true, last_sealed_));
  BeginBatch();
  while (!AllDecided()) DecideNext(abandoning);
  CommitAndComplete();
}

namespace {

// Key of a request_id in batch_requests_ and pending_records_: account, NUL, request_id.
std::string RequestKey(const Message& message) {
  return absl::StrCat(message.account_id, absl::string_view("\0", 1), message.request_id());
}

// Deposits and Withdraws with a request_id, given a store (transfers have their own records).
bool Deduplicated(const Message& message, const LedgerStore* store) {
  return store != nullptr && !message.request_id().empty();
}

}  // namespace

bool ShardCore::Prefetch(bool may_block, uint64_t finished_through) {
  LEDGER_CHECK(replies_.empty());
  LEDGER_CHECK_LE(finished_through, last_sealed_);
  if (options_.store == nullptr) return true;
  ForgetFinishedRecords(finished_through);
  prefetched_records_.assign(batch_.size(), PrefetchedRecord{});
  // The request_ids memory does not hold, looked up together below.
  std::vector<RequestKeyRef> lookups;
  std::vector<size_t> looked_up_messages;
  for (size_t i = 0; i < batch_.size(); ++i) {
    const Message& message = batch_[i];
    if (Unsettled(message.account_id)) {
      if (!may_block) return false;
      // When the store cannot say, the account stays unsettled and DecideNext refuses changes.
      SettleAccount(message.account_id);
    }
    PrefetchedRecord& prefetched = prefetched_records_[i];
    if (message.op() >= Op::kTransfer) {
      if (!PrefetchTransfer(message, prefetched, may_block)) return false;
      continue;
    }
    if (!Deduplicated(message, options_.store)) continue;
    prefetched.key = RequestKey(message);
    if (pending_records_.contains(prefetched.key)) continue;
    prefetched.looked_up = true;
    lookups.push_back({.account_id = message.account_id, .request_id = message.request_id()});
    looked_up_messages.push_back(i);
  }
  if (!lookups.empty()) {
    std::vector<absl::StatusOr<MemoryLookup>> found =
        options_.store->FindRequests(lookups, may_block);
    LEDGER_CHECK_EQ(found.size(), lookups.size());
    for (size_t k = 0; k < found.size(); ++k) {
      PrefetchedRecord& prefetched = prefetched_records_[looked_up_messages[k]];
      if (!found[k].ok()) {
        prefetched.status = found[k].status();
      } else if (!found[k]->answered) {
        LEDGER_CHECK(!may_block);
        return false;
      } else {
        prefetched.record = std::move(found[k]->record);
      }
    }
  }
  prefetched_ = true;
  return true;
}

void ShardCore::ForgetFinishedRecords(uint64_t finished_through) {
  transfers_.ForgetFinished(finished_through);
  while (!pending_record_keys_.empty() && pending_record_keys_.front().first <= finished_through) {
    const uint64_t sequence = pending_record_keys_.front().first;
    for (const std::string& key : pending_record_keys_.front().second) {
      auto pending = pending_records_.find(key);
      if (pending != pending_records_.end() && pending->second.sequence == sequence) {
        pending_records_.erase(pending);
      }
    }
    pending_record_keys_.pop_front();
  }
}

void ShardCore::BeginBatch() {
  LEDGER_CHECK(replies_.empty() && write_.empty() && undo_.empty() && batch_applied_ == 0);
  LEDGER_CHECK(options_.store == nullptr || prefetched_);
  if (options_.store != nullptr) batch_time_ = options_.clock ? options_.clock() : absl::Now();
  // Time is read once per message: each handler's end is the next one's start.
  handler_start_ = SteadyNow();
}

void ShardCore::DecideNext(bool abandoning) {
  LEDGER_CHECK_LT(replies_.size(), batch_.size());
  const Message& message = batch_[replies_.size()];
  if (message.completion->CallerGone()) {
    observer_->OnExpired();
    replies_.push_back({.outcome = Outcome::kCallerGone});
    return;
  }
  if (abandoning) {
    // The shutdown grace ran out: this message is answered, certainly not applied.
    replies_.push_back({.outcome = Outcome::kShuttingDown});
    return;
  }
  replies_.push_back(Handle(message));
  const SteadyClock::time_point end = SteadyNow();
  observer_->OnHandled(message.op(), handler_start_ - message.enqueued_at, end - handler_start_);
  handler_start_ = end;
}

SealResult ShardCore::Seal(uint64_t finished_through) {
  LEDGER_CHECK(AllDecided());
  LEDGER_CHECK_LE(finished_through, last_sealed_);
  // One durable change, one undo entry and one journal entry per applied operation; a request
  // record at most per message.
  if (options_.store != nullptr) {
    LEDGER_CHECK_EQ(write_.accounts.size(), batch_applied_);
    LEDGER_CHECK_EQ(write_.journal.size(), batch_applied_);
    LEDGER_CHECK_EQ(undo_.size(), batch_applied_);
    LEDGER_CHECK_LE(write_.requests.size(), batch_.size());
    LEDGER_CHECK_LE(write_.transfers.size() + write_.credits.size(), batch_.size());
  } else {
    LEDGER_CHECK(write_.empty() && undo_.empty());
  }
  observer_->OnBatch(batch_.size(), accounts_.size());
  SealResult result;
  // Every message of the batch is decided before any is answered, so that one write makes the
  // whole batch durable (group commit) before a caller hears OK.
  if (options_.store == nullptr || (write_.empty() && finished_through == last_sealed_)) {
    result.completed_now = batch_.size();
    CompleteNow();
    return result;
  }
  auto sealed = std::make_unique<SealedBatch>();
  sealed->shard = options_.index;
  sealed->sequence = ++last_sealed_;
  // Its request_ids stay answerable from memory until the store has them.
  std::vector<std::string> keys;
  keys.reserve(batch_requests_.size());
  for (auto& [key, index] : batch_requests_) {
    pending_records_.insert_or_assign(
        key, PendingRecord{.sequence = sealed->sequence, .record = write_.requests[index].record});
    keys.push_back(key);
  }
  if (!keys.empty()) pending_record_keys_.emplace_back(sealed->sequence, std::move(keys));
  sealed->messages.swap(batch_);
  sealed->replies.swap(replies_);
  sealed->write = std::move(write_);
  sealed->undo.swap(undo_);
  sealed->transfer_undo = transfers_.Seal(sealed->sequence);
  write_.clear();
  ClearBatch();
  // The vectors went with the sealed batch. Not reserved again: inline batches hold a few
  // messages, and max_batch of them would be an allocation of kilobytes per batch.
  result.to_write = std::move(sealed);
  return result;
}

void ShardCore::CompleteNow() {
  for (size_t i = 0; i < batch_.size(); ++i) batch_[i].completion->Complete(replies_[i]);
  ClearBatch();
}

void ShardCore::ClearBatch() {
  batch_.clear();
  replies_.clear();
  write_.clear();
  undo_.clear();
  batch_requests_.clear();
  batch_applied_ = 0;
  transfers_.DropUndo();
  prefetched_ = false;
  prefetched_records_.clear();
}

void ShardCore::CommitAndComplete() {
  SealResult sealed = Seal(last_sealed_);
  if (sealed.to_write == nullptr) return;
  absl::Status status = absl::OkStatus();
  if (!sealed.to_write->write.empty()) {
    status = options_.store->Write(sealed.to_write->write);
  }
  if (status.ok()) {
    ForgetFinishedRecords(sealed.to_write->sequence);
    sealed.to_write->CompleteAll();
    return;
  }
  sealed.to_write->failure = status;
  std::vector<std::unique_ptr<SealedBatch>> failed;
  failed.push_back(std::move(sealed.to_write));
  RollBack(failed);
  failed.front()->CompleteAll();
}

// After a failed write nothing of the failed batches is on disk (as far as anyone knows), so
// nothing of them may be visible: the accounts go back to their state before the first, every
// Deposit and Withdraw that was decided is answered kStorageFailed (not applied; safe to retry),
// and Balance reads are answered from the restored state, as if they had run before the failed
// operations.
void ShardCore::RollBack(std::vector<std::unique_ptr<SealedBatch>>& failed) {
  LEDGER_CHECK(!failed.empty());
  LEDGER_CHECK(replies_.empty());
  // The failed batches are exactly the newest ones, in order: none is missing.
  LEDGER_CHECK_EQ(failed.back()->sequence, last_sealed_);
  for (size_t i = 1; i < failed.size(); ++i) {
    LEDGER_CHECK_EQ(failed[i]->sequence, failed[i - 1]->sequence + 1);
  }
  observer_->OnStorageError();
  LogStorageError(failed.front()->failure, "writing a batch");
  if (hooks_.core_bug != CoreBugForTesting::kSkipRollback) {
    for (auto batch = failed.rbegin(); batch != failed.rend(); ++batch) {
      for (auto undo = (*batch)->undo.rbegin(); undo != (*batch)->undo.rend(); ++undo) {
        unsettled_accounts_.insert(undo->first);
        if (undo->second.has_value()) {
          accounts_.insert_or_assign(undo->first, *undo->second);
        } else {
          accounts_.erase(undo->first);
        }
      }
    }
    // Each account is back to its state before the first failed batch: its first undo entry.
    // (Failure path only, so the set's allocation costs nothing on the hot path.)
    absl::flat_hash_set<absl::string_view> checked;
    for (const std::unique_ptr<SealedBatch>& batch : failed) {
      for (const auto& [account_id, before] : batch->undo) {
        if (!checked.insert(account_id).second) continue;
        auto account = accounts_.find(account_id);
        LEDGER_CHECK_EQ(account != accounts_.end(), before.has_value());
        if (before.has_value()) {
          LEDGER_CHECK_EQ(account->second.balance, before->balance);
          LEDGER_CHECK_EQ(account->second.sequence, before->sequence);
        }
      }
    }
  }
  // Their request_ids were never durable (as far as anyone knows): a retry looks in the store.
  const uint64_t first_failed = failed.front()->sequence;
  // Their transfer records and receipts likewise, and each is read back before its next use.
  std::vector<const std::vector<TransferUndo>*> transfer_undo;
  transfer_undo.reserve(failed.size());
  for (const std::unique_ptr<SealedBatch>& batch : failed) {
    transfer_undo.push_back(&batch->transfer_undo);
  }
  transfers_.RollBack(transfer_undo, first_failed);
  RebuildRefundable();
  while (!pending_record_keys_.empty() && pending_record_keys_.back().first >= first_failed) {
    for (const std::string& key : pending_record_keys_.back().second) pending_records_.erase(key);
    pending_record_keys_.pop_back();
  }
  for (const std::unique_ptr<SealedBatch>& batch : failed) {
    for (size_t i = 0; i < batch->messages.size(); ++i) {
      Reply& reply = batch->replies[i];
      // Never applied, so the failed write changes nothing for them: they keep their definite
      // answer (a caller told "shutting down" knows to retry; "outcome unknown" would send it to
      // check its balance first).
      if (reply.outcome == Outcome::kCallerGone || reply.outcome == Outcome::kInternal ||
          reply.outcome == Outcome::kShuttingDown) {
        continue;
      }
      const Message& message = batch->messages[i];
      if (message.op() != Op::kBalance) {
        reply = {.outcome = Outcome::kStorageFailed};
        continue;
      }
      auto account = accounts_.find(message.account_id);
      reply = account == accounts_.end()
                  ? Reply{.outcome = Outcome::kAccountNotFound}
                  : Reply{.outcome = Outcome::kOk, .balance = account->second.balance};
    }
  }
}

void ShardCore::LogStorageError(const absl::Status& status, absl::string_view what) {
  if (!options_.log_errors) return;
  const std::optional<int64_t> dropped = storage_error_log_.Admit();
  if (!dropped.has_value()) return;
  std::cerr << "ledgerd: shard " << options_.index << ": storage failed " << what << ": "
            << status.message() << " (" << *dropped
            << " more storage error(s) since the last report); the affected calls were "
               "answered UNAVAILABLE with their outcome unknown (retry with the same "
               "request_id)\n";
}

void ShardCore::LogInternalError(Op op, absl::string_view what) {
  if (!options_.log_errors) return;
  const std::optional<int64_t> dropped = internal_error_log_.Admit();
  if (!dropped.has_value()) return;
  std::cerr << "ledgerd: shard " << options_.index << ": " << OpName(op)
            << " failed unexpectedly: " << what << "; answered INTERNAL (" << *dropped
            << " more such line(s) dropped)\n";
}

Reply ShardCore::Handle(const Message& message) {
  try {
    if (hooks_.before_handle) hooks_.before_handle(message);
    if (options_.debug_handler_delay > absl::ZeroDuration()) {
      absl::SleepFor(options_.debug_handler_delay);
    }
    return ApplyToAccounts(message);
  } catch (const std::exception& error) {
    LogInternalError(message.op(), error.what());
  } catch (...) {
    LogInternalError(message.op(), "an exception that is not a std::exception");
  }
  observer_->OnInternalError();
  return {.outcome = Outcome::kInternal};
}

bool ShardCore::SettleAccount(absl::string_view account_id) {
  auto unsettled = unsettled_accounts_.find(account_id);
  if (unsettled == unsettled_accounts_.end()) return true;
  absl::StatusOr<std::optional<AccountState>> stored = options_.store->FindAccount(account_id);
  if (!stored.ok()) {
    observer_->OnStorageError();
    LogStorageError(stored.status(), "reloading an account after a failed write");
    return false;
  }
  auto account = accounts_.find(account_id);
  if (stored->has_value()) {
    // The store holds the state before the failed batch or, when the write landed anyway, the
    // state after it: never older than what memory was rolled back to.
    if (account != accounts_.end()) {
      LEDGER_CHECK_GE((*stored)->sequence, account->second.sequence);
    }
    accounts_.insert_or_assign(std::string(account_id), **stored);
  } else {
    accounts_.erase(account_id);
  }
  unsettled_accounts_.erase(unsettled);
  return true;
}

Reply ShardCore::ApplyToAccounts(const Message& message) {
  switch (message.op()) {
    case Op::kDeposit:
      return DecideDepositOrWithdraw(message, Op::kDeposit, message.Get<DepositCall>().amount);
    case Op::kWithdraw:
      return DecideDepositOrWithdraw(message, Op::kWithdraw, message.Get<WithdrawCall>().amount);
    case Op::kBalance:
      return DecideBalance(message);
    case Op::kTransfer:
      return DecideTransfer(message, message.Get<TransferCall>());
    case Op::kTransferCredit:
      return DecideCredit(message, message.Get<CreditStep>());
    case Op::kTransferSettle:
      return DecideSettle(message, message.Get<SettleStep>());
  }
  LEDGER_CHECK(false && "an Op without a handler");
  return {};
}

Reply ShardCore::DecideBalance(const Message& message) {
  // A read is answered from memory, even for an account Prefetch could not reload after a failed
  // write (the state before that write).
  auto account = accounts_.find(message.account_id);
  const bool exists = account != accounts_.end();
  const Decision decision = ApplyOperation(
      Op::kBalance, exists ? std::optional<int64_t>(account->second.balance) : std::nullopt,
      /*amount=*/0, options_.policy);
  return {.outcome = decision.outcome, .balance = decision.balance};
}

Reply ShardCore::DecideDepositOrWithdraw(const Message& message, Op op, int64_t amount) {
  // Prefetch could not reload this account after a failed write: a change waits until the store
  // can say.
  if (Unsettled(message.account_id)) return Reply{.outcome = Outcome::kStorageFailed};
  const bool deduplicated = Deduplicated(message, options_.store);
  std::string request_key;
  if (deduplicated) {
    // Made once, by Prefetch.
    request_key = std::move(prefetched_records_[replies_.size()].key);
    LEDGER_CHECK(!request_key.empty());
    if (std::optional<Reply> recorded = FindRecordedReply(op, amount, request_key)) {
      return *recorded;
    }
  }
  auto account = accounts_.find(message.account_id);
  const bool exists = account != accounts_.end();
  const Decision decision =
      ApplyOperation(op, exists ? std::optional<int64_t>(account->second.balance) : std::nullopt,
                     amount, options_.policy);
  Reply reply{.outcome = decision.outcome, .balance = decision.balance};
  if (decision.outcome == Outcome::kInvalidAmount) return reply;
  // A deposit may not take the room a pending transfer's refund needs.
  if (decision.outcome == Outcome::kOk && op == Op::kDeposit && !refundable_.empty() && exists &&
      CreditOverflows(message.account_id, account->second.balance, amount)) {
    reply = {.outcome = Outcome::kOverflow, .balance = account->second.balance};
  }

  if (reply.outcome == Outcome::kOk) {
    // After this point the operation must succeed: the decision is final and only stored.
    const AccountState& after =
        ApplyChange(message.account_id, account,
                    op == Op::kDeposit ? EntryKind::kDeposit : EntryKind::kWithdraw, amount,
                    message.request_id(), /*counterparty=*/{});
    LEDGER_CHECK_EQ(after.balance, decision.balance);
  }
  if (deduplicated) {
    batch_requests_.insert_or_assign(std::move(request_key), write_.requests.size());
    write_.requests.push_back({.account_id = std::string(message.account_id),
                               .request_id = std::string(message.request_id()),
                               .record = {.op = op,
                                          .amount = amount,
                                          .outcome = reply.outcome,
                                          .balance = reply.balance,
                                          .recorded_at = batch_time_}});
  }
  return reply;
}

std::optional<Reply> ShardCore::FindRecordedReply(Op op, int64_t amount,
                                                  const std::string& request_key) {
  RequestRecord record;
  auto in_batch = batch_requests_.find(request_key);
  auto pending = in_batch == batch_requests_.end() ? pending_records_.find(request_key)
                                                   : pending_records_.end();
  if (in_batch != batch_requests_.end()) {
    record = write_.requests[in_batch->second].record;
  } else if (pending != pending_records_.end()) {
    record = pending->second.record;
    // Expired while its write was in flight: it no longer counts, as if read from the store.
    if (record.recorded_at + options_.idempotency_ttl <= batch_time_) return std::nullopt;
  } else {
    const PrefetchedRecord& prefetched = prefetched_records_[replies_.size()];
    LEDGER_CHECK(prefetched.looked_up);
    if (!prefetched.status.ok()) {
      observer_->OnStorageError();
      LogStorageError(prefetched.status, "looking up a request_id");
      return Reply{.outcome = Outcome::kStorageFailed};
    }
    if (!prefetched.record.has_value()) return std::nullopt;
    record = *prefetched.record;
    // An expired record may linger until compaction purges it; it no longer counts.
    if (record.recorded_at + options_.idempotency_ttl <= batch_time_) return std::nullopt;
  }
  if (record.op != op || record.amount != amount) {
    return Reply{.outcome = Outcome::kRequestIdReused,
                 .detail = ReusedRequestId{.op = record.op, .amount = record.amount}};
  }
  if (hooks_.core_bug == CoreBugForTesting::kReapplyReplays) return std::nullopt;
  return Reply{.outcome = record.outcome, .balance = record.balance, .replayed = true};
}

const AccountState& ShardCore::ApplyChange(absl::string_view account_id,
                                           AccountMap::iterator account, EntryKind kind,
                                           int64_t amount, absl::string_view request_id,
                                           absl::string_view counterparty) {
  const bool credit = IsCredit(kind);
  std::optional<AccountState> before;
  if (account != accounts_.end()) {
    before = account->second;
  } else {
    // Only a deposit opens an account.
    LEDGER_CHECK(kind == EntryKind::kDeposit);
    account = accounts_.emplace(std::string(account_id), AccountState{}).first;
  }
  AccountState& state = account->second;
  state.balance = credit ? state.balance + amount : state.balance - amount;
  ++state.sequence;
  CheckAppliedChange(credit, amount, before.value_or(AccountState{}), state, options_.policy);
  ++batch_applied_;
  if (options_.store == nullptr) return state;
  // The journal entry continues the account's numbering: entries are numbered from 1, one each.
  undo_.emplace_back(std::string(account_id), before);
  write_.accounts.push_back({.account_id = std::string(account_id), .state = state});
  write_.journal.push_back({.account_id = std::string(account_id),
                            .sequence = state.sequence,
                            .kind = kind,
                            .amount = amount,
                            .balance_after = state.balance,
                            .request_id = std::string(request_id),
                            .time = batch_time_,
                            .counterparty = std::string(counterparty)});
  return state;
}

}  // namespace ledger
