// Defines `RocksDbStore`, the LedgerStore on RocksDB: it opens (or refuses) a data directory,
// writes each shard batch as one WriteBatch, recovers the accounts at start-up and reads an
// account's journal for History.
#ifndef LEDGER_STORAGE_ROCKSDB_STORE_H_
#define LEDGER_STORAGE_ROCKSDB_STORE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/steady_wait.h"
#include "storage/data_directory.h"
#include "storage/ledger_storage.h"
#include "storage/local_log.h"
#include "storage/raft_log.h"
#include "storage/recent_journal.h"
#include "storage/recent_requests.h"
#include "storage/replicated_log.h"
#include "storage/unapplied_records.h"

namespace rocksdb {
class ColumnFamilyHandle;
class DB;
struct ReadOptions;
class WriteBatch;
}  // namespace rocksdb

namespace ledger::storage {

// What an acknowledged write survives; see docs/architecture.md, "Durability".
enum class Durability {
  kSync,   // fsync before OK: survives a crash of the process or of the machine.
  kAsync,  // written to the OS before OK: survives a crash of the process, not of the machine.
  kNone,   // memory only: nothing survives a restart. No RocksDbStore is opened.
};

// "sync", "async" or "none".
absl::string_view DurabilityName(Durability durability);
// InvalidArgument naming the accepted values for anything else.
absl::StatusOr<Durability> ParseDurability(absl::string_view name);

// The data directory's format; a directory written with another version is refused.
//  1: RocksDB alone, with its own write-ahead log.
//  2: the journal's log (LocalLog, in kLogDirectory) is the truth; RocksDB holds the state derived
//     from it, written without its own WAL, and the log position it has applied.
// `ledgerd upgrade` turns version 1 into 2.
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr uint32_t kOldestUpgradableFormatVersion = 1;
// The log's directory, inside the data directory.
inline constexpr absl::string_view kLogDirectory = "ledger_log";

// What RocksDB may hold in memory, whatever the data on disk: the memtables of every column family
// together (the write buffer manager flushes them beyond it), and one LRU block cache that holds
// the data blocks read and every table's index and filter blocks. Both are bounds on what
// RocksDB allocates, not on the process (see docs/operations.md, "Memory").
inline constexpr int64_t kMemtableBytes = int64_t{64} << 20;
inline constexpr int64_t kBlockCacheBytes = int64_t{32} << 20;
inline constexpr int64_t kRecentRecordsCheckpointBytes = int64_t{16} << 20;

// A replica of a three-node cluster (issue 32): the store's log is a RaftLog, and an entry is
// committed once a majority of the replicas hold it.
struct ClusterOptions {
  uint64_t node_id = 0;
  // Every member, this node included, at the address the replicas reach each other on.
  std::vector<RaftPeer> peers;
  // Where this node listens for the others; empty: its own address in `peers`.
  std::string bind_address;
  // libraft's log, term and vote; empty: kRaftDirectory inside the data directory.
  std::string raft_dir;
  absl::Duration election_timeout = absl::Milliseconds(300);
  absl::Duration heartbeat_interval = absl::Milliseconds(50);
  // libraft takes a snapshot every this many entries or 64 MiB of them
  // (RaftLogOptions::snapshot_threshold and snapshot_bytes).
  unsigned snapshot_entries = 65536;
  // Group writes the leader keeps in flight at once (LedgerStore::GroupWritesInFlight): above
  // 1, the next group is proposed while a majority writes the one before. 1 by default: on one
  // machine's CPU, more in flight made smaller entries and cost more (docs/replication.md 9.2).
  int writes_in_flight = 1;
  // Called with the ledger id this data directory holds before the replica joins the cluster
  // (before libraft starts): non-OK refuses the directory with that reason. ledgerd asks the
  // other members which ledger they hold (server/ledger_id_check.h); unset, nothing is checked.
  std::function<absl::Status(const std::string& ledger_id)> check_ledger_id;
};

// libraft's directory inside a replica's data directory. Its presence is what marks the data
// directory as a replica's: a single node refuses to open it, and a replica refuses a single
// node's ledger.
inline constexpr absl::string_view kRaftDirectory = "raft";

struct StoreOptions {
  std::string data_dir = "./data";
  // Set: this store is a replica of a cluster. Durability is then the cluster's (libraft syncs
  // every entry on a majority before it commits), whatever `durability` says.
  std::optional<ClusterOptions> cluster;
  Durability durability = Durability::kSync;  // kSync or kAsync.
  // Idempotency records older than this are purged when RocksDB compacts them.
  absl::Duration idempotency_ttl = absl::Hours(24);
  // Wall clock for the purge; empty means absl::Now.
  std::function<absl::Time()> clock;
  // Recorded in a new directory's format marker.
  std::string created_by = "ledgerd";
  // Init only: the new ledger's id, 32 lowercase hexadecimal digits; empty: a random one. The
  // three replicas of a cluster are made with one id (`ledgerd init --ledger_id`).
  std::string ledger_id;
  // The size of a new log segment (preallocated).
  int64_t log_segment_bytes = kDefaultLogSegmentBytes;
  // A checkpoint also runs once the idempotency records and journal entries held in memory
  // (RecentRequests, RecentJournal) reach this many bytes of keys and values, whether or not a
  // segment is full: it bounds their memory (about 2.5 times this in RSS, measured).
  int64_t recent_records_checkpoint_bytes = kRecentRecordsCheckpointBytes;
  // The log kept behind the checkpoints for watchers (Watch, ledgerd --watch_retention): the
  // newest segments holding at least `watch_retention_bytes`, and every segment last written
  // within `watch_retention_age` (by its modification time). Whole segments: each takes
  // log_segment_bytes on disk. 0: only what the next start needs.
  int64_t watch_retention_bytes = 0;
  absl::Duration watch_retention_age = absl::ZeroDuration();
};

// OK when `id` is a ledger id: 32 lowercase hexadecimal digits. InvalidArgument saying so
// otherwise.
absl::Status CheckLedgerId(absl::string_view id);

// What `ledgerd upgrade` did.
struct UpgradeReport {
  uint32_t from_version = 0;  // kFormatVersion when the directory needed nothing.
  std::string ledger_id;
};

// Where tests reach inside the store: kept out of StoreOptions. Empty in production.
struct StoreTestHooks {
  // Called before every Write; a non-OK status fails that write without touching RocksDB.
  std::function<absl::Status()> write_fault;
  // Passed to the log (LocalLogOptions::fault): fails its writes, syncs or new segments.
  std::function<absl::Status(absl::string_view step)> log_fault;
  // Called on the applier thread before it applies what is queued: a test holds the applier
  // back with it to see reads wait for it (or answer without it).
  std::function<void()> before_apply;
};

// Where a backup is staged, inside the data directory: removed when the backup ends, and at open
// when a crash left it behind.
inline constexpr absl::string_view kBackupStagingDirectory = "backup_staging";
// Where a checkpoint writes the idempotency records' table before RocksDB ingests it.
inline constexpr absl::string_view kCheckpointStagingDirectory = "checkpoint_staging";
// Where a cluster replica fetches the leader's state (server/state_transfer.h): inside the data
// directory, on its filesystem, because it is renamed into place and a data directory may be a
// mount point. A successful swap, the next fetch and the next open remove it.
inline constexpr absl::string_view kStateTransferDirectory = "state_transfer";
// The log's segment size in a backup: small, since a segment's unused tail is copied too.
inline constexpr int64_t kBackupLogSegmentBytes = int64_t{4} << 20;

// Thread-safe.
class RocksDbStore final : public LedgerStorage {
 public:
  // Creates a new, empty ledger in `options.data_dir` (created when missing) and closes it: what
  // `ledgerd init` does. FailedPrecondition, naming the cause, when the directory holds anything
  // at all or cannot be written: a ledger is never created over files, so that a lost or
  // unmounted data directory is never mistaken for a new one. Returns the new ledger's id.
  static absl::StatusOr<std::string> Init(const StoreOptions& options);

