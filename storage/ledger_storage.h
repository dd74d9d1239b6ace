// Defines `LedgerStorage`, everything the server asks of a durable ledger: the shards' reads and
// writes (LedgerStore, shard/ledger_store.h), the start-up load, the reads of History and
// GetTransfer, backups, and what the metrics report. The server and its services hold a
// LedgerStorage, never a RocksDbStore: the RocksDB store on the local log implements it, and the
// replicated store of issue 32 will.
#ifndef LEDGER_STORAGE_LEDGER_STORAGE_H_
#define LEDGER_STORAGE_LEDGER_STORAGE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "shard/ledger_store.h"
#include "storage/raft_log.h"
#include "storage/replicated_log.h"

namespace ledger::storage {

// What the store holds in memory now (RocksDB's memtables, block cache and table readers).
struct StoreMemory {
  int64_t memtables_bytes = 0;  // Active, immutable and pinned memtables of every family.
  // The block cache's use (at most about kBlockCacheBytes), and the part of it pinned: level 0's
  // index and filter blocks, the partitions' top levels, blocks being read.
  int64_t block_cache_bytes = 0;
  int64_t block_cache_pinned_bytes = 0;
  // What the open tables hold outside the block cache (RocksDB's estimate).
  int64_t table_readers_bytes = 0;
  // Idempotency records and journal entries written since the last checkpoint, which writes them
  // to RocksDB (RecentRequests, RecentJournal): their keys' and values' bytes, at most about a
  // log segment's worth.
  int64_t recent_records_bytes = 0;
};

// A consistent copy of the ledger made by LedgerStorage::StageBackup, in `dir`, until
// DiscardStagedBackup.
struct StagedBackup {
  std::string dir;
  std::string ledger_id;
  uint32_t format_version = 0;  // The data directory's format the files are in.
  // The tables in `dir` (RocksDB's files) hold the state at this log position; `dir`/ledger_log
  // holds the entries after it, up to last_position (at least every write acknowledged before the
  // call).
  uint64_t applied_position = 0;
  uint64_t last_position = 0;
  // Every file, relative to `dir` ("000012.sst", "ledger_log/00000000000000000042.seg"), sorted.
  std::vector<std::string> files;
  // How long each step took, for the server's log: "applier held 3us, tables 41ms, position 0ms,
  // flush 80ms, RocksDB checkpoint 2ms, log copy 30ms". Only the first holds the applier (and so
  // the reads that wait for it); writes are never held.
  std::string steps;
};

// One page of an account's journal.
struct HistoryPage {
  std::vector<JournalEntry> entries;  // Newest first.
  // The sequence number the next (older) page starts at; 0 when there is none.
  uint64_t next_sequence = 0;
};

// Accounts exactly as of one log position (Watch's consistent start).
struct AccountsAt {
  uint64_t position = 0;
  std::vector<std::optional<AccountState>> states;  // By the ids asked; nullopt: never opened.
};

// The log's progress, for the metrics (ledger_log_*).
struct LogProgress {
  uint64_t position = 0;             // The newest entry appended (acknowledged).
  uint64_t applied_position = 0;     // The newest the derived state has reached.
  int64_t disk_bytes = 0;            // What the log's segments take on disk.
  uint64_t checkpoints = 0;          // Checkpoints since the store was opened.
  uint64_t checkpoint_failures = 0;  // Checkpoints that failed since then.
};

// Thread-safe.
class LedgerStorage : public LedgerStore {
 public:
  // Calls `load` for every stored account, in key order, each checked against its journal:
  // DataLoss naming the first that disagrees. Start-up only.
  virtual absl::Status ForEachAccount(
      const std::function<void(std::string account_id, const AccountState& state)>& load) = 0;
  // Calls `load` for every transfer recorded as pending. Start-up only.
  virtual absl::Status ForEachPendingTransfer(
      const std::function<void(std::string transfer_id, const TransferRecord& record)>& load) = 0;
  // Up to `limit` journal entries of the account, newest first, from sequence `start` (0: the
  // newest); every acknowledged write is in it.
  virtual absl::StatusOr<HistoryPage> ReadHistory(absl::string_view account_id, uint64_t start,
                                                  int32_t limit) = 0;
  // A transfer's record for GetTransfer: its final record, else a pending one; nullopt when none.
  virtual absl::StatusOr<std::optional<TransferRecord>> ReadTransfer(
      absl::string_view transfer_id) = 0;
  // A consistent copy of the ledger while it serves (FailedPrecondition while another is staged),
  // kept until DiscardStagedBackup.
  virtual absl::StatusOr<StagedBackup> StageBackup() = 0;
  virtual void DiscardStagedBackup() = 0;
  // Unavailable while the store cannot say (closed after a failed write).
  virtual absl::StatusOr<StoreMemory> Memory() = 0;
  virtual LogProgress log_progress() const = 0;
  // log_progress().position alone, without the rest's locks: what a watcher may read up to.
  virtual uint64_t log_position() const = 0;
  // OK while the data directory is in place; Unavailable for good once it is lost.
  virtual absl::Status CheckDataDirectory() = 0;
  // The id `ledgerd init` gave this ledger.
  virtual const std::string& ledger_id() const = 0;

  // The change stream (Watch, issue 33) reads the log itself: a reader from position `from`,
  // to be read up to log_progress().position (every entry committed and taken in, never one
  // whose write failed); OutOfRange naming the oldest position kept when `from` is older.
  virtual absl::StatusOr<std::unique_ptr<LogReader>> NewLogReader(uint64_t from) const = 0;
  // The oldest position the log keeps now.
  virtual uint64_t first_log_position() const = 0;
  // The states of `account_ids` exactly as of one position the derived state has applied, and
  // that position; the log keeps every entry after it. Blocks for the applier (at most a batch):
  // never on a gRPC thread. Unavailable once the store stops.
  virtual absl::StatusOr<AccountsAt> ReadAccountsAtApplied(
      const std::vector<std::string>& account_ids) = 0;

  // A replica of a cluster (StoreOptions::cluster): what it knows of the cluster now; nullopt on
  // a single node. Any thread.
  virtual std::optional<RaftStatus> replica_status() const { return std::nullopt; }
  // A replica that has just become the leader: commits a barrier and waits until the derived
  // state has applied everything committed before it, so that ForEachAccount and
  // ForEachPendingTransfer then load the cluster's state (docs/replication.md 9.1). A follower
  // gets FailedPrecondition; a leadership lost meanwhile, Unavailable. OK at once on a single
  // node.
  virtual absl::Status CatchUpAsLeader() { return absl::OkStatus(); }
  // A replica that leads: commits a barrier, proving that it still led the cluster once the call
  // had begun (a read served after it is not stale); the barrier's error otherwise. OK at once on
  // a single node.
  virtual absl::Status ConfirmLeadership() { return absl::OkStatus(); }
};

}  // namespace ledger::storage

#endif  // LEDGER_STORAGE_LEDGER_STORAGE_H_
