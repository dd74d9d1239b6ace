// Defines `UnappliedRecords`: the transfer records and receipts of log entries that are durable
// but not yet applied to RocksDB. A decision looks a transfer_id up without waiting for the
// applier; this answers for the entries it has not reached, so that no lookup misses a record
// because it is not yet indexed. (Idempotency records are held longer, until a checkpoint, by
// RecentRequests.)
#ifndef LEDGER_STORAGE_UNAPPLIED_RECORDS_H_
#define LEDGER_STORAGE_UNAPPLIED_RECORDS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "storage/log_entry.h"

namespace ledger::storage {

// Thread-safe.
class UnappliedRecords {
 public:
  // Whether the records of `family` are kept here: the transfer records and receipts decisions
  // look up by key. The simulator's store follows this policy.
  static bool Keeps(LogFamily family) { return family == LogFamily::kDefault; }

  // The entry at `position` set `key` to `value` (nullopt: deleted it).
  void Add(uint64_t position, LogFamily family, absl::string_view key,
           std::optional<absl::string_view> value) ABSL_LOCKS_EXCLUDED(mu_);
  // The entry at `position` is applied: its record of `key` goes, unless a later entry changed
  // the key again.
  void Forget(uint64_t position, LogFamily family, absl::string_view key) ABSL_LOCKS_EXCLUDED(mu_);

  // The newest unapplied change of `key`: nullopt when there is none (RocksDB has the answer),
  // else the value, itself nullopt when the key was deleted.
  std::optional<std::optional<std::string>> Find(LogFamily family, absl::string_view key) const
      ABSL_LOCKS_EXCLUDED(mu_);

  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Record {
    uint64_t position = 0;
    std::optional<std::string> value = std::nullopt;
  };
  static std::string MapKey(LogFamily family, absl::string_view key);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Record> records_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ledger::storage

#endif  // LEDGER_STORAGE_UNAPPLIED_RECORDS_H_
