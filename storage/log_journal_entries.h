// Defines how a watcher learns what a log entry did: the journal entries (History's records) a
// group commit wrote, in the order they were decided. Each log entry carries them as its puts of
// the journal family (storage/log_entry.h), so the change stream is the log read in order
// (docs/architecture.md, "Watch").
#ifndef LEDGER_STORAGE_LOG_JOURNAL_ENTRIES_H_
#define LEDGER_STORAGE_LOG_JOURNAL_ENTRIES_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "shard/ledger_store.h"

namespace ledger::storage {

// Calls `entry` for every journal entry of the log entry `payload`, in order. DataLoss naming
// what is wrong for a payload or a journal record that does not decode; `entry` has then been
// called for those before it.
absl::Status ForEachJournalEntry(absl::string_view payload,
                                 const std::function<void(JournalEntry entry)>& entry);

}  // namespace ledger::storage

#endif  // LEDGER_STORAGE_LOG_JOURNAL_ENTRIES_H_
