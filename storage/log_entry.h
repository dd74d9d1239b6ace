// Defines the payload of a log entry: the key-value changes one group commit makes to the state
// derived from the log, in the order they were decided. The journal thread builds it (one per
// group, every shard's batches together), LocalLog stores it, and the applier (and recovery, and
// a replica) replays it into RocksDB. Later changes to a key win, as in a RocksDB WriteBatch.
//
// Format (version 1): [u8 version][u8 flags] then changes, each
//   [u8 kind: 1 put, 2 delete][u8 family][varint key length][key]
//   and for a put [varint value length][value].
// flags bit 0 would say that a varint partition id follows the flags; no entry sets it yet (the
// replication issue decides whether partitions need one).
#ifndef LEDGER_STORAGE_LOG_ENTRY_H_
#define LEDGER_STORAGE_LOG_ENTRY_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ledger::storage {

// The column families of the derived state, as numbered in log entries: never renumber.
enum class LogFamily : uint8_t { kDefault = 0, kAccounts = 1, kJournal = 2, kRequests = 3 };
inline constexpr int kLogFamilies = 4;

// One change of an entry. `value` is nullopt for a delete.
struct LogChange {
  LogFamily family = LogFamily::kDefault;
  absl::string_view key = {};
  std::optional<absl::string_view> value = std::nullopt;
};

class LogEntryBuilder {
 public:
  LogEntryBuilder();
  void Put(LogFamily family, absl::string_view key, absl::string_view value);
  void Delete(LogFamily family, absl::string_view key);
  // The payload so far; Take leaves the builder to be reset.
  const std::string& payload() const { return payload_; }
  std::string Take() { return std::move(payload_); }
  // Starts a new entry.
  void Reset();

 private:
  std::string payload_;
};

// Calls `change` for every change of `payload`, in order; DataLoss naming what is wrong when the
// payload is not a well-formed entry (nothing after the malformed part is read). An empty payload
// (a replicated log's own entry) has no change.
absl::Status ForEachLogChange(absl::string_view payload,
                              const std::function<void(const LogChange& change)>& change);

}  // namespace ledger::storage

#endif  // LEDGER_STORAGE_LOG_ENTRY_H_
