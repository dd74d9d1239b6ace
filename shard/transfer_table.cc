#include "shard/transfer_table.h"

#include "base/check.h"

namespace ledger {

const TransferRecord* TransferTable::FindTransfer(absl::string_view transfer_id) const {
  auto found = transfers_.find(transfer_id);
  return found == transfers_.end() ? nullptr : &found->second.record;
}

const CreditReceipt* TransferTable::FindCredit(absl::string_view transfer_id) const {
  auto found = credits_.find(transfer_id);
  return found == credits_.end() ? nullptr : &found->second.receipt;
}

void TransferTable::PutTransfer(absl::string_view transfer_id, const TransferRecord& record) {
  auto found = transfers_.find(transfer_id);
  if (durable_) {
    undo_.push_back(found == transfers_.end()
                        ? TransferUndo{.credit = false,
                                       .transfer_id = std::string(transfer_id),
                                       .record = std::nullopt,
                                       .receipt = std::nullopt,
                                       .batch = 0,
                                       .orphan = false}
                        : TransferUndo{.credit = false,
                                       .transfer_id = std::string(transfer_id),
                                       .record = found->second.record,
                                       .receipt = std::nullopt,
                                       .batch = found->second.batch,
                                       .orphan = found->second.orphan});
  }
  // Without a store a final record is of no further use: nothing is deduplicated.
  if (!durable_ && record.state != TransferState::kPending) {
    if (found != transfers_.end()) transfers_.erase(found);
    return;
  }
  transfers_.insert_or_assign(std::string(transfer_id), Entry{.record = record, .batch = 0});
}

void TransferTable::PutCredit(absl::string_view transfer_id, const CreditReceipt& receipt) {
  if (!durable_) return;  // Nothing sends a credit twice without a store that can fail.
  auto found = credits_.find(transfer_id);
  undo_.push_back(found == credits_.end() ? TransferUndo{.credit = true,
                                                         .transfer_id = std::string(transfer_id),
                                                         .record = std::nullopt,
                                                         .receipt = std::nullopt,
                                                         .batch = 0,
                                                         .orphan = false}
                                          : TransferUndo{.credit = true,
                                                         .transfer_id = std::string(transfer_id),
                                                         .record = std::nullopt,
                                                         .receipt = found->second.receipt,
                                                         .batch = found->second.batch,
                                                         .orphan = false});
  credits_.insert_or_assign(std::string(transfer_id), CreditEntry{.receipt = receipt, .batch = 0});
}

std::vector<TransferUndo> TransferTable::Seal(uint64_t sequence) {
  if (undo_.empty()) return {};
  for (const TransferUndo& change : undo_) {
    if (change.credit) {
      auto found = credits_.find(change.transfer_id);
      if (found != credits_.end() && found->second.batch == 0) found->second.batch = sequence;
    } else {
      auto found = transfers_.find(change.transfer_id);
      if (found != transfers_.end() && found->second.batch == 0) found->second.batch = sequence;
    }
  }
  sealed_.emplace_back(sequence, undo_);
  std::vector<TransferUndo> undo;
  undo.swap(undo_);
  return undo;
}

void TransferTable::ForgetFinished(uint64_t finished_through) {
  while (!sealed_.empty() && sealed_.front().first <= finished_through) {
    const uint64_t sequence = sealed_.front().first;
    for (const TransferUndo& change : sealed_.front().second) {
      if (change.credit) {
        auto found = credits_.find(change.transfer_id);
        if (found != credits_.end() && found->second.batch == sequence) credits_.erase(found);
      } else {
        auto found = transfers_.find(change.transfer_id);
        if (found == transfers_.end() || found->second.batch != sequence) continue;
        if (found->second.record.state == TransferState::kPending) {
          found->second.batch = 0;  // Durable now; kept until it is final.
        } else {
          transfers_.erase(found);
        }
      }
    }
    sealed_.pop_front();
  }
}

void TransferTable::RollBack(const std::vector<const std::vector<TransferUndo>*>& undo,
                             uint64_t first_failed) {
  for (auto batch = undo.rbegin(); batch != undo.rend(); ++batch) {
    for (auto change = (*batch)->rbegin(); change != (*batch)->rend(); ++change) {
      if (change->credit) {
        unsettled_credits_.insert(change->transfer_id);
        if (change->receipt.has_value()) {
          credits_.insert_or_assign(change->transfer_id, CreditEntry{.receipt = *change->receipt,
                                                                     .batch = change->batch});
        } else {
          credits_.erase(change->transfer_id);
        }
      } else {
        unsettled_transfers_.insert(change->transfer_id);
        if (change->record.has_value()) {
          transfers_.insert_or_assign(
              change->transfer_id,
              Entry{.record = *change->record, .batch = change->batch, .orphan = change->orphan});
        } else {
          transfers_.erase(change->transfer_id);
        }
      }
    }
  }
  while (!sealed_.empty() && sealed_.back().first >= first_failed) sealed_.pop_back();
}

bool TransferTable::TakeOrphan(absl::string_view transfer_id) {
  auto found = transfers_.find(transfer_id);
  if (found == transfers_.end() || !found->second.orphan) return false;
  // A change of the batch like any other: should its write fail, the mark comes back, so that
  // the next ask adopts the transfer again.
  if (durable_) {
    undo_.push_back(TransferUndo{.credit = false,
                                 .transfer_id = std::string(transfer_id),
                                 .record = found->second.record,
                                 .receipt = std::nullopt,
                                 .batch = found->second.batch,
                                 .orphan = true});
  }
  found->second.orphan = false;
  return true;
}

void TransferTable::SettleTransfer(absl::string_view transfer_id,
                                   const std::optional<TransferRecord>& stored, bool orphan) {
  LEDGER_CHECK(undo_.empty());
  unsettled_transfers_.erase(transfer_id);
  // The store is the truth now. Only a pending record is worth keeping in memory.
  if (stored.has_value() && stored->state == TransferState::kPending) {
    transfers_.insert_or_assign(std::string(transfer_id),
                                Entry{.record = *stored, .batch = 0, .orphan = orphan});
  } else {
    transfers_.erase(transfer_id);
  }
}

void TransferTable::SettleCredit(absl::string_view transfer_id,
                                 const std::optional<CreditReceipt>& /*stored*/) {
  LEDGER_CHECK(undo_.empty());
  unsettled_credits_.erase(transfer_id);
  credits_.erase(transfer_id);  // The store answers from now on.
}

size_t TransferTable::pending_count() const {
  size_t pending = 0;
  for (const auto& [id, entry] : transfers_) {
    if (entry.record.state == TransferState::kPending) ++pending;
  }
  return pending;
}

}  // namespace ledger