  // Opens the ledger in `options.data_dir`; never creates one. FailedPrecondition, with a message
  // that names the cause and says what to do, when the directory is missing or empty (run
  // `ledgerd init`), holds anything other than a ledgerd data directory of format kFormatVersion,
  // is corrupt, cannot be read or written, or is in use by another process.
  static absl::StatusOr<std::unique_ptr<RocksDbStore>> Open(const StoreOptions& options);
  // The same, with test hooks.
  static absl::StatusOr<std::unique_ptr<RocksDbStore>> Open(const StoreOptions& options,
                                                            StoreTestHooks hooks);

  // Upgrades a data directory of an older format (kOldestUpgradableFormatVersion or later) to
  // kFormatVersion: `ledgerd upgrade`. Crash-safe: the format marker is the last thing written,
  // so a directory whose upgrade was cut short is still of its old version and the command can
  // run again. The directory must not be in use.
  static absl::StatusOr<UpgradeReport> Upgrade(const StoreOptions& options);

  // Applies what is queued, checkpoints (every entry applied is flushed to RocksDB's tables and
  // the log segments behind it are deleted, so that the next start replays nothing) and closes.
  ~RocksDbStore() override;

  // The newest position in the log, and the newest applied to RocksDB (for tests and metrics).
  uint64_t log_position() const override { return appended_.load(std::memory_order_acquire); }
  uint64_t applied_position() const ABSL_LOCKS_EXCLUDED(apply_mu_);
  // Writes everything applied to RocksDB's tables and deletes the log segments behind it.
  absl::Status Checkpoint() ABSL_LOCKS_EXCLUDED(mu_, checkpoint_mu_, apply_write_mu_);
  // The log's segment files now (for tests and backups), and the bytes they take.
  std::vector<std::string> LogSegments() const { return log_->SegmentPaths(); }
  int64_t LogDiskBytes() const { return log_->DiskBytes(); }
  // Makes a consistent copy of the ledger in the data directory's kBackupStagingDirectory while
  // the store serves: a checkpoint, then RocksDB's checkpoint (hard links to its tables) with
  // the applier held, then a copy of the log's entries after it, up to the newest acknowledged.
  // FailedPrecondition while another copy is staged (one at a time); Unavailable when the store
  // fails, and then nothing is left staged. Any thread but the journal's; it reads the disk.
  absl::StatusOr<StagedBackup> StageBackup() override
      ABSL_LOCKS_EXCLUDED(mu_, checkpoint_mu_, apply_write_mu_);
  // Removes the staged copy; the next StageBackup may then run.
  void DiscardStagedBackup() override;

