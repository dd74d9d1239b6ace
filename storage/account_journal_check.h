// Defines `AccountJournalCheck`, which holds each account read from disk against its newest
// journal entry: a recovered account must equal the last journal entry for it (same sequence
// number, balance = balance_after) and no entry may follow it. Both are written in one WriteBatch,
// so a disagreement means the data directory is corrupt, and a corrupt ledger is never served.
#ifndef LEDGER_STORAGE_ACCOUNT_JOURNAL_CHECK_H_
#define LEDGER_STORAGE_ACCOUNT_JOURNAL_CHECK_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "shard/ledger_store.h"

namespace rocksdb {
class Iterator;
}  // namespace rocksdb

namespace ledger::storage {

// Owned by one reader; not thread-safe.
//
// Disagreement is DataLoss naming the account, not a LEDGER_CHECK: the bytes come from disk, not
// from this program's logic, so the caller refuses to start (or to use the account) with a message
// an operator can act on, instead of aborting with a core dump; either way nothing is served.
class AccountJournalCheck {
 public:
  // `journal` iterates the journal column family (unpositioned); it must outlive this check.
  explicit AccountJournalCheck(rocksdb::Iterator* journal) : journal_(journal) {}

  // Start-up: call for every stored account in key order, then Finish(). The journal is read in
  // one forward pass merged with the accounts' pass: an account's older entries are stepped over
  // when there are at most kStepsBeforeSeek of them, else jumped with one Seek, so the cost grows
  // with the number of accounts, not with the length of their histories. DataLoss, naming the account, when its
  // newest entry is missing, disagrees with it or is followed by a later one, or when the journal
  // holds entries of an account that has no record.
  absl::Status CheckNext(absl::string_view account_id, const AccountState& state);
  // After the last CheckNext: DataLoss when journal entries follow the last account's (with
  // `next_account`, the accounts of a range checked apart: entries of an account before it).
  absl::Status Finish(std::optional<absl::string_view> next_account = std::nullopt);
  // Before the first CheckNext, for a range of the accounts that does not start with the first:
  // the journal from `first_account`'s entries on. The range before it answers for the entries
  // between the two (its Finish with `next_account`).
  void StartAt(absl::string_view first_account);

  // One account on its own (reloading it while serving): the same agreement, found by one Seek.
  absl::Status CheckOne(absl::string_view account_id, const AccountState& state);

  // The most older entries of one account stepped over with Next; more are jumped with one Seek.
  // A Seek positions every table of the LSM, and costs about as much as 100 Nexts: 1M accounts
  // of 20 entries each started 1.2 to 1.5 s sooner stepping than seeking (of 4.5 s), 100,000 of
  // 100 each as fast either way (docs/benchmarks-history.md, "Start-up: step, do not seek").
  static constexpr int kStepsBeforeSeek = 48;

 private:
  // Where the iterator stands: an entry's account and sequence; nullopt at the end. DataLoss for
  // a key that is not a journal key, Unavailable for a read error.
  // account_id points into the iterator's key: valid until the iterator moves.
  struct Position {
    absl::string_view account_id;
    uint64_t sequence = 0;
  };
  absl::Status Current(std::optional<Position>& position) const;
  // With the iterator at the first entry not older than `state.sequence` of `account_id`, checks
  // that it is that entry, that it agrees with `state`, and that no later one follows.
  absl::Status CheckNewestEntry(absl::string_view account_id, const AccountState& state);

  rocksdb::Iterator* const journal_;
  bool started_ = false;
};

}  // namespace ledger::storage

#endif  // LEDGER_STORAGE_ACCOUNT_JOURNAL_CHECK_H_
