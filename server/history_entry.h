// Defines how an applied operation (a journal entry) is shown to clients: History's pages and
// Watch's events carry the same v1::HistoryEntry.
#ifndef LEDGER_SERVER_HISTORY_ENTRY_H_
#define LEDGER_SERVER_HISTORY_ENTRY_H_

#include "absl/time/time.h"
#include "google/protobuf/timestamp.pb.h"
#include "ledger/v1/ledger.pb.h"
#include "shard/ledger_store.h"

namespace ledger {

// Fills `out` from `entry` (all but the account id, which the entry's page or event names).
void ToHistoryEntry(const JournalEntry& entry, v1::HistoryEntry& out);

google::protobuf::Timestamp ToTimestamp(absl::Time time);

}  // namespace ledger

#endif  // LEDGER_SERVER_HISTORY_ENTRY_H_