  // Checkpoints done since the store was opened.
  uint64_t checkpoints() const { return checkpoints_.load(std::memory_order_relaxed); }
  // Whether RocksDB compacts nothing for now, as it reports for every family: true from Open
  // until ForEachAccount has loaded the accounts (or a first checkpoint), false after.
  bool CompactionsDeferred() const;
  // Checkpoints that failed since then (Checkpoint's or the applier's). The applier tries again
  // at most once a second (kCheckpointRetryInterval) while they fail.
  uint64_t checkpoint_failures() const {
    return checkpoint_failures_.load(std::memory_order_relaxed);
  }
  LogProgress log_progress() const override {
    return {.position = log_position(),
            .applied_position = applied_position(),
            .disk_bytes = LogDiskBytes(),
            .checkpoints = checkpoints(),
            .checkpoint_failures = checkpoint_failures()};
  }

  using LedgerStore::Write;
  absl::Status WriteGroup(absl::Span<const BatchWrite* const> batches) override;
  // A replica's: ClusterOptions::writes_in_flight, each a Raft proposal; a single node's: 1.
  int GroupWritesInFlight() const override;
  void StartGroupWrite(absl::Span<const BatchWrite* const> batches, bool behind_writes_in_flight,
                       GroupWritten written) override;
  absl::StatusOr<std::optional<RequestRecord>> FindRequest(absl::string_view account_id,
                                                           absl::string_view request_id) override;
  // Reads only RocksDB's memtables and block cache (ReadOptions::read_tier = kBlockCacheTier);
  // a key its bloom filters rule out is answered without a read.
  absl::StatusOr<MemoryLookup> FindRequestInMemory(absl::string_view account_id,
                                                   absl::string_view request_id) override;
  // With `may_block`, one RocksDB MultiGet for the keys RecentRequests does not hold.
  std::vector<absl::StatusOr<MemoryLookup>> FindRequests(absl::Span<const RequestKeyRef> keys,
                                                         bool may_block) override;

