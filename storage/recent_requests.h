// Defines `RecentRequests`: the idempotency records written since the last checkpoint. RocksDB
// receives them only at a checkpoint, sorted into one table file ingested whole
// (RocksDbStore::Checkpoint), and until then every lookup is answered from here. Inserting each
// record into RocksDB's memtable as the applier reached it cost about a quarter of a durable
// Apply's CPU (docs/benchmarks.md): random request ids land anywhere in a skiplist of millions
// of keys, and every lookup of a new request_id searched that skiplist too.
#ifndef LEDGER_STORAGE_RECENT_REQUESTS_H_
#define LEDGER_STORAGE_RECENT_REQUESTS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace ledger::storage {

// Thread-safe.
class RecentRequests {
 public:
  // Records by RocksDB key; a value of nullopt is a deletion. A node map: a flat map's slot array
  // holds the records themselves, and at a few hundred thousand records (a checkpoint's worth
  // at 4,000 Deposits/s) each doubling of it allocated 19 MB more while the old array was
  // still held, which the 30-minute soak saw as 10-28 MB jumps of ledgerd's RSS. A node map's
  // array holds pointers: 8 bytes a record.
  using Records = absl::node_hash_map<std::string, std::optional<std::string>>;

  // One change a durable log entry made: `key` set to `value` (nullopt: deleted).
  struct Change {
    absl::string_view key;
    std::optional<absl::string_view> value;
  };
  // Durable log entries made `changes`, in order (a later change of a key wins). All under one
  // lock: a lock per record was a tenth of a follower's Raft thread under Apply load.
  void Add(absl::Span<const Change> changes) ABSL_LOCKS_EXCLUDED(mu_);
  void Add(absl::string_view key, std::optional<absl::string_view> value) ABSL_LOCKS_EXCLUDED(mu_) {
    const Change change{.key = key, .value = value};
    Add(absl::MakeConstSpan(&change, 1));
  }

  // The newest record of `key` held here: nullopt when there is none (RocksDB has the answer),
  // else the value, itself nullopt when the key was deleted.
  std::optional<std::optional<std::string>> Find(absl::string_view key) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // The first step of a checkpoint: everything held so far, for the checkpoint to write. It is
  // still answered from here until Release. O(1); one seal at a time.
  std::shared_ptr<const Records> Seal() ABSL_LOCKS_EXCLUDED(mu_);
  // The last: with `written`, RocksDB has the sealed records and they are dropped; without, they
  // go back among the records held (under any newer ones).
  void Release(bool written) ABSL_LOCKS_EXCLUDED(mu_);

  // The sealed records in key order: what the checkpoint's table holds.
  static std::vector<const Records::value_type*> SortedForTable(const Records& records);

  // Records held, and their keys' and values' bytes (for tests and the memory metric).
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t bytes() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  Records current_ ABSL_GUARDED_BY(mu_);
  // What a checkpoint is writing: never changed once sealed.
  std::shared_ptr<const Records> sealed_ ABSL_GUARDED_BY(mu_);
  int64_t current_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t sealed_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ledger::storage

#endif  // LEDGER_STORAGE_RECENT_REQUESTS_H_
