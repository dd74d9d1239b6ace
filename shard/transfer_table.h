// Defines `TransferTable`, what one shard core holds in memory about transfers: the records of the
// transfers it is the source of while they are pending or not yet durable, and the receipts of the
// credits it applied while not yet durable. Everything older is read from the store (Prefetch),
// so memory stays bounded by the transfers in flight and the batches being written.
//
// It keeps its own undo log, so that a batch whose write fails takes its transfer changes back
// with its account changes (ShardCore::RollBack), and marks each such id unsettled: a failed
// write may still have reached the disk, so the id is read from the store before its next use.
#ifndef LEDGER_SHARD_TRANSFER_TABLE_H_
#define LEDGER_SHARD_TRANSFER_TABLE_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "shard/ledger_store.h"

namespace ledger {

// One change of a TransferTable, as its undo log keeps it: the entry's value before the change.
struct TransferUndo {
  bool credit = false;  // A credit receipt; else a transfer record.
  std::string transfer_id;
  std::optional<TransferRecord> record = std::nullopt;
  std::optional<CreditReceipt> receipt = std::nullopt;
  uint64_t batch = 0;   // The entry's batch before the change.
  bool orphan = false;  // The entry's orphan mark before the change.
};

// Not thread-safe: owned by a ShardCore and driven by it.
class TransferTable {
 public:
  // `durable`: the shard has a store, so final records and receipts are kept until their batch
  // is durable (to answer a retry meanwhile) and then read from the store. Without one, only
  // pending records are kept: nothing is deduplicated and nothing can fail to be written.
  explicit TransferTable(bool durable) : durable_(durable) {}

  // Memory's record or receipt; null when memory does not hold it (then the store may).
  const TransferRecord* FindTransfer(absl::string_view transfer_id) const;
  const CreditReceipt* FindCredit(absl::string_view transfer_id) const;
  // True when the id was changed by a batch whose write failed and has not been read back from
  // the store since: memory cannot say.
  bool TransferUnsettled(absl::string_view transfer_id) const {
    return !unsettled_transfers_.empty() && unsettled_transfers_.contains(transfer_id);
  }
  bool CreditUnsettled(absl::string_view transfer_id) const {
    return !unsettled_credits_.empty() && unsettled_credits_.contains(transfer_id);
  }

  // Changes made by the batch being decided, each with its undo entry.
  void PutTransfer(absl::string_view transfer_id, const TransferRecord& record);
  void PutCredit(absl::string_view transfer_id, const CreditReceipt& receipt);

  // The decided batch was sealed as `sequence`: its changes are that batch's, and their undo
  // entries go with it.
  std::vector<TransferUndo> Seal(uint64_t sequence);
  // The decided batch was answered without a write (nothing of it needs undoing).
  void DropUndo() { undo_.clear(); }
  // Every batch up to `finished_through` is durable: drops what the store now answers (final
  // records and receipts those batches wrote). Pending records stay until they are final.
  void ForgetFinished(uint64_t finished_through);
  // Takes back the changes of failed batches (`undo`: all of theirs, newest batch last) and marks
  // their ids unsettled. `first_failed`: the oldest failed batch's sequence.
  void RollBack(const std::vector<const std::vector<TransferUndo>*>& undo, uint64_t first_failed);
  // What the store holds for an id, read back after a failed write (or at start-up): it replaces
  // memory's entry. `orphan`: no flight carries it on (its debit's write was answered as failed,
  // yet reached the disk), so the next retry of the transfer adopts it (TakeOrphan).
  void SettleTransfer(absl::string_view transfer_id, const std::optional<TransferRecord>& stored,
                      bool orphan);
  // True, once, when the id's pending record is an orphan.
  bool TakeOrphan(absl::string_view transfer_id);
  void SettleCredit(absl::string_view transfer_id, const std::optional<CreditReceipt>& stored);

  // Transfers this shard is the source of that are pending (for tests and the simulator).
  size_t pending_count() const;
  template <typename Visit>
  void ForEachPending(Visit visit) const {
    for (const auto& [id, entry] : transfers_) {
      if (entry.record.state == TransferState::kPending) visit(entry.record);
    }
  }

 private:
  struct Entry {
    TransferRecord record;
    uint64_t batch = 0;  // The sealed batch that wrote it; 0: the batch being decided, or loaded.
    bool orphan = false;
  };
  struct CreditEntry {
    CreditReceipt receipt;
    uint64_t batch = 0;
  };

  const bool durable_;
  absl::flat_hash_map<std::string, Entry> transfers_;
  absl::flat_hash_map<std::string, CreditEntry> credits_;
  std::vector<TransferUndo> undo_;
  // The ids each sealed batch wrote, oldest first, to forget them once it is durable.
  std::deque<std::pair<uint64_t, std::vector<TransferUndo>>> sealed_;
  absl::flat_hash_set<std::string> unsettled_transfers_;
  absl::flat_hash_set<std::string> unsettled_credits_;
};

}  // namespace ledger

#endif  // LEDGER_SHARD_TRANSFER_TABLE_H_