  // Calls `load` for every stored account, in key order, after checking that it equals its
  // newest journal entry (AccountJournalCheck): DataLoss, naming the first account that does not,
  // and then `load` has been called only for the accounts before it. One forward pass over the
  // accounts and the journal. Start-up only.
  absl::Status ForEachAccount(
      const std::function<void(std::string account_id, const AccountState& state)>& load) override;

  // DataLoss when the stored account does not equal its newest journal entry.
  absl::StatusOr<std::optional<AccountState>> FindAccount(absl::string_view account_id) override;

  // Up to `limit` journal entries of the account, newest first, starting at sequence number
  // `start` (0: the newest).
  absl::StatusOr<HistoryPage> ReadHistory(absl::string_view account_id, uint64_t start,
                                          int32_t limit) override;

  absl::StatusOr<std::optional<TransferRecord>> FindTransfer(absl::string_view transfer_id,
                                                             absl::string_view from) override;
  absl::StatusOr<std::optional<CreditReceipt>> FindCredit(absl::string_view transfer_id) override;
  // Memtables and block cache only, as FindRequestInMemory.
  absl::StatusOr<TransferLookup> FindTransferInMemory(absl::string_view transfer_id,
                                                      absl::string_view from) override;
  absl::StatusOr<CreditLookup> FindCreditInMemory(absl::string_view transfer_id) override;
  absl::StatusOr<std::vector<TransferRecord>> FindPendingTransfers(
      absl::string_view transfer_id) override;
  // A transfer's record for GetTransfer: its final record, else a pending one (of whichever
  // source: two only when a client raced one id from two sources); nullopt when none.
  absl::StatusOr<std::optional<TransferRecord>> ReadTransfer(
      absl::string_view transfer_id) override;
  // Calls `load` for every transfer recorded as pending. Start-up only.
  absl::Status ForEachPendingTransfer(
      const std::function<void(std::string transfer_id, const TransferRecord& record)>& load)
      override;

  // Idempotency records on disk now, expired or not (for tests and operators).
  absl::StatusOr<int64_t> CountRequestRecords();

  // What RocksDB holds in memory now (for tests and ledger_store_memory_bytes). Unavailable
  // while the database is closed after a failed write; never reopens it. Any thread.
  absl::StatusOr<StoreMemory> Memory() override ABSL_LOCKS_EXCLUDED(mu_);

  // Checkpoints (the idempotency records held in memory reach RocksDB) and compacts the
  // idempotency records, purging the expired ones now.
  absl::Status PurgeExpiredRequests();

  // OK while the data directory is in place; from the first check that finds it deleted,
  // replaced or unmounted, Unavailable for good, and every write is refused. Cheap (a few system
  // calls); any thread.
  absl::Status CheckDataDirectory() override { return guard_->Check(); }

  // The random id `ledgerd init` gave this ledger.
  const std::string& ledger_id() const override { return ledger_id_; }

  std::optional<RaftStatus> replica_status() const override;
  absl::StatusOr<std::unique_ptr<LogReader>> NewLogReader(uint64_t from) const override {
    return log_->NewReader(from);
  }
  uint64_t first_log_position() const override { return log_->first_position(); }
  // Served by the applier thread between two batches: the one place where the derived state is
  // exactly the applied position's (ApplyEntries writes the states before applied_ is raised).
  absl::StatusOr<AccountsAt> ReadAccountsAtApplied(
      const std::vector<std::string>& account_ids) override ABSL_LOCKS_EXCLUDED(apply_mu_);
  absl::Status CatchUpAsLeader() override;
  absl::Status ConfirmLeadership() override;

 private:
  // Encoded account states by account key.
  using AccountStates = absl::flat_hash_map<std::string, std::string>;
  struct Handles;
  struct CommitFeed;
  // A durable log entry waiting for the applier.
  struct Unapplied {
    uint64_t position = 0;
    std::string payload;
  };
  RocksDbStore(const StoreOptions& options, StoreTestHooks hooks,
               std::unique_ptr<DataDirectoryGuard> guard, std::unique_ptr<Handles> handles,
               std::unique_ptr<ReplicatedLog> log, RaftLog* raft,
               std::shared_ptr<CommitFeed> commit_feed);

