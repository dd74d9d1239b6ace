#include "storage/account_journal_check.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "rocksdb/iterator.h"
#include "storage/record_codec.h"

namespace ledger::storage {
namespace {

// A journal key is "<account>\0" and 8 bytes of sequence number (record_codec.h).
constexpr size_t kSequenceSuffixBytes = 9;

std::string Quoted(absl::string_view bytes) {
  return absl::StrCat("\"", absl::CHexEscape(bytes), "\"");
}

std::string Describe(absl::string_view account_id, const AccountState& state) {
  return absl::StrCat("account ", Quoted(account_id), " (sequence ", state.sequence, ", balance ",
                      state.balance, ")");
}

absl::Status Corrupt(absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat(what, ": the ledger is corrupt, and a corrupt ledger is never served"));
}

absl::Status NoAccountRecord(absl::string_view account_id) {
  return Corrupt(absl::StrCat("the journal holds entries of account ", Quoted(account_id),
                              ", which has no account record"));
}

}  // namespace

absl::Status AccountJournalCheck::CheckNext(absl::string_view account_id,
                                            const AccountState& state) {
  if (!started_) {
    journal_->SeekToFirst();
    started_ = true;
  }
  std::optional<Position> at;
  if (absl::Status read = Current(at); !read.ok()) return read;
  // Journal keys sort by account id exactly as account keys do ('\0' sorts first), so entries
  // before this account's belong to an account the accounts' pass did not meet.
  if (at.has_value() && at->account_id < account_id) return NoAccountRecord(at->account_id);
  // The iterator stands at the account's oldest entry, and entries are numbered without gaps:
  // a short history is stepped over, a long one jumped with one Seek, chosen before the first
  // step (stepping first and seeking after would pay for both).
  if (at.has_value() && at->account_id == account_id && at->sequence < state.sequence &&
      state.sequence - at->sequence > kStepsBeforeSeek) {
    journal_->Seek(JournalKey(account_id, state.sequence));
    if (absl::Status read = Current(at); !read.ok()) return read;
  }
  while (at.has_value() && at->account_id == account_id && at->sequence < state.sequence) {
    journal_->Next();
    if (absl::Status read = Current(at); !read.ok()) return read;
  }
  return CheckNewestEntry(account_id, state);
}

absl::Status AccountJournalCheck::Finish(std::optional<absl::string_view> next_account) {
  if (!started_) {
    journal_->SeekToFirst();
    started_ = true;
  }
  std::optional<Position> at;
  if (absl::Status read = Current(at); !read.ok()) return read;
  if (at.has_value() && (!next_account.has_value() || at->account_id < *next_account)) {
    return NoAccountRecord(at->account_id);
  }
  return absl::OkStatus();
}

void AccountJournalCheck::StartAt(absl::string_view first_account) {
  journal_->Seek(JournalKey(first_account, 0));
  started_ = true;
}

absl::Status AccountJournalCheck::CheckOne(absl::string_view account_id,
                                           const AccountState& state) {
  journal_->Seek(JournalKey(account_id, state.sequence));
  return CheckNewestEntry(account_id, state);
}

absl::Status AccountJournalCheck::CheckNewestEntry(absl::string_view account_id,
                                                   const AccountState& state) {
  if (state.sequence == 0) {
    // An account is stored only with the operation that opened it, entry 1.
    return Corrupt(absl::StrCat(Describe(account_id, state), " has no operation"));
  }
  std::optional<Position> at;
  if (absl::Status read = Current(at); !read.ok()) return read;
  if (!at.has_value() || at->account_id != account_id) {
    return Corrupt(
        absl::StrCat(Describe(account_id, state), " has no journal entry ", state.sequence));
  }
  if (at->sequence != state.sequence) {
    return Corrupt(absl::StrCat(Describe(account_id, state),
                                " is older than its journal, which holds entry ", at->sequence));
  }
  const rocksdb::Slice value = journal_->value();
  absl::StatusOr<JournalEntry> entry = DecodeJournal(absl::string_view(value.data(), value.size()));
  if (!entry.ok()) {
    return Corrupt(absl::StrCat("journal entry ", state.sequence, " of account ",
                                Quoted(account_id), ": ", entry.status().message()));
  }
  if (entry->balance_after != state.balance) {
    return Corrupt(absl::StrCat(Describe(account_id, state), " disagrees with its journal entry ",
                                state.sequence, ", whose balance_after is ", entry->balance_after));
  }
  journal_->Next();
  if (absl::Status read = Current(at); !read.ok()) return read;
  if (at.has_value() && at->account_id == account_id) {
    return Corrupt(absl::StrCat(Describe(account_id, state),
                                " is older than its journal, which holds entry ", at->sequence));
  }
  return absl::OkStatus();
}

absl::Status AccountJournalCheck::Current(std::optional<Position>& position) const {
  position.reset();
  if (!journal_->Valid()) {
    if (journal_->status().ok()) return absl::OkStatus();
    return absl::UnavailableError(
        absl::StrCat("reading the journal: ", journal_->status().ToString()));
  }
  const absl::string_view key(journal_->key().data(), journal_->key().size());
  const std::optional<uint64_t> sequence = JournalKeySequence(key);
  const absl::string_view account_id =
      sequence.has_value() ? key.substr(0, key.size() - kSequenceSuffixBytes) : key;
  if (!sequence.has_value() || account_id.find('\0') != absl::string_view::npos) {
    return Corrupt(
        absl::StrCat("the journal holds a key that is not a journal key: ", Quoted(key)));
  }
  position = Position{.account_id = account_id, .sequence = *sequence};
  return absl::OkStatus();
}

}  // namespace ledger::storage
