#include "storage/log_journal_entries.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "storage/log_entry.h"
#include "storage/record_codec.h"

namespace ledger::storage {

absl::Status ForEachJournalEntry(absl::string_view payload,
                                 const std::function<void(JournalEntry entry)>& entry) {
  absl::Status bad;
  absl::Status listed = ForEachLogChange(payload, [&](const LogChange& change) {
    if (!bad.ok() || change.family != LogFamily::kJournal || !change.value.has_value()) return;
    const std::optional<uint64_t> sequence = JournalKeySequence(change.key);
    if (!sequence.has_value()) {
      bad = absl::DataLossError("a journal key in the log has no sequence number");
      return;
    }
    const absl::string_view account_id = change.key.substr(0, change.key.size() - 9);
    absl::StatusOr<JournalEntry> decoded = DecodeJournal(*change.value);
    if (!decoded.ok()) {
      bad = absl::DataLossError(absl::StrCat("the journal record of account ", account_id,
                                             " in the log: ", decoded.status().message()));
      return;
    }
    decoded->account_id = std::string(account_id);
    decoded->sequence = *sequence;
    entry(*std::move(decoded));
  });
  return bad.ok() ? listed : bad;
}

}  // namespace ledger::storage