  // Opens the database; with `create`, makes a new one in a directory already checked to be
  // empty, and writes its format marker. `format_version` receives the directory's version;
  // without it, only kFormatVersion is accepted.
  // With `defer_compactions`, RocksDB compacts nothing until ResumeCompactions.
  static absl::StatusOr<std::unique_ptr<Handles>> OpenHandles(const StoreOptions& options,
                                                              bool create,
                                                              uint32_t* format_version = nullptr,
                                                              bool defer_compactions = false);
  // Lets RocksDB compact again after an Open deferred it; at once when it did not.
  static void ResumeCompactions(Handles& handles);
  // A format marker of this version, for a new ledger (a new ledger id) or `ledger_id`, written
  // and synced together with an applied log position of 0.
  static absl::Status WriteFormatMarker(Handles& handles, const StoreOptions& options,
                                        const std::string& ledger_id = "");
  // Refuses a database whose format marker is missing or not of a version it reads: this
  // version's, or also older ones when `format_version` receives the version.
  static absl::Status ReadFormatMarker(Handles& handles, const std::string& dir,
                                       uint32_t* format_version);
  // The log position the database has applied.
  static absl::StatusOr<uint64_t> ReadAppliedPosition(Handles& handles);
  // The database's applied position, refused (DataLoss) unless the log holds every entry after it.
  static absl::StatusOr<uint64_t> ReplayStart(Handles& handles, const ReplicatedLog& log);
  // Applies the log's entries after the database's applied position, every family into RocksDB
  // (a reopen after a failed write, which keeps what memory holds); returns the last applied.
  static absl::StatusOr<uint64_t> Replay(Handles& handles, const ReplicatedLog& log);
  // Start-up, before the applier runs: applies the log's entries after the applied position as
  // the applier does (accounts and journal entries into memory, idempotency records as the
  // journal thread adds them; ForEachAccount loads the accounts from there). Far cheaper than
  // Replay's inserts of every change into RocksDB's memtables.
  absl::Status CatchUpWithLog() ABSL_LOCKS_EXCLUDED(mu_, apply_mu_, checkpoint_mu_);
  // Adds `payload`'s changes to `write`.
  static absl::Status AddChanges(Handles& handles, absl::string_view payload,
                                 rocksdb::WriteBatch& write);
  // A checkpoint's steps, with checkpoint_mu_ held (Checkpoint, StageBackup): `step_done` is
  // told when each ends. Returns the applied position the tables now hold.
  absl::StatusOr<uint64_t> CheckpointLocked(
      const std::function<void(absl::string_view step)>& step_done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(checkpoint_mu_) ABSL_LOCKS_EXCLUDED(mu_, apply_write_mu_);
  // The first step of a checkpoint, with the applier held (so the states and the position
  // agree): moves the account states kept in memory aside (checkpointing_accounts_, which
  // FindAccount still reads) and returns the applied position they are the states at.
  uint64_t SwapOutDirtyAccountsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_write_mu_);
  // The second, while the applier goes on: writes those states, and the idempotency records and
  // journal entries sealed from RecentRequests and RecentJournal, as a table file per family,
  // and has RocksDB ingest them all at once (durable once it returns).
  absl::Status IngestRecentRecords(const RecentRequests::Records& requests,
                                   const RecentJournal::Entries& journal,
                                   const AccountStates& accounts) ABSL_LOCKS_EXCLUDED(mu_);
  // The third: records `applied` as the position the tables hold.
  absl::Status WriteCheckpoint(uint64_t applied) ABSL_LOCKS_EXCLUDED(mu_);
  // After the second: the states are RocksDB's when `written`, else they go back into the map
  // under any newer ones.
  void ReleaseCheckpointingAccounts(bool written) ABSL_LOCKS_EXCLUDED(dirty_mu_);
  // The keys' and values' bytes RecentRequests and RecentJournal hold.
  int64_t RecentRecordsBytes() const { return recent_requests_.bytes() + recent_journal_.bytes(); }
  // The fourth: flushes every family at once.
  absl::Status FlushTables() ABSL_LOCKS_EXCLUDED(mu_);
  // The log position before which checkpoints may delete segments: a staged backup's copy needs
  // the entries after its applied position.
  uint64_t DropLimit(uint64_t applied) const;
  // The oldest position that options_.watch_retention_* keeps (UINT64_MAX: none).
  uint64_t RetentionLimit() const;
  // A replica: `payload`, committed at `position` (by this node's WriteGroup or by another
  // leader's), goes to the applier, with its records where WriteGroup puts them on a single
  // node. On RaftLog's loop thread, in position order.
  void FollowCommitted(uint64_t position, absl::string_view payload);
  // The committed entry at `position` goes to the applier, its idempotency records to
  // RecentRequests and its transfer records to UnappliedRecords, and it becomes the newest
  // acknowledged position: what WriteGroup does after a single node's Append, and FollowCommitted
  // for every entry a replica's cluster commits.
  void TakeCommitted(uint64_t position, std::string payload);
  // What WriteGroup and StartGroupWrite do before the log: the store's checks, the repair of a
  // poisoned log, the wait for the applier's room; returns the group's log entry.
  absl::StatusOr<std::string> BeginGroupWrite(absl::Span<const BatchWrite* const> batches)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // The log entry of a group.
  std::string EncodeGroup(absl::Span<const BatchWrite* const> batches);
  // The applier thread: writes durable entries to RocksDB in large batches, without its WAL.
  void RunApplier();
  // Writes `entries` (those after the applied position) to RocksDB.
  absl::Status ApplyEntries(const std::vector<Unapplied>& entries, uint64_t after)
      ABSL_LOCKS_EXCLUDED(mu_);
  // After `entries` are applied: their records leave UnappliedRecords.
  void ForgetApplied(const std::vector<Unapplied>& entries);
  // Waits until the applier has reached every entry acknowledged before the call, so that a
  // read sees every acknowledged write; Unavailable when it cannot within kApplyWait.
  absl::Status AwaitApplied() ABSL_LOCKS_EXCLUDED(apply_mu_);
  // The one way every read reaches the database: with `await_applied`, waits for the applier to
  // reach every write acknowledged before (AwaitApplied), then runs `read` under the shared lock.
  // Unavailable while the database is closed after a failed write (the applier reopens it).
  absl::Status ReadWith(const std::function<absl::Status(Handles& handles)>& read,
                        bool await_applied = true) ABSL_LOCKS_EXCLUDED(mu_);
  // An account's state as the derived state holds it (the dirty map, then the checkpointing
  // one, then RocksDB); `in_memory` says which.
  absl::StatusOr<std::optional<AccountState>> LookUpAccount(Handles& handles,
                                                            absl::string_view account_id,
                                                            bool& in_memory);

