// Defines `SealedBatch`: one shard batch decided in memory and waiting for its write. It carries
// everything the batch's messages need once the write returns (the replies to release, or the undo
// log to roll back with), so that a shard can decide its next batch while this one is written.
#ifndef LEDGER_SHARD_SEALED_BATCH_H_
#define LEDGER_SHARD_SEALED_BATCH_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "shard/ledger_store.h"
#include "shard/message.h"
#include "shard/transfer_table.h"

namespace ledger {

// An account's state before an applied operation; nullopt when the operation opened it.
using UndoEntry = std::pair<std::string, std::optional<AccountState>>;

struct SealedBatch {
  // Which shard sealed it (its index), and its place among that shard's sealed batches: 1, 2, ...
  // in the order they were decided, which is the order they are written and answered in.
  int32_t shard = 0;
  uint64_t sequence = 0;
  std::vector<Message> messages;
  std::vector<Reply> replies;   // One per message, as decided.
  BatchWrite write;             // May be empty: a batch of reads still waits for its turn.
  std::vector<UndoEntry> undo;  // In the order of the changes.
  std::vector<TransferUndo> transfer_undo;  // The transfer records and receipts it changed.
  // Set when the write failed (or the batch was refused because an earlier one of its shard
  // failed): the error the shard logs.
  absl::Status failure;

  // Answers every message with its reply, in order. The messages must not be touched after.
  void CompleteAll() {
    for (size_t i = 0; i < messages.size(); ++i) messages[i].completion->Complete(replies[i]);
  }
};

}  // namespace ledger

#endif  // LEDGER_SHARD_SEALED_BATCH_H_
