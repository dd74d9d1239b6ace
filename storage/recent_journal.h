// Defines `RecentJournal`: the journal entries (History) the applier has reached since the last
// checkpoint, by account. RocksDB receives them only at a checkpoint, as one sorted table file
// ingested whole (RocksDbStore::Checkpoint); until then History reads them from here, merged with
// what RocksDB holds. Inserting each entry into RocksDB's memtable cost most of the applier's CPU
// once the idempotency records had left it (docs/benchmarks.md): a skiplist search per entry.
#ifndef LEDGER_STORAGE_RECENT_JOURNAL_H_
#define LEDGER_STORAGE_RECENT_JOURNAL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace ledger::storage {

// Thread-safe.
class RecentJournal {
 public:
  struct Entry {
    uint64_t sequence = 0;
    std::string value;  // The encoded JournalEntry, as RocksDB stores it.
  };
  // Entries by the account's journal key prefix (JournalPrefix), oldest first.
  using Entries = absl::flat_hash_map<std::string, std::vector<Entry>>;

  // A journal entry: its key (JournalKey) and value.
  struct Put {
    absl::string_view key;
    absl::string_view value;
  };
  // Adds every put whose key is a journal key (JournalKeySequence), all under one lock (a lock
  // per entry showed in a follower's profile under Apply load); returns how many were not, and
  // were left out.
  size_t Add(absl::Span<const Put> puts) ABSL_LOCKS_EXCLUDED(mu_);
  // The same for one: false, adding nothing, when `key` is not a journal key.
  bool Add(absl::string_view key, absl::string_view value) ABSL_LOCKS_EXCLUDED(mu_) {
    const Put put{.key = key, .value = value};
    return Add(absl::MakeConstSpan(&put, 1)) == 0;
  }

  // The account's entries held here with a sequence number of at most `through`, by sequence.
  std::map<uint64_t, std::string> Read(absl::string_view prefix, uint64_t through) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // A checkpoint's first step: everything held so far, for the checkpoint to write, and still
  // read from here until Release. O(1); one seal at a time.
  std::shared_ptr<const Entries> Seal() ABSL_LOCKS_EXCLUDED(mu_);
  // With `written`, RocksDB has the sealed entries and they are dropped; without, they are held
  // again (before the newer ones).
  void Release(bool written) ABSL_LOCKS_EXCLUDED(mu_);

  // Calls `write` with each sealed entry's key and value in RocksDB's order (account by account,
  // each by sequence): what the checkpoint's table holds. Stops when `write` returns false, and
  // then returns false. The keys are made one at a time, each passed to `write` before the
  // next: making all of them first held about 20 MB more for a checkpoint of the soak's load
  // (4,000 Deposits/s), which its samples saw as RSS spikes during checkpoints.
  static bool ForEachInTableOrder(
      const Entries& entries,
      const std::function<bool(absl::string_view key, absl::string_view value)>& write);

  // Entries held, and their values' bytes (for tests and the memory metric).
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t bytes() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  Entries current_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const Entries> sealed_ ABSL_GUARDED_BY(mu_);
  size_t current_count_ ABSL_GUARDED_BY(mu_) = 0;
  size_t sealed_count_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t current_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t sealed_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ledger::storage

#endif  // LEDGER_STORAGE_RECENT_JOURNAL_H_