  // Reads the value of `key` in the default column family: `value` nullopt when absent;
  // `answered` false only when `memory_only` and the answer may be on disk.
  struct DefaultRead {
    bool answered = true;
    std::optional<std::string> value = std::nullopt;
  };
  absl::StatusOr<DefaultRead> GetDefault(const std::string& key, absl::string_view what,
                                         bool memory_only);
  absl::StatusOr<TransferLookup> LookUpTransfer(absl::string_view transfer_id,
                                                absl::string_view from, bool memory_only);
  absl::StatusOr<CreditLookup> LookUpCredit(absl::string_view transfer_id, bool memory_only);
  // FindRequest and FindRequestInMemory: `answered` false only when `read_options` forbid I/O.
  absl::StatusOr<MemoryLookup> LookUpRequest(absl::string_view account_id,
                                             absl::string_view request_id,
                                             const rocksdb::ReadOptions& read_options);
  // Closes the database after `failure`; a later use reopens it.
  void CloseAfterFailureLocked(const absl::Status& failure) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tries to reopen the closed database and replay the log into it, at most once per
  // kReopenInterval.
  absl::Status ReopenLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ClosedError() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const StoreOptions options_;
  const StoreTestHooks hooks_;
  const std::unique_ptr<DataDirectoryGuard> guard_;
  const std::string ledger_id_;
  // Shared by every read and write; exclusive to close the database after a failed write and to
  // reopen it.
  mutable absl::Mutex mu_;
  // Null while closed after a failed write; closed_ says so without the lock.
  std::unique_ptr<Handles> handles_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> closed_{false};
  // Bumped whenever handles_ changes, so that two failed writes close one database only once.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  absl::Status reopen_failure_ ABSL_GUARDED_BY(mu_);
  SteadyTime last_reopen_attempt_ ABSL_GUARDED_BY(mu_);

