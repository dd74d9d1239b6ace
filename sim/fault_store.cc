#include "sim/fault_store.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "storage/unapplied_records.h"

namespace ledger::sim {

absl::Status FaultStore::WriteGroup(absl::Span<const BatchWrite* const> group) {
  // One plan, one write: a second write under the same plan would be a batch written twice.
  LEDGER_CHECK(!write_facts_.write_called);
  write_facts_.write_called = true;
  write_facts_.write_result = write_plan_.write;
  *clock_ += write_plan_.write_delay;
  sent_before_leadership_lost_ = false;
  if (!log_.poisoned().ok()) {
    // As RocksDbStore::WriteGroup: an earlier append failed, and its entry is removed for good
    // before anything is appended after it; but after a lost leadership the log refuses until
    // the replica has started again as a follower, and nothing of the group is stored.
    if (absl::Status repaired = log_.Repair(); !repaired.ok()) {
      write_facts_.write_result = WriteFault::kFail;
      return repaired;
    }
    write_facts_.repaired = true;
  }
  if (write_plan_.write == WriteFault::kNone) {
    ++successful_writes_;
    if (bug_ == StoreBugForTesting::kLoseAcknowledgedWrites && successful_writes_ % 10 == 0) {
      return absl::OkStatus();
    }
  }
  const uint64_t id = KeepGroup(group);
  const std::vector<BatchWrite>& batches = groups_[id];
  log_.PlanAppend(write_plan_.write == WriteFault::kNone        ? AppendFault::kNone
                  : write_plan_.write == WriteFault::kFail      ? AppendFault::kWriteFails
                  : write_plan_.write == WriteFault::kSyncFails ? AppendFault::kSyncFails
                                                                : AppendFault::kLeadershipLost);
  absl::StatusOr<uint64_t> position = log_.Append(absl::StrCat(id));
  sent_before_leadership_lost_ = write_plan_.write == WriteFault::kLeadershipLost;
  if (!position.ok()) {
    failed_group_id_ = id;
    return position.status();
  }
  Append(batches, *position);
  acknowledged_ = *position;
  return absl::OkStatus();
}

FaultStore::AccountsAt FaultStore::AccountsAtApplied(
    const std::vector<std::string>& account_ids) const {
  AccountsAt at;
  // What the applier reached: the newest entry it applied since the last checkpoint, else the
  // checkpoint's (a restart's replay counts as applied).
  at.position = applied_since_checkpoint_.empty() ? checkpoint_position_
                                                  : applied_since_checkpoint_.back().position;
  if (bug_ == StoreBugForTesting::kSnapshotNamesTheAcknowledgedPosition)
    at.position = acknowledged_;
  for (const std::string& id : account_ids) {
    auto found = applied_.accounts.find(id);
    at.states.push_back(found == applied_.accounts.end() ? std::nullopt
                                                         : std::optional(found->second));
  }
  return at;
}

std::vector<JournalEntry> FaultStore::JournalOf(absl::string_view payload) const {
  std::vector<JournalEntry> journal;
  for (const BatchWrite& batch : GroupOf(payload)) {
    journal.insert(journal.end(), batch.journal.begin(), batch.journal.end());
  }
  return journal;
}

uint64_t FaultStore::KeepGroup(absl::Span<const BatchWrite* const> group) {
  const uint64_t id = next_group_id_++;
  std::vector<BatchWrite>& batches = groups_[id];
  for (const BatchWrite* batch : group) batches.push_back(*batch);
  return id;
}

absl::Status FaultStore::WriteGroupBehindFailure(absl::Span<const BatchWrite* const> group) {
  LEDGER_CHECK(!write_facts_.write_called);
  const bool bug = bug_ == StoreBugForTesting::kRepairsUnderWritesInFlight;
  LEDGER_CHECK(bug || !log_.poisoned().ok());
  write_facts_.write_called = true;
  if (!sent_before_leadership_lost_) {
    write_facts_.write_result = WriteFault::kFail;
    absl::Status poison =
        log_.poisoned().ok() ? absl::UnavailableError("an earlier write failed") : log_.poisoned();
    if (bug && log_.Repair().ok()) {
      // The bug: it lands, and the store still says it failed.
      const uint64_t id = KeepGroup(group);
      const std::vector<BatchWrite>& batches = groups_[id];
      absl::StatusOr<uint64_t> position = log_.Append(absl::StrCat(id));
      LEDGER_CHECK(position.ok());
      Append(batches, *position);
    }
    return poison;
  }
  write_facts_.write_result = WriteFault::kLeadershipLost;
  const uint64_t id = KeepGroup(group);
  return log_.AppendBehindLostLeadership(absl::StrCat(id));
}

void FaultStore::Append(const std::vector<BatchWrite>& batches, uint64_t position) {
  ++version_;
  for (const BatchWrite& batch : batches) {
    Apply(batch, truth_);
    for (const RequestWrite& request : batch.requests) {
      recent_requests_[{request.account_id, request.request_id}] = request.record;
    }
  }
  unapplied_.push_back({.position = position, .batches = &batches});
}

const std::vector<BatchWrite>& FaultStore::GroupOf(absl::string_view payload) const {
  uint64_t id = 0;
  LEDGER_CHECK(absl::SimpleAtoi(payload, &id));
  auto found = groups_.find(id);
  LEDGER_CHECK(found != groups_.end());
  return found->second;
}

void FaultStore::ApplyEntries(size_t count) {
  for (size_t i = 0; i < count && !unapplied_.empty(); ++i) {
    for (const BatchWrite& batch : *unapplied_.front().batches) {
      Apply(batch, applied_, /*with_requests=*/false);
    }
    applied_since_checkpoint_.push_back(unapplied_.front());
    unapplied_.pop_front();
  }
}

void FaultStore::Checkpoint() {
  if (bug_ != StoreBugForTesting::kCheckpointDropsRecentRequests) {
    for (auto& [key, record] : recent_requests_) applied_.requests[key] = record;
  }
  recent_requests_.clear();
  if (!applied_since_checkpoint_.empty()) {
    checkpoint_position_ = applied_since_checkpoint_.back().position;
  }
  applied_since_checkpoint_.clear();
  // The log lets go of what the tables now hold (whole segments), and the store of the groups
  // no kept entry names.
  LEDGER_CHECK(log_.DropBefore(checkpoint_position_ + 1).ok());
  uint64_t oldest_kept = next_group_id_;
  if (log_.last_position() >= log_.first_position()) {
    LEDGER_CHECK(log_.ReadFrom(log_.first_position(),
                               [&](uint64_t, absl::string_view payload) {
                                 LEDGER_CHECK(absl::SimpleAtoi(payload, &oldest_kept));
                                 return absl::CancelledError("only the first");
                               })
                     .code() == absl::StatusCode::kCancelled);
  }
  // The group of a failed append no write has repaired yet, and those sent behind it: a
  // restart may keep them.
  if (!log_.poisoned().ok()) oldest_kept = std::min(oldest_kept, failed_group_id_);
  groups_.erase(groups_.begin(), groups_.lower_bound(oldest_kept));
}

SimLogRecovery FaultStore::Reopen() {
  const SimLogRecovery recovery = log_.Reopen();
  // RocksDbStore's open: the tables as the last checkpoint left them, save that the applier's
  // writes since then (which omit idempotency records) are kept here as well, so a replay writes
  // only the records of the entries it reached and the whole of the others. Then the log after
  // the checkpoint, replayed in order.
  std::vector<uint64_t> reached;
  for (const LoggedGroup& group : applied_since_checkpoint_) reached.push_back(group.position);
  recent_requests_.clear();
  unapplied_.clear();
  applied_since_checkpoint_.clear();
  const absl::Status replayed =
      log_.ReadFrom(checkpoint_position_ + 1, [&](uint64_t position, absl::string_view payload) {
        const std::vector<BatchWrite>& batches = GroupOf(payload);
        const bool applied = std::binary_search(reached.begin(), reached.end(), position);
        for (const BatchWrite& batch : batches) {
          if (!applied) {
            Apply(batch, applied_);
            continue;
          }
          for (const RequestWrite& request : batch.requests) {
            applied_.requests[{request.account_id, request.request_id}] = request.record;
          }
        }
        applied_since_checkpoint_.push_back({.position = position, .batches = &batches});
        return absl::OkStatus();
      });
  LEDGER_CHECK(replayed.ok());
  truth_ = applied_;
  ++version_;
  acknowledged_ = log_.last_position();
  return recovery;
}

FaultStore::Backup FaultStore::TakeBackup() {
  Checkpoint();  // RocksDbStore::StageBackup checkpoints first.
  Backup backup{.tables = applied_, .log = {}, .truth = truth_};
  if (bug_ != StoreBugForTesting::kBackupMissesTheLogAfterTheTables) {
    for (const LoggedGroup& group : unapplied_) backup.log.push_back(*group.batches);
  }
  return backup;
}

std::string FaultStore::CheckBackup(const Backup& backup) const {
  State restored = backup.tables;
  for (const std::vector<BatchWrite>& entry : backup.log) {
    for (const BatchWrite& batch : entry) Apply(batch, restored);
  }
  return FirstDifference(restored, backup.truth);
}

std::string FaultStore::FirstDifference(const State& restored, const State& truth) {
  if (restored.accounts != truth.accounts) {
    for (const auto& [id, state] : truth.accounts) {
      auto found = restored.accounts.find(id);
      if (found == restored.accounts.end()) return absl::StrCat("account ", id, " is missing");
      if (!(found->second == state)) {
        return absl::StrCat("account ", id, " is restored with balance ", found->second.balance,
                            " (sequence ", found->second.sequence, "), the log says ",
                            state.balance, " (sequence ", state.sequence, ")");
      }
    }
    return "the restore holds an account the log never opened";
  }
  if (restored.journal != truth.journal) {
    return absl::StrCat("the journal is restored with ", restored.journal.size(),
                        " entries, the log has ", truth.journal.size());
  }
  if (restored.requests != truth.requests) return "the idempotency records differ";
  if (restored.transfers != truth.transfers) return "the final transfer records differ";
  if (restored.credits != truth.credits) return "the credit receipts differ";
  if (restored.pending != truth.pending) return "the pending transfer records differ";
  return "";
}

bool FaultStore::LookupFails() {
  if (lookup_plan_.fail_percent <= 0) return false;
  const bool fails = static_cast<int>((*rng_)() % 100) < lookup_plan_.fail_percent;
  if (fails) ++lookup_failures_;
  return fails;
}

bool FaultStore::SeesUnapplied(bool request_record) const {
  if (bug_ == StoreBugForTesting::kLookupsMissUnappliedRecords) return false;
  // The real store's policy, so that a family it stops keeping shows up here as a retry decided
  // as new: idempotency records are always held (RecentRequests, until a checkpoint), transfer
  // records while UnappliedRecords keeps them.
  return request_record || storage::UnappliedRecords::Keeps(storage::LogFamily::kDefault);
}

const TransferWrite* FaultStore::UnappliedTransfer(absl::string_view transfer_id,
                                                   absl::string_view from) const {
  // With `from`: the newest change of the source's pending key (a pending record, or the final
  // record whose write deleted it); without: the newest final record of the id.
  for (auto entry = unapplied_.rbegin(); entry != unapplied_.rend(); ++entry) {
    for (auto batch = entry->batches->rbegin(); batch != entry->batches->rend(); ++batch) {
      for (auto write = batch->transfers.rbegin(); write != batch->transfers.rend(); ++write) {
        if (write->transfer_id != transfer_id) continue;
        const bool is_pending = write->record.state == TransferState::kPending;
        if (!from.empty() && write->record.from == from && (is_pending || write->ends_pending)) {
          return &*write;
        }
        if (from.empty() && !is_pending) return &*write;
      }
    }
  }
  return nullptr;
}

const CreditWrite* FaultStore::UnappliedCredit(absl::string_view transfer_id) const {
  for (auto entry = unapplied_.rbegin(); entry != unapplied_.rend(); ++entry) {
    for (auto batch = entry->batches->rbegin(); batch != entry->batches->rend(); ++batch) {
      for (auto write = batch->credits.rbegin(); write != batch->credits.rend(); ++write) {
        if (write->transfer_id == transfer_id) return &*write;
      }
    }
  }
  return nullptr;
}

absl::StatusOr<std::optional<RequestRecord>> FaultStore::FindRequest(absl::string_view account_id,
                                                                     absl::string_view request_id) {
  if (LookupFails()) return absl::UnavailableError("simulated lookup failure");
  // Held in memory until a checkpoint, then in the tables. As RocksDbStore's, it does not wait
  // for the applier, which never writes idempotency records: with the applier behind the log,
  // the auditor sees whether a retry is still recognised.
  const std::pair<std::string, std::string> key{account_id, request_id};
  if (auto recent = recent_requests_.find(key); recent != recent_requests_.end()) {
    return recent->second;
  }
  auto found = applied_.requests.find(key);
  if (found == applied_.requests.end()) return std::nullopt;
  return found->second;
}

std::vector<absl::StatusOr<MemoryLookup>> FaultStore::FindRequests(
    absl::Span<const RequestKeyRef> keys, bool may_block) {
  if (!may_block || keys.size() < 2 || !LookupFails()) {
    return LedgerStore::FindRequests(keys, may_block);
  }
  ++failed_lookup_batches_;
  std::vector<absl::StatusOr<MemoryLookup>> found;
  int failed = 0;
  for (const RequestKeyRef& key : keys) {
    auto recent = recent_requests_.find({std::string(key.account_id), std::string(key.request_id)});
    if (recent != recent_requests_.end()) {
      found.push_back(MemoryLookup{.answered = true, .record = recent->second});
    } else {
      found.push_back(absl::UnavailableError("simulated failure of a batch of lookups"));
      ++failed;
    }
  }
  // The auditor allows one failed decision per failed lookup: LookupFails counted one.
  lookup_failures_ += failed - 1;
  return found;
}

absl::StatusOr<MemoryLookup> FaultStore::FindRequestInMemory(absl::string_view account_id,
                                                             absl::string_view request_id) {
  // RocksDB answers from its memtables and block cache, or says the record may be on disk.
  if (lookup_plan_.memory_miss_percent > 0 &&
      static_cast<int>((*rng_)() % 100) < lookup_plan_.memory_miss_percent) {
    return MemoryLookup{.answered = false, .record = std::nullopt};
  }
  if (LookupFails()) return absl::UnavailableError("simulated lookup failure");
  const std::pair<std::string, std::string> key{account_id, request_id};
  if (SeesUnapplied(/*request_record=*/true)) {
    if (auto recent = recent_requests_.find(key); recent != recent_requests_.end()) {
      ++unapplied_answers_;
      return MemoryLookup{.answered = true, .record = recent->second};
    }
  }
  // Without waiting: what the tables hold.
  auto found = applied_.requests.find(key);
  if (found == applied_.requests.end()) return MemoryLookup{.answered = true, .record = {}};
  return MemoryLookup{.answered = true, .record = found->second};
}

absl::StatusOr<std::optional<AccountState>> FaultStore::FindAccount(absl::string_view account_id) {
  if (LookupFails()) return absl::UnavailableError("simulated lookup failure");
  ApplyAll();
  auto found = applied_.accounts.find(std::string(account_id));
  if (found == applied_.accounts.end()) return std::nullopt;
  return found->second;
}

absl::StatusOr<std::optional<TransferRecord>> FaultStore::FindTransfer(
    absl::string_view transfer_id, absl::string_view from) {
  if (LookupFails()) return absl::UnavailableError("simulated lookup failure");
  // As RocksDbStore's: no wait for the applier; the unapplied entries, then what it reached.
  return LookUpTransfer(transfer_id, from, /*sees=*/true).record;
}

absl::StatusOr<TransferLookup> FaultStore::FindTransferInMemory(absl::string_view transfer_id,
                                                                absl::string_view from) {
  if (LookupFails()) return absl::UnavailableError("simulated lookup failure");
  return LookUpTransfer(transfer_id, from, SeesUnapplied(/*request_record=*/false));
}

TransferLookup FaultStore::LookUpTransfer(absl::string_view transfer_id, absl::string_view from,
                                          bool sees) {
  // As RocksDbStore::LookUpTransfer: the source's pending key, then the id's final key; each
  // from the unapplied entries first, then from what the applier has reached.
  if (!from.empty()) {
    const TransferWrite* unapplied = sees ? UnappliedTransfer(transfer_id, from) : nullptr;
    if (unapplied != nullptr) {
      ++unapplied_answers_;
      if (unapplied->record.state == TransferState::kPending) {
        return TransferLookup{.answered = true, .record = unapplied->record};
      }
      // Its pending key was deleted by this final record's write: on to the final key.
    } else {
      auto pending = applied_.pending.find({std::string(transfer_id), std::string(from)});
      if (pending != applied_.pending.end()) {
        return TransferLookup{.answered = true, .record = pending->second};
      }
    }
  }
  if (const TransferWrite* unapplied = sees ? UnappliedTransfer(transfer_id, "") : nullptr) {
    ++unapplied_answers_;
    return TransferLookup{.answered = true, .record = unapplied->record};
  }
  auto found = applied_.transfers.find(std::string(transfer_id));
  if (found == applied_.transfers.end()) return TransferLookup{.answered = true};
  return TransferLookup{.answered = true, .record = found->second};
}

absl::StatusOr<std::optional<CreditReceipt>> FaultStore::FindCredit(absl::string_view transfer_id) {
  if (LookupFails()) return absl::UnavailableError("simulated lookup failure");
  // As RocksDbStore's: no wait for the applier; the unapplied entries, then what it reached.
  return LookUpCredit(transfer_id, /*sees=*/true).receipt;
}

absl::StatusOr<CreditLookup> FaultStore::FindCreditInMemory(absl::string_view transfer_id) {
  if (LookupFails()) return absl::UnavailableError("simulated lookup failure");
  return LookUpCredit(transfer_id, SeesUnapplied(/*request_record=*/false));
}

CreditLookup FaultStore::LookUpCredit(absl::string_view transfer_id, bool sees) {
  if (sees) {
    if (const CreditWrite* unapplied = UnappliedCredit(transfer_id)) {
      ++unapplied_answers_;
      return CreditLookup{.answered = true, .receipt = unapplied->receipt};
    }
  }
  auto found = applied_.credits.find(std::string(transfer_id));
  if (found == applied_.credits.end()) return CreditLookup{.answered = true};
  return CreditLookup{.answered = true, .receipt = found->second};
}

absl::StatusOr<std::vector<TransferRecord>> FaultStore::FindPendingTransfers(
    absl::string_view transfer_id) {
  if (LookupFails()) return absl::UnavailableError("simulated lookup failure");
  ApplyAll();
  std::vector<TransferRecord> pending;
  for (const auto& [key, record] : applied_.pending) {
    if (key.first == transfer_id) pending.push_back(record);
  }
  return pending;
}

void FaultStore::Apply(const BatchWrite& batch, State& state, bool with_requests) {
  for (const AccountWrite& account : batch.accounts) {
    state.accounts[account.account_id] = account.state;
  }
  for (const JournalEntry& entry : batch.journal) state.journal.push_back(entry);
  // As RocksDbStore keeps them: a pending record only under its source (what recovery resumes),
  // a final one under its id, replacing the pending one in the same write when it ends it.
  for (const TransferWrite& transfer : batch.transfers) {
    if (transfer.record.state == TransferState::kPending) {
      state.pending[{transfer.transfer_id, transfer.record.from}] = transfer.record;
    } else {
      state.transfers[transfer.transfer_id] = transfer.record;
      if (transfer.ends_pending) state.pending.erase({transfer.transfer_id, transfer.record.from});
    }
  }
  for (const CreditWrite& credit : batch.credits)
    state.credits[credit.transfer_id] = credit.receipt;
  if (!with_requests) return;
  for (const RequestWrite& request : batch.requests) {
    state.requests[{request.account_id, request.request_id}] = request.record;
  }
}

}  // namespace ledger::sim
