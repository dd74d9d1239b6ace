#include "sim/fault_store.h"

#include "base/check.h"

namespace ledger::sim {

absl::Status FaultStore::WriteGroup(absl::Span<const BatchWrite* const> group) {
  // One plan, one write: a second write under the same plan would be a batch written twice.
  LEDGER_CHECK(!write_facts_.write_called);
  write_facts_.write_called = true;
  write_facts_.write_result = write_plan_.write;
  *clock_ += write_plan_.write_delay;
  switch (write_plan_.write) {
    case WriteFault::kNone:
      ++successful_writes_;
      if (bug_ == StoreBugForTesting::kLoseAcknowledgedWrites && successful_writes_ % 10 == 0) {
        return absl::OkStatus();
      }
      for (const BatchWrite* batch : group) Apply(*batch);
      return absl::OkStatus();
    case WriteFault::kFail:
      return absl::UnavailableError("simulated write failure");
    case WriteFault::kFailLanded:
      for (const BatchWrite* batch : group) Apply(*batch);
      return absl::UnavailableError("simulated write failure after the data landed");
  }
  return absl::InternalError("unreachable");
}

bool FaultStore::LookupFails() {
  if (lookup_plan_.fail_percent <= 0) return false;
  const bool fails = static_cast<int>((*rng_)() % 100) < lookup_plan_.fail_percent;
  if (fails) ++lookup_failures_;
  return fails;
}

absl::StatusOr<std::optional<RequestRecord>> FaultStore::FindRequest(absl::string_view account_id,
                                                                     absl::string_view request_id) {
  if (LookupFails()) return absl::UnavailableError("simulated lookup failure");
  auto found = requests_.find({std::string(account_id), std::string(request_id)});
  if (found == requests_.end()) return std::nullopt;
  return found->second;
}

absl::StatusOr<MemoryLookup> FaultStore::FindRequestInMemory(absl::string_view account_id,
                                                             absl::string_view request_id) {
  // RocksDB answers from its memtables and block cache, or says the record may be on disk.
  if (lookup_plan_.memory_miss_percent > 0 &&
      static_cast<int>((*rng_)() % 100) < lookup_plan_.memory_miss_percent) {
    return MemoryLookup{.answered = false, .record = std::nullopt};
  }
  absl::StatusOr<std::optional<RequestRecord>> found = FindRequest(account_id, request_id);
  if (!found.ok()) return found.status();
  return MemoryLookup{.answered = true, .record = *std::move(found)};
}

absl::StatusOr<std::optional<AccountState>> FaultStore::FindAccount(absl::string_view account_id) {
  if (LookupFails()) return absl::UnavailableError("simulated lookup failure");
  auto found = accounts_.find(std::string(account_id));
  if (found == accounts_.end()) return std::nullopt;
  return found->second;
}

absl::StatusOr<std::optional<TransferRecord>> FaultStore::FindTransfer(
    absl::string_view transfer_id, absl::string_view from) {
  if (LookupFails()) return absl::UnavailableError("simulated lookup failure");
  auto pending = pending_.find({std::string(transfer_id), std::string(from)});
  if (pending != pending_.end()) return pending->second;
  auto found = transfers_.find(std::string(transfer_id));
  if (found == transfers_.end()) return std::nullopt;
  return found->second;
}

absl::StatusOr<std::optional<CreditReceipt>> FaultStore::FindCredit(absl::string_view transfer_id) {
  if (LookupFails()) return absl::UnavailableError("simulated lookup failure");
  auto found = credits_.find(std::string(transfer_id));
  if (found == credits_.end()) return std::nullopt;
  return found->second;
}

absl::StatusOr<std::vector<TransferRecord>> FaultStore::FindPendingTransfers(
    absl::string_view transfer_id) {
  if (LookupFails()) return absl::UnavailableError("simulated lookup failure");
  std::vector<TransferRecord> pending;
  for (const auto& [key, record] : pending_) {
    if (key.first == transfer_id) pending.push_back(record);
  }
  return pending;
}

void FaultStore::Apply(const BatchWrite& batch) {
  ++version_;
  for (const AccountWrite& account : batch.accounts) accounts_[account.account_id] = account.state;
  for (const JournalEntry& entry : batch.journal) journal_.push_back(entry);
  // As RocksDbStore keeps them: a pending record only under its source (what recovery resumes),
  // a final one under its id, replacing the pending one in the same write when it ends it.
  for (const TransferWrite& transfer : batch.transfers) {
    if (transfer.record.state == TransferState::kPending) {
      pending_[{transfer.transfer_id, transfer.record.from}] = transfer.record;
    } else {
      transfers_[transfer.transfer_id] = transfer.record;
      if (transfer.ends_pending) pending_.erase({transfer.transfer_id, transfer.record.from});
    }
  }
  for (const CreditWrite& credit : batch.credits) credits_[credit.transfer_id] = credit.receipt;
  for (const RequestWrite& request : batch.requests) {
    requests_[{request.account_id, request.request_id}] = request.record;
  }
}

}  // namespace ledger::sim