  // The log (a LocalLog, behind the ReplicatedLog seam); the transfer records of its entries the
  // applier has not reached; the idempotency records of its entries since the last checkpoint
  // (the applier does not write them); the journal entries the applier reached since the last
  // checkpoint (which writes them).
  const std::unique_ptr<ReplicatedLog> log_;
  // The same log when it is a replica's RaftLog; null on a single node.
  RaftLog* const raft_;
  // A replica's committed entries, from RaftLog's loop thread to FollowCommitted.
  const std::shared_ptr<CommitFeed> commit_feed_;
  UnappliedRecords unapplied_;
  RecentRequests recent_requests_;
  RecentJournal recent_journal_;
  // Serialises WriteGroup and StartGroupWrite: the log's positions are the order entries reach
  // the applier.
  absl::Mutex write_mu_;
  std::optional<SteadyTime> last_repair_attempt_ ABSL_GUARDED_BY(write_mu_);
  // The newest position appended to the log (acknowledged once WriteGroup returns).
  std::atomic<uint64_t> appended_{0};
  std::atomic<uint64_t> checkpoints_{0};
  std::atomic<uint64_t> checkpoint_failures_{0};
  // A staged backup: one at a time, and the oldest log position its copy still reads.
  std::atomic<bool> backup_staged_{false};
  std::atomic<uint64_t> backup_pin_{UINT64_MAX};

  mutable absl::Mutex apply_mu_;
  // Wakes the timed waits on apply_mu_'s state (absl's own would follow the wall clock):
  // notified after every change of what they wait for.
  mutable SteadyCondVar apply_changed_;
  std::deque<Unapplied> unapplied_entries_ ABSL_GUARDED_BY(apply_mu_);
  int64_t unapplied_bytes_ ABSL_GUARDED_BY(apply_mu_) = 0;
  // The newest position whose changes are in the open database.
  uint64_t applied_ ABSL_GUARDED_BY(apply_mu_) = 0;
  bool applier_stopping_ ABSL_GUARDED_BY(apply_mu_) = false;
  int readers_waiting_ ABSL_GUARDED_BY(apply_mu_) = 0;
  // ReadAccountsAtApplied's requests, for the applier's next turn.
  struct SnapshotRequest {
    const std::vector<std::string>* account_ids = nullptr;
    absl::StatusOr<AccountsAt> result = absl::UnavailableError("the store is stopping");
    bool done = false;
  };
  std::vector<SnapshotRequest*> snapshot_requests_ ABSL_GUARDED_BY(apply_mu_);
  // The applier thread, between two batches: answers `requests` at position `applied`.
  void ServeSnapshots(const std::vector<SnapshotRequest*>& requests, uint64_t applied)
      ABSL_LOCKS_EXCLUDED(apply_mu_);
  // One checkpoint (or backup's checkpoint) at a time.
  absl::Mutex checkpoint_mu_ ABSL_ACQUIRED_BEFORE(apply_write_mu_);
  // Serialises the applier's writes with a checkpoint's write.
  absl::Mutex apply_write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // Account states applied since the last checkpoint, by account key: written to RocksDB only by
  // the next checkpoint, and read from here until then (FindAccount).
  absl::Mutex dirty_mu_;
  AccountStates dirty_accounts_ ABSL_GUARDED_BY(dirty_mu_);
  // The states a checkpoint is writing (never changed once set): read until RocksDB has them.
  std::shared_ptr<const AccountStates> checkpointing_accounts_ ABSL_GUARDED_BY(dirty_mu_);
  std::thread applier_;
};

}  // namespace ledger::storage

#endif  // LEDGER_STORAGE_ROCKSDB_STORE_H_
