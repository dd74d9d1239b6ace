#include "storage/rocksdb_store.h"

#include <pthread.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/check.h"
#include "rocksdb/cache.h"
#include "rocksdb/compaction_filter.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/options.h"
#include "rocksdb/perf_level.h"
#include "rocksdb/sst_file_writer.h"
#include "rocksdb/table.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/write_batch.h"
#include "storage/account_journal_check.h"
#include "storage/data_directory_swap.h"
#include "storage/journal_check_pool.h"
#include "storage/key_order.h"
#include "storage/ledger_records.pb.h"
#include "storage/log_entry.h"
#include "storage/log_segment_format.h"
#include "storage/record_codec.h"

namespace ledger::storage {
namespace {

constexpr absl::string_view kMagic = "ledgerd";
constexpr absl::string_view kFormatKey = "format";
// The log position the database has applied: 8 bytes, big-endian. Written with every applied
// batch, in the same RocksDB write, so that the tables never disagree with it.
constexpr absl::string_view kAppliedKey = "log_applied";
// Column families, in the order of Handles::families, numbered as LogFamily numbers them.
constexpr std::array<absl::string_view, kLogFamilies> kFamilyNames = {"default", "accounts",
                                                                      "journal", "requests"};
enum Family { kDefault = 0, kAccounts = 1, kJournal = 2, kRequests = 3 };
static_assert(static_cast<int>(LogFamily::kRequests) == kRequests);
// How often a closed store tries to reopen (and a poisoned log to be repaired); in between,
// writes fail at once.
constexpr absl::Duration kReopenInterval = absl::Milliseconds(200);
// How long the applier waits to try again after a checkpoint failed.
constexpr absl::Duration kCheckpointRetryInterval = absl::Seconds(1);
// How long a read waits for the applier to reach the writes acknowledged before it.
constexpr absl::Duration kApplyWait = absl::Seconds(5);
// Log entries waiting for the applier, in bytes, beyond which a group write waits for it: the
// bound on what the applier may lag (and hold in memory).
constexpr int64_t kMaxUnappliedBytes = int64_t{64} << 20;
// The applier gathers entries for at most kApplyBatchWait, or until kApplyBatchBytes are queued,
// before it writes them (at once when a read waits for it): fewer, larger RocksDB writes.
constexpr absl::Duration kApplyBatchWait = absl::Milliseconds(2);
constexpr int64_t kApplyBatchBytes = int64_t{1} << 20;
// A replay writes to RocksDB in batches of about this many bytes.
constexpr size_t kReplayBatchBytes = size_t{16} << 20;

std::string EncodePosition(uint64_t position) {
  std::string bytes(8, '\0');
  for (int i = 7; i >= 0; --i) {
    bytes[static_cast<size_t>(i)] = static_cast<char>(position & 0xff);
    position >>= 8;
  }
  return bytes;
}

std::string LogDirectory(const std::string& data_dir) {
  return absl::StrCat(data_dir, "/", kLogDirectory);
}

// Debian's Abseil has its own string_view, not std::string_view, so slices convert by hand.
absl::string_view View(const rocksdb::Slice& slice) { return {slice.data(), slice.size()}; }
rocksdb::Slice ToSlice(absl::string_view view) { return {view.data(), view.size()}; }

absl::Status FromRocks(const rocksdb::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(what, ": ", status.ToString()));
}

// Drops idempotency records older than the TTL whenever RocksDB compacts them, so they are
// purged without a scan of their own.
class ExpiredRequestFilter final : public rocksdb::CompactionFilter {
 public:
  ExpiredRequestFilter(absl::Duration ttl, std::function<absl::Time()> clock)
      : ttl_(ttl), clock_(std::move(clock)) {}

  bool Filter(int /*level*/, const rocksdb::Slice& /*key*/, const rocksdb::Slice& value,
              std::string* /*new_value*/, bool* /*value_changed*/) const override {
    absl::StatusOr<RequestRecord> record = DecodeRequest(View(value));
    if (!record.ok()) return false;  // Keep what cannot be read; recovery reports it.
    const absl::Time now = clock_ ? clock_() : absl::Now();
    return record->recorded_at + ttl_ <= now;
  }

  const char* Name() const override { return "ledgerd.ExpiredRequestFilter"; }

 private:
  const absl::Duration ttl_;
  const std::function<absl::Time()> clock_;
};

// RocksDB's warnings and errors, in ledgerd's log instead of a LOG file in the data directory:
// operators read one log, and a full disk cannot also break RocksDB's own logging (Debian's
// RocksDB 7.8 asserts when it logs to a file whose earlier write failed).
class StderrLogger final : public rocksdb::Logger {
 public:
  StderrLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list arguments) override {
    char line[1024];
    std::vsnprintf(line, sizeof(line), format, arguments);
    // DB::Open's failure also comes back as its status, which ledgerd reports in its own words
    // (OpenRefusal): printed here too, it would only precede that message as noise.
    if (absl::StrContains(line, "DB::Open() failed")) return;
    // Every backup's RocksDB checkpoint disables file deletions twice, nested (CreateCheckpoint
    // and the live-file listing inside it), and RocksDB warns about the nesting: "File Deletions
    // Disabled, but already disabled. Counter: 2", "File Deletions Enable, but not really
    // enabled. Counter: 1". Harmless (the outer enable follows, and obsolete tables are still
    // deleted after backups), and noise in the operator's log at every backup.
    if (absl::StrContains(line, "File Deletions Disabled, but already disabled") ||
        absl::StrContains(line, "File Deletions Enable, but not really enabled")) {
      return;
    }
    // The checkpoints' tables are made by SstFileWriter and ingested; RocksDB 7.8 records no
    // unique ID for an ingested file in its manifest, so it cannot cross-check them when it
    // opens them, and says so once a process (at the first checkpoint or start that opens one).
    // Expected, and not a fault.
    if (absl::StrContains(line, "opened without unique ID to verify")) return;
    std::cerr << "ledgerd: rocksdb: " << line << "\n";
  }
};

std::string Refusal(const std::string& dir, absl::string_view problem) {
  return absl::StrCat("refusing data directory ", dir, ": ", problem,
                      ". ledgerd will not start on it (it never starts empty over data it cannot "
                      "read); move the directory away or pass another --data_dir");
}

// Refuses the directory for `cause`: DataLoss (corrupt data) stays DataLoss, for which ledgerd
// exits with its own status; anything else is FailedPrecondition.
absl::Status RefusalFrom(const std::string& dir, const absl::Status& cause) {
  return absl::Status(cause.code() == absl::StatusCode::kDataLoss
                          ? absl::StatusCode::kDataLoss
                          : absl::StatusCode::kFailedPrecondition,
                      Refusal(dir, cause.message()));
}

// RocksDB reports why it cannot open a directory only as text; this names the cause from it.
absl::Status OpenRefusal(const std::string& dir, const rocksdb::Status& status) {
  const std::string text = status.ToString();
  const auto says = [&text](const char* words) { return absl::StrContains(text, words); };
  if (says("Resource temporarily unavailable") || says("lock hold by current process")) {
    return absl::FailedPreconditionError(
        absl::StrCat("data directory ", dir, " is in use by another process (", text,
                     "); stop it first or pass another --data_dir"));
  }
  std::string cause;
  if (status.IsNoSpace() || says("No space left")) {
    cause = DescribeErrno(ENOSPC);
  } else if (says("Read-only file system")) {
    cause = DescribeErrno(EROFS);
  } else if (says("Permission denied")) {
    cause = DescribeErrno(EACCES);
  } else if (says("Input/output error")) {
    cause = DescribeErrno(EIO);
  } else if (status.IsCorruption()) {
    cause = "it is corrupt";
  } else {
    cause = "RocksDB cannot open it; it may be corrupt or incomplete";
  }
  return absl::FailedPreconditionError(Refusal(dir, absl::StrCat(cause, " (", text, ")")));
}

// 128 random bits in hex, from the kernel's random source.
}  // namespace

absl::Status CheckLedgerId(absl::string_view id) {
  const bool hex = id.size() == 32 && std::all_of(id.begin(), id.end(), [](char c) {
                     return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                   });
  if (hex) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "a ledger id is 32 lowercase hexadecimal digits, as `ledgerd init` prints; got \"", id,
      "\""));
}

namespace {

std::string NewLedgerId() {
  std::random_device random;
  std::string id;
  for (int i = 0; i < 4; ++i) id += absl::StrFormat("%08x", random());
  return id;
}

// The block cache of kBlockCacheBytes that every family shares. Index and filter blocks go to its
// high-priority pool (half of it), so that a scan of data blocks does not evict them first.
std::shared_ptr<rocksdb::Cache> NewBoundedBlockCache() {
  rocksdb::LRUCacheOptions cache;
  cache.capacity = kBlockCacheBytes;
  cache.high_pri_pool_ratio = 0.5;
  return rocksdb::NewLRUCache(cache);
}

// The tables of one family. Index and filter blocks are charged to `block_cache` instead of being
// held by each open file outside it: RocksDB's default keeps them for every SST file, so that
// memory grows with the data on disk (the journal forever, the idempotency records for a whole
// TTL: about 3 bytes a Deposit, 0.8 MB a minute at 4,000 Deposits/s) and no option bounds it.
// Partitioned, so that a lookup reads one 4 KB partition of a file's index and filter, not the
// whole of them; the partitions' top level and level 0's blocks stay pinned in the cache, as they
// are read by every lookup. `filter`: a bloom filter, for the families read by key (the journal is
// only scanned, where a whole-key filter never helps).
rocksdb::BlockBasedTableOptions BoundedTableOptions(std::shared_ptr<rocksdb::Cache> block_cache,
                                                    bool filter) {
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = std::move(block_cache);
  table.cache_index_and_filter_blocks = true;
  table.cache_index_and_filter_blocks_with_high_priority = true;
  table.pin_l0_filter_and_index_blocks_in_cache = true;
  table.pin_top_level_index_and_filter = true;
  table.index_type = rocksdb::BlockBasedTableOptions::IndexType::kTwoLevelIndexSearch;
  table.metadata_block_size = 4096;
  if (filter) {
    table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
    table.partition_filters = true;
  }
  return table;
}

}  // namespace

absl::string_view DurabilityName(Durability durability) {
  switch (durability) {
    case Durability::kSync:
      return "sync";
    case Durability::kAsync:
      return "async";
    case Durability::kNone:
      return "none";
  }
  return "unknown";
}

absl::StatusOr<Durability> ParseDurability(absl::string_view name) {
  for (Durability durability : {Durability::kSync, Durability::kAsync, Durability::kNone}) {
    if (name == DurabilityName(durability)) return durability;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("durability must be sync, async or none; got \"", name, "\""));
}

struct RocksDbStore::Handles {
  std::unique_ptr<ExpiredRequestFilter> request_filter;
  // Every family's tables read through it: data, index and filter blocks alike.
  std::shared_ptr<rocksdb::Cache> block_cache;
  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> families;  // Indexed by Family.
  std::string ledger_id;                               // From the format marker.
  // Open defers compactions until the accounts are loaded (ResumeCompactions).
  std::atomic<bool> compactions_deferred{false};

  ~Handles() {
    if (db == nullptr) return;
    for (rocksdb::ColumnFamilyHandle* family : families) db->DestroyColumnFamilyHandle(family);
    db->Close().PermitUncheckedError();
  }
};

// A replica's committed entries, from RaftLog's loop thread (on_committed) to the store. RaftLog
// runs from before the store exists, so what it commits until then waits here; Attach hands
// over those after what the store's start-up read from the mirror, and from then on each goes
// to FollowCommitted as it comes. Detach (the store's destructor) stops that before the members
// FollowCommitted writes to go.
struct RocksDbStore::CommitFeed {
  absl::Mutex mu;
  RocksDbStore* store ABSL_GUARDED_BY(mu) = nullptr;
  bool detached ABSL_GUARDED_BY(mu) = false;
  std::vector<Unapplied> early ABSL_GUARDED_BY(mu);

  void Deliver(uint64_t position, absl::string_view payload) {
    absl::MutexLock lock(&mu);
    if (store != nullptr) {
      store->FollowCommitted(position, payload);
    } else if (!detached) {
      early.push_back(Unapplied{.position = position, .payload = std::string(payload)});
    }
  }
  void Attach(RocksDbStore* to, uint64_t replayed) {
    absl::MutexLock lock(&mu);
    for (const Unapplied& entry : early) {
      if (entry.position > replayed) to->FollowCommitted(entry.position, entry.payload);
    }
    early.clear();
    store = to;
  }
  void Detach() {
    absl::MutexLock lock(&mu);
    store = nullptr;
    detached = true;
    early.clear();
  }
};

absl::StatusOr<std::string> RocksDbStore::Init(const StoreOptions& options) {
  if (!options.ledger_id.empty()) {
    if (absl::Status id = CheckLedgerId(options.ledger_id); !id.ok()) return id;
  }
  if (absl::Status prepared = PrepareDirectoryForInit(options.data_dir); !prepared.ok()) {
    return prepared;
  }
  // The log first: the format marker, written last, is what makes the directory a ledger.
  if (absl::Status made =
          LocalLog::Create(LogDirectory(options.data_dir), 1, options.log_segment_bytes);
      !made.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot initialise data directory ", options.data_dir, ": ", made.message()));
  }
  absl::StatusOr<std::unique_ptr<Handles>> handles = OpenHandles(options, /*create=*/true);
  if (!handles.ok()) return handles.status();
  return (*handles)->ledger_id;
}

absl::StatusOr<std::unique_ptr<RocksDbStore>> RocksDbStore::Open(const StoreOptions& options) {
  return Open(options, StoreTestHooks{});
}

absl::StatusOr<std::unique_ptr<RocksDbStore>> RocksDbStore::Open(const StoreOptions& options,
                                                                 StoreTestHooks hooks) {
  // A replica that took the leader's state and crashed while it swapped it in: finished first,
  // before anything reads the directory (storage/data_directory_swap.h).
  if (absl::Status swapped =
          FinishDataDirectorySwap(options.data_dir, {std::string(kRaftDirectory)});
      !swapped.ok()) {
    return swapped;
  }
  if (absl::Status usable = CheckDirectoryForOpen(options.data_dir); !usable.ok()) return usable;
  absl::StatusOr<std::unique_ptr<DataDirectoryGuard>> guard =
      DataDirectoryGuard::Open(options.data_dir);
  if (!guard.ok()) return guard.status();
  // Compactions wait until the accounts are loaded and checked (ForEachAccount): a start after
  // a long write has compactions pending, which took one of this machine's two cores from the
  // journal check (1M accounts, 20M Deposits: serving after 7.4 s with them, 5.0 s without).
  // Nothing is written to RocksDB meanwhile: the start-up replay applies the log to memory.
  absl::StatusOr<std::unique_ptr<Handles>> handles =
      OpenHandles(options, /*create=*/false, /*format_version=*/nullptr,
                  /*defer_compactions=*/true);
  if (!handles.ok()) return handles.status();
  // A backup's staged copy that a crash left behind (its hard links would pin old tables).
  std::error_code no_staging;
  std::filesystem::remove_all(absl::StrCat(options.data_dir, "/", kBackupStagingDirectory),
                              no_staging);
  // A checkpoint's table that a crash left before RocksDB ingested it: the log still has it.
  std::filesystem::remove_all(absl::StrCat(options.data_dir, "/", kCheckpointStagingDirectory),
                              no_staging);
  // The leader's state a replica fetched and did not swap in before it stopped.
  std::filesystem::remove_all(absl::StrCat(options.data_dir, "/", kStateTransferDirectory),
                              no_staging);
  const std::string raft_dir = options.cluster.has_value() && !options.cluster->raft_dir.empty()
                                   ? options.cluster->raft_dir
                                   : absl::StrCat(options.data_dir, "/", kRaftDirectory);
  std::error_code no_raft_dir;
  const bool is_replica = !std::filesystem::is_empty(raft_dir, no_raft_dir) && !no_raft_dir;
  if (is_replica && !options.cluster.has_value()) {
    return absl::FailedPreconditionError(
        Refusal(options.data_dir, absl::StrCat("it is a cluster replica's (it holds ", raft_dir,
                                               "): start it with --node_id and --peers")));
  }
  std::unique_ptr<ReplicatedLog> log;
  RaftLog* raft = nullptr;
  auto feed = std::make_shared<CommitFeed>();
  if (options.cluster.has_value()) {
    if (!is_replica) {
      // A new replica. Its positions will be Raft's indexes, so a log a single node wrote (its
      // own positions) cannot become one.
      LocalLogOptions existing_options;
      existing_options.dir = LogDirectory(options.data_dir);
      existing_options.segment_bytes = options.log_segment_bytes;
      absl::StatusOr<std::unique_ptr<LocalLog>> existing = LocalLog::Open(existing_options);
      if (!existing.ok()) return RefusalFrom(options.data_dir, existing.status());
      if ((*existing)->last_position() > 0) {
        return absl::FailedPreconditionError(Refusal(
            options.data_dir,
            absl::StrCat("it holds a single node's ledger (", (*existing)->last_position(),
                         " log entries); a cluster replica starts from a new one (ledgerd init)")));
      }
    }
    const ClusterOptions& cluster = *options.cluster;
    // A replica of another ledger must not join: with a longer log it could lead, and replace
    // the members' entries with its own.
    if (cluster.check_ledger_id) {
      if (absl::Status same = cluster.check_ledger_id((*handles)->ledger_id); !same.ok()) {
        return absl::FailedPreconditionError(Refusal(options.data_dir, same.message()));
      }
    }
    absl::StatusOr<std::unique_ptr<RaftLog>> opened = RaftLog::Open(RaftLogOptions{
        .node_id = cluster.node_id,
        .peers = cluster.peers,
        .bind_address = cluster.bind_address,
        .raft_dir = raft_dir,
        .log_dir = LogDirectory(options.data_dir),
        .log_segment_bytes = options.log_segment_bytes,
        .libraft_segment_bytes = options.log_segment_bytes,
        .election_timeout = cluster.election_timeout,
        .heartbeat_interval = cluster.heartbeat_interval,
        .snapshot_threshold = cluster.snapshot_entries,
        .on_committed = [feed](uint64_t position,
                               absl::string_view payload) { feed->Deliver(position, payload); },
        .mirror_fault = hooks.log_fault});
    if (!opened.ok()) return RefusalFrom(options.data_dir, opened.status());
    raft = opened->get();
    log = *std::move(opened);
  } else {
    LocalLogOptions log_options{.dir = LogDirectory(options.data_dir),
                                .segment_bytes = options.log_segment_bytes,
                                .sync = options.durability == Durability::kSync,
                                .fault = hooks.log_fault};
    LogRecovery recovery;
    absl::StatusOr<std::unique_ptr<LocalLog>> local = LocalLog::Open(log_options, &recovery);
    if (!local.ok()) {
      return RefusalFrom(options.data_dir, local.status());
    }
    if (recovery.torn_bytes > 0) {
      std::cerr << "ledgerd: the log ended in an entry cut short by a crash (never acknowledged), "
                << recovery.torn_at << "; it was dropped and the " << recovery.entries
                << " entries before it are kept\n";
    }
    log = *std::move(local);
  }
  absl::StatusOr<uint64_t> applied = ReplayStart(**handles, *log);
  if (!applied.ok()) {
    return RefusalFrom(options.data_dir, applied.status());
  }
  auto store = std::unique_ptr<RocksDbStore>(
      new RocksDbStore(options, std::move(hooks), *std::move(guard), *std::move(handles),
                       std::move(log), raft, feed));
  {
    absl::MutexLock lock(&store->apply_mu_);
    store->applied_ = *applied;
  }
  if (absl::Status caught_up = store->CatchUpWithLog(); !caught_up.ok()) {
    return RefusalFrom(options.data_dir, caught_up);
  }
  store->appended_.store(store->applied_position(), std::memory_order_release);
  // A replica: what was committed while the mirror was read above follows it, once.
  feed->Attach(store.get(), store->applied_position());
  store->applier_ = std::thread([raw = store.get()] { raw->RunApplier(); });
  return store;
}

absl::StatusOr<UpgradeReport> RocksDbStore::Upgrade(const StoreOptions& options) {
  if (absl::Status swapped =
          FinishDataDirectorySwap(options.data_dir, {std::string(kRaftDirectory)});
      !swapped.ok()) {
    return swapped;
  }
  if (absl::Status usable = CheckDirectoryForOpen(options.data_dir); !usable.ok()) return usable;
  uint32_t version = 0;
  absl::StatusOr<std::unique_ptr<Handles>> handles =
      OpenHandles(options, /*create=*/false, &version);
  if (!handles.ok()) return handles.status();
  UpgradeReport report{.from_version = version, .ledger_id = (*handles)->ledger_id};
  if (version == kFormatVersion) return report;
  // Version 1 kept everything in RocksDB, behind its own WAL (replayed by the open above):
  // flushed to its tables, it is the state at log position 0 of an empty log.
  rocksdb::FlushOptions flush;
  flush.wait = true;
  rocksdb::Status flushed = (*handles)->db->Flush(flush, (*handles)->families);
  if (!flushed.ok()) return FromRocks(flushed, "flushing the database before the upgrade");
  if (!(*handles)->db->SyncWAL().ok()) {
    return absl::UnavailableError("syncing RocksDB's log before the upgrade failed");
  }
  // A log left by an upgrade that was cut short is made again: nothing was ever appended to it.
  const std::string log_dir = LogDirectory(options.data_dir);
  std::error_code error;
  std::filesystem::remove_all(log_dir, error);
  if (error) {
    return absl::UnavailableError(absl::StrCat("removing ", log_dir, ": ", error.message()));
  }
  if (absl::Status made = LocalLog::Create(log_dir, 1, options.log_segment_bytes); !made.ok()) {
    return made;
  }
  if (absl::Status marked = WriteFormatMarker(**handles, options, report.ledger_id); !marked.ok()) {
    return marked;
  }
  return report;
}

absl::StatusOr<std::unique_ptr<RocksDbStore::Handles>> RocksDbStore::OpenHandles(
    const StoreOptions& options, bool create, uint32_t* format_version, bool defer_compactions) {
  const std::string& dir = options.data_dir;
  if (options.durability == Durability::kNone) {
    return absl::InvalidArgumentError("durability none keeps no store");
  }
  if (options.idempotency_ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("idempotency TTL must be greater than zero");
  }
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = create;
  db_options.create_missing_column_families = create;
  db_options.error_if_exists = create;
  db_options.paranoid_checks = true;
  // A torn write at the end of the log is a write that was never acknowledged: recovery stops
  // before it. Anything else that fails a checksum refuses the open.
  db_options.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  db_options.db_write_buffer_size = kMemtableBytes;  // Memtables of all families together.
  db_options.max_background_jobs = 2;
  // Left at their defaults on purpose (issue 13, docs/journal-tuning.md): with RocksDB 7.8 none
  // makes a synced group write cheaper here, and some break a guarantee.
  //  - recycle_log_file_num: reset to 0 under kPointInTimeRecovery (facebook/rocksdb#6351).
  //  - enable_pipelined_write: DB::Open refuses it with atomic_flush.
  //  - unordered_write: loosens the snapshots that History and the journal check read through.
  //  - manual_wal_flush: a change is visible, and can reach an SST, before FlushWAL syncs it.
  //  - use_fsync, wal_bytes_per_sync, max_total_wal_size, write_buffer_size: no effect here.
  db_options.info_log = std::make_shared<StderrLogger>();
  // One WriteBatch spans the column families: flush them together, so that no recovery can
  // find one family ahead of another.
  db_options.atomic_flush = true;
  // After a failed write the store closes and reopens the database itself (see Write); RocksDB
  // 7.8's own resume can leave the log writer unusable (facebook/rocksdb#11643).
  db_options.max_bgerror_resume_count = 0;

  if (!create) {
    std::vector<std::string> names;
    rocksdb::Status listed = rocksdb::DB::ListColumnFamilies(db_options, dir, &names);
    if (!listed.ok()) return OpenRefusal(dir, listed);
    std::vector<std::string> expected(kFamilyNames.begin(), kFamilyNames.end());
    std::sort(names.begin(), names.end());
    std::sort(expected.begin(), expected.end());
    if (names != expected) {
      return absl::FailedPreconditionError(Refusal(
          dir, absl::StrCat("it is a RocksDB database of another program (column families: ",
                            absl::StrJoin(names, ", "), ")")));
    }
  }

  auto handles = std::make_unique<Handles>();
  handles->request_filter =
      std::make_unique<ExpiredRequestFilter>(options.idempotency_ttl, options.clock);
  handles->block_cache = NewBoundedBlockCache();
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (absl::string_view name : kFamilyNames) {
    rocksdb::ColumnFamilyOptions family_options;
    family_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(
        BoundedTableOptions(handles->block_cache, /*filter=*/name != kFamilyNames[kJournal])));
    if (name == kFamilyNames[kRequests]) {
      family_options.compaction_filter = handles->request_filter.get();
      // Almost every request_id looked up is new: a bloom filter on the memtable answers "not
      // there" without a skiplist search, on the gRPC thread that decides the call.
      family_options.memtable_prefix_bloom_size_ratio = 0.02;
      family_options.memtable_whole_key_filtering = true;
      // Compact every file at least once a TTL, so expired records do not outlive it by much.
      family_options.periodic_compaction_seconds = static_cast<uint64_t>(
          std::max<int64_t>(absl::ToInt64Seconds(options.idempotency_ttl), 1));
    }
    family_options.disable_auto_compactions = defer_compactions;
    descriptors.emplace_back(std::string(name), family_options);
  }
  rocksdb::DB* db = nullptr;
  rocksdb::Status opened = rocksdb::DB::Open(db_options, dir, descriptors, &handles->families, &db);
  if (!opened.ok()) return OpenRefusal(dir, opened);
  handles->db.reset(db);
  handles->compactions_deferred.store(defer_compactions, std::memory_order_relaxed);
  if (create) {
    if (absl::Status written = WriteFormatMarker(*handles, options, options.ledger_id);
        !written.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot initialise data directory ", dir, ": ", written.message()));
    }
    return handles;
  }
  if (absl::Status checked = ReadFormatMarker(*handles, dir, format_version); !checked.ok()) {
    return checked;
  }
  return handles;
}

void RocksDbStore::ResumeCompactions(Handles& handles) {
  if (!handles.compactions_deferred.exchange(false, std::memory_order_acq_rel)) return;
  for (rocksdb::ColumnFamilyHandle* family : handles.families) {
    rocksdb::Status resumed =
        handles.db->SetOptions(family, {{"disable_auto_compactions", "false"}});
    if (!resumed.ok()) {
      // Not fatal now, but tables would pile up unmerged: say so where operators look.
      std::cerr << "ledgerd: cannot resume RocksDB's compactions of " << family->GetName() << ": "
                << resumed.ToString() << "\n";
    }
  }
}

absl::Status RocksDbStore::WriteFormatMarker(Handles& handles, const StoreOptions& options,
                                             const std::string& ledger_id) {
  v1::FormatMarker marker;
  marker.set_magic(std::string(kMagic));
  marker.set_format_version(kFormatVersion);
  marker.set_created_by(options.created_by);
  marker.set_created_unix_micros(absl::ToUnixMicros(absl::Now()));
  marker.set_ledger_id(ledger_id.empty() ? NewLedgerId() : ledger_id);
  rocksdb::WriteBatch write;
  rocksdb::Status put =
      write.Put(handles.families[kDefault], ToSlice(kFormatKey), marker.SerializeAsString());
  if (put.ok()) {
    put = write.Put(handles.families[kDefault], ToSlice(kAppliedKey), EncodePosition(0));
  }
  // Through RocksDB's own WAL, synced: the one write that does not come from the log.
  rocksdb::WriteOptions sync;
  sync.sync = true;
  if (put.ok()) put = handles.db->Write(sync, &write);
  if (!put.ok()) return FromRocks(put, "writing the format marker");
  handles.ledger_id = marker.ledger_id();
  return absl::OkStatus();
}

absl::Status RocksDbStore::ReadFormatMarker(Handles& handles, const std::string& dir,
                                            uint32_t* format_version) {
  std::string marker_bytes;
  rocksdb::Status marker_read = handles.db->Get(rocksdb::ReadOptions(), handles.families[kDefault],
                                                ToSlice(kFormatKey), &marker_bytes);
  if (marker_read.IsNotFound()) {
    // Init writes the marker right after creating the database; without it, this directory's
    // creation never finished or it is not ledgerd's.
    return absl::FailedPreconditionError(
        Refusal(dir,
                "it has no ledgerd format marker (its `ledgerd init` did not finish, or it "
                "is not a ledgerd data directory)"));
  }
  if (!marker_read.ok()) {
    return absl::FailedPreconditionError(
        Refusal(dir, absl::StrCat("its format marker cannot be read: ", marker_read.ToString())));
  }
  v1::FormatMarker marker;
  if (!marker.ParseFromString(marker_bytes) || marker.magic() != kMagic) {
    return absl::FailedPreconditionError(Refusal(dir, "its format marker is not ledgerd's"));
  }
  const bool upgradable = marker.format_version() >= kOldestUpgradableFormatVersion &&
                          marker.format_version() < kFormatVersion;
  if (upgradable && format_version == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("data directory ", dir, " has data format version ", marker.format_version(),
                     " (written by ", marker.created_by(), "); this ledgerd serves version ",
                     kFormatVersion, ". Upgrade it once with `ledgerd upgrade --data_dir=", dir,
                     "` (offline, crash-safe; nothing else changes), then start ledgerd again"));
  }
  if (!upgradable && marker.format_version() != kFormatVersion) {
    return absl::FailedPreconditionError(Refusal(
        dir,
        absl::StrCat("it has data format version ", marker.format_version(), " (written by ",
                     marker.created_by(), "); this ledgerd reads only version ", kFormatVersion)));
  }
  handles.ledger_id = marker.ledger_id();
  if (format_version != nullptr) *format_version = marker.format_version();
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> RocksDbStore::ReadAppliedPosition(Handles& handles) {
  std::string bytes;
  rocksdb::Status read = handles.db->Get(rocksdb::ReadOptions(), handles.families[kDefault],
                                         ToSlice(kAppliedKey), &bytes);
  if (!read.ok() || bytes.size() != 8) {
    return absl::DataLossError(absl::StrCat("the applied log position cannot be read (",
                                            read.ok() ? "malformed" : read.ToString(), ")"));
  }
  uint64_t position = 0;
  for (char byte : bytes) position = (position << 8) | static_cast<unsigned char>(byte);
  return position;
}

absl::Status RocksDbStore::AddChanges(Handles& handles, absl::string_view payload,
                                      rocksdb::WriteBatch& write) {
  rocksdb::Status added;
  absl::Status read = ForEachLogChange(payload, [&](const LogChange& change) {
    if (!added.ok()) return;
    rocksdb::ColumnFamilyHandle* family = handles.families[static_cast<int>(change.family)];
    added = change.value.has_value()
                ? write.Put(family, ToSlice(change.key), ToSlice(*change.value))
                : write.Delete(family, ToSlice(change.key));
  });
  if (!read.ok()) return read;
  return FromRocks(added, "preparing a write");
}

absl::StatusOr<uint64_t> RocksDbStore::ReplayStart(Handles& handles, const ReplicatedLog& log) {
  absl::StatusOr<uint64_t> applied = ReadAppliedPosition(handles);
  if (!applied.ok()) return applied.status();
  if (*applied > log.last_position()) {
    return absl::DataLossError(absl::StrCat("the database has applied the log up to position ",
                                            *applied, " but the log ends at ", log.last_position(),
                                            ": entries are missing"));
  }
  if (*applied + 1 < log.first_position()) {
    return absl::DataLossError(absl::StrCat("the database has applied the log up to position ",
                                            *applied, " but the log starts at ",
                                            log.first_position(), ": entries are missing"));
  }
  return applied;
}

absl::StatusOr<uint64_t> RocksDbStore::Replay(Handles& handles, const ReplicatedLog& log) {
  absl::StatusOr<uint64_t> applied = ReplayStart(handles, log);
  if (!applied.ok()) return applied.status();
  rocksdb::WriteOptions no_wal;
  no_wal.disableWAL = true;
  rocksdb::WriteBatch write;
  uint64_t last = *applied;
  const auto flush = [&]() -> absl::Status {
    if (write.Count() == 0) return absl::OkStatus();
    rocksdb::Status put =
        write.Put(handles.families[kDefault], ToSlice(kAppliedKey), EncodePosition(last));
    if (put.ok()) put = handles.db->Write(no_wal, &write);
    write.Clear();
    return FromRocks(put, "replaying the log");
  };
  absl::Status replayed =
      log.ReadFrom(*applied + 1, [&](uint64_t position, absl::string_view payload) {
        if (absl::Status added = AddChanges(handles, payload, write); !added.ok()) {
          return absl::DataLossError(
              absl::StrCat("the log entry at position ", position, ": ", added.message()));
        }
        last = position;
        if (write.GetDataSize() >= kReplayBatchBytes) return flush();
        return absl::OkStatus();
      });
  if (replayed.ok()) replayed = flush();
  if (!replayed.ok()) return replayed;
  return last;
}

absl::Status RocksDbStore::CatchUpWithLog() {
  const uint64_t from = applied_position();
  std::vector<Unapplied> entries;
  size_t bytes = 0;
  const auto apply = [&]() -> absl::Status {
    if (entries.empty()) return absl::OkStatus();
    if (absl::Status applied = ApplyEntries(entries, applied_position()); !applied.ok()) {
      return applied;
    }
    {
      absl::MutexLock lock(&apply_mu_);
      applied_ = entries.back().position;
    }
    apply_changed_.NotifyAll();
    entries.clear();
    bytes = 0;
    return absl::OkStatus();
  };
  std::vector<RecentRequests::Change> requests;
  absl::Status read = log_->ReadFrom(from + 1, [&](uint64_t position, absl::string_view payload) {
    requests.clear();
    absl::Status listed = ForEachLogChange(payload, [&](const LogChange& change) {
      if (change.family == LogFamily::kRequests) {
        requests.push_back({.key = change.key, .value = change.value});
      }
    });
    recent_requests_.Add(requests);
    if (!listed.ok()) {
      return absl::DataLossError(
          absl::StrCat("the log entry at position ", position, ": ", listed.message()));
    }
    entries.push_back(Unapplied{.position = position, .payload = std::string(payload)});
    bytes += payload.size();
    return bytes >= kReplayBatchBytes ? apply() : absl::OkStatus();
  });
  // No checkpoint here: what was replayed is held as the applier holds what it applies, and
  // ForEachAccount loads it; the applier checkpoints once the records held reach their bound.
  if (read.ok()) read = apply();
  return read;
}

RocksDbStore::RocksDbStore(const StoreOptions& options, StoreTestHooks hooks,
                           std::unique_ptr<DataDirectoryGuard> guard,
                           std::unique_ptr<Handles> handles, std::unique_ptr<ReplicatedLog> log,
                           RaftLog* raft, std::shared_ptr<CommitFeed> commit_feed)
    : options_(options),
      hooks_(std::move(hooks)),
      guard_(std::move(guard)),
      ledger_id_(handles->ledger_id),
      handles_(std::move(handles)),
      log_(std::move(log)),
      raft_(raft),
      commit_feed_(std::move(commit_feed)) {}

RocksDbStore::~RocksDbStore() {
  // A replica's loop thread runs until log_ goes, after the members it feeds.
  commit_feed_->Detach();
  {
    absl::MutexLock lock(&apply_mu_);
    applier_stopping_ = true;
  }
  apply_changed_.NotifyAll();
  if (applier_.joinable()) applier_.join();
  if (absl::Status checkpointed = Checkpoint(); !checkpointed.ok()) {
    std::cerr << "ledgerd: no checkpoint at the stop (" << checkpointed.message()
              << "); the next start replays the log\n";
  }
}

uint64_t RocksDbStore::applied_position() const {
  absl::MutexLock lock(&apply_mu_);
  return applied_;
}

absl::Status RocksDbStore::Checkpoint() {
  absl::MutexLock checkpoint_lock(&checkpoint_mu_);
  absl::StatusOr<uint64_t> applied = CheckpointLocked([](absl::string_view) {});
  absl::Status status = applied.status();
  if (applied.ok()) {
    absl::StatusOr<int> dropped = log_->DropBefore(DropLimit(*applied));
    status = dropped.status();
  }
  if (!status.ok()) checkpoint_failures_.fetch_add(1, std::memory_order_relaxed);
  return status;
}

absl::StatusOr<uint64_t> RocksDbStore::CheckpointLocked(
    const std::function<void(absl::string_view step)>& step_done) {
  uint64_t applied = 0;
  std::shared_ptr<const RecentRequests::Records> requests;
  std::shared_ptr<const RecentJournal::Entries> journal;
  {
    absl::MutexLock apply_lock(&apply_write_mu_);
    applied = SwapOutDirtyAccountsLocked();
    journal = recent_journal_.Seal();
    // The idempotency records may run past `applied` (the journal thread adds them as it
    // appends), but every one is from a durable entry, and a replay from `applied` writes the
    // same records again.
    requests = recent_requests_.Seal();
  }
  step_done("applier held");
  std::shared_ptr<const AccountStates> accounts;
  {
    absl::MutexLock dirty_lock(&dirty_mu_);
    accounts = checkpointing_accounts_;
  }
  // The tables first: the position the checkpoint writes promises them.
  absl::Status ingested = IngestRecentRecords(*requests, *journal, *accounts);
  recent_requests_.Release(/*written=*/ingested.ok());
  recent_journal_.Release(/*written=*/ingested.ok());
  ReleaseCheckpointingAccounts(/*written=*/ingested.ok());
  if (!ingested.ok()) return ingested;
  step_done("tables");
  // The log first: a position recorded past the log's durable end (a log appended without a
  // sync: durability async, a replica's mirror) would make the next start refuse the directory.
  if (absl::Status synced = log_->Sync(); !synced.ok()) return synced;
  if (absl::Status written = WriteCheckpoint(applied); !written.ok()) return written;
  step_done("position");
  // The applier goes on meanwhile: what it writes before the flush takes the memtables lands in
  // the tables too, ahead of the position they record, which a replay from there writes again
  // to the same end (every change is a put or a delete, applied in order).
  if (absl::Status flushed = FlushTables(); !flushed.ok()) return flushed;
  step_done("flush");
  checkpoints_.fetch_add(1, std::memory_order_relaxed);
  return applied;
}

uint64_t RocksDbStore::SwapOutDirtyAccountsLocked() {
  absl::MutexLock dirty_lock(&dirty_mu_);
  LEDGER_CHECK(checkpointing_accounts_ == nullptr);
  checkpointing_accounts_ = std::make_shared<const AccountStates>(std::move(dirty_accounts_));
  dirty_accounts_ = AccountStates();
  return applied_position();
}

absl::Status RocksDbStore::WriteCheckpoint(uint64_t applied) {
  absl::ReaderMutexLock lock(&mu_);
  if (handles_ == nullptr) return ClosedError();
  rocksdb::WriteOptions no_wal;
  no_wal.disableWAL = true;
  return FromRocks(handles_->db->Put(no_wal, handles_->families[kDefault], ToSlice(kAppliedKey),
                                     EncodePosition(applied)),
                   "checkpointing");
}

void RocksDbStore::ReleaseCheckpointingAccounts(bool written) {
  absl::MutexLock dirty_lock(&dirty_mu_);
  if (!written) {
    // Not in RocksDB: back into the map, under the newer states the applier kept meanwhile.
    for (const auto& [key, value] : *checkpointing_accounts_)
      dirty_accounts_.try_emplace(key, value);
  }
  checkpointing_accounts_ = nullptr;
}

absl::Status RocksDbStore::IngestRecentRecords(const RecentRequests::Records& requests,
                                               const RecentJournal::Entries& journal,
                                               const AccountStates& accounts) {
  if (requests.empty() && journal.empty() && accounts.empty()) return absl::OkStatus();
  // Never into a data directory that was deleted or replaced: that would make a new one.
  if (absl::Status in_place = guard_->Check(); !in_place.ok()) return in_place;
  absl::ReaderMutexLock lock(&mu_);
  if (handles_ == nullptr) return ClosedError();
  const std::string dir = absl::StrCat(options_.data_dir, "/", kCheckpointStagingDirectory);
  std::error_code error;
  std::filesystem::create_directory(dir, error);  // Only inside a data directory that exists.
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("checkpointing: cannot create ", dir, ": ", error.message()));
  }
  std::vector<rocksdb::IngestExternalFileArg> tables;
  Handles& handles = *handles_;  // The lock is held for the whole ingestion.
  // A store whose accounts were never loaded (a tool that only writes) compacts from its first
  // checkpoint on.
  ResumeCompactions(handles);
  // One table file of `family`, filled in key order by `fill`.
  const auto write_table =
      [&](Family family, absl::string_view name,
          const std::function<rocksdb::Status(rocksdb::SstFileWriter&)>& fill) {
        rocksdb::ColumnFamilyHandle* handle = handles.families[family];
        const std::string path = absl::StrCat(dir, "/", name, ".sst");
        // The family's own options: the same comparator, table format and filters as its flushes.
        const rocksdb::Options family_options = handles.db->GetOptions(handle);
        rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), family_options, handle);
        rocksdb::Status step = writer.Open(path);
        if (step.ok()) step = fill(writer);
        if (step.ok()) step = writer.Finish();
        rocksdb::IngestExternalFileArg table;
        table.column_family = handle;
        table.external_files = {path};
        table.options.move_files = true;  // A hard link: the file is in the data directory already.
        tables.push_back(std::move(table));
        return step;
      };
  rocksdb::Status step;
  if (!requests.empty()) {
    step = write_table(kRequests, "requests", [&](rocksdb::SstFileWriter& writer) {
      rocksdb::Status put;
      for (const auto* record : RecentRequests::SortedForTable(requests)) {
        const auto& [key, value] = *record;
        put = value.has_value() ? writer.Put(ToSlice(key), ToSlice(*value))
                                : writer.Delete(ToSlice(key));
        if (!put.ok()) break;
      }
      return put;
    });
  }
  if (step.ok() && !journal.empty()) {
    step = write_table(kJournal, "journal", [&](rocksdb::SstFileWriter& writer) {
      rocksdb::Status put;
      RecentJournal::ForEachInTableOrder(journal,
                                         [&](absl::string_view key, absl::string_view value) {
                                           put = writer.Put(ToSlice(key), ToSlice(value));
                                           return put.ok();
                                         });
      return put;
    });
  }
  if (step.ok() && !accounts.empty()) {
    // Sorted here rather than inserted into the memtable and flushed: a checkpoint after a crash
    // replayed half a million Deposits wrote its 420,000 accounts in 5 s that way.
    const std::vector<const AccountStates::value_type*> sorted = InKeyOrder(accounts);
    step = write_table(kAccounts, "accounts", [&](rocksdb::SstFileWriter& writer) {
      rocksdb::Status put;
      for (const auto* account : sorted) {
        put = writer.Put(ToSlice(account->first), ToSlice(account->second));
        if (!put.ok()) break;
      }
      return put;
    });
  }
  // Every family in one atomic ingestion: all of it or none.
  if (step.ok()) step = handles.db->IngestExternalFiles(tables);
  for (const rocksdb::IngestExternalFileArg& table : tables) {
    std::filesystem::remove(table.external_files.front(), error);  // Moved when ingested.
  }
  return FromRocks(step, "checkpointing the accounts, idempotency records and journal");
}

absl::Status RocksDbStore::FlushTables() {
  absl::ReaderMutexLock lock(&mu_);
  if (handles_ == nullptr) return ClosedError();
  rocksdb::FlushOptions flush;
  flush.wait = true;
  // Every family at once (atomic_flush): the tables then hold at least the state at the
  // position the checkpoint wrote.
  rocksdb::Status flushed = handles_->db->Flush(flush, handles_->families);
  return FromRocks(flushed, "checkpointing");
}

uint64_t RocksDbStore::DropLimit(uint64_t applied) const {
  return std::min({applied + 1, backup_pin_.load(std::memory_order_acquire), RetentionLimit()});
}

uint64_t RocksDbStore::RetentionLimit() const {
  const int64_t bytes = options_.watch_retention_bytes;
  const absl::Duration age = options_.watch_retention_age;
  if (bytes <= 0 && age <= absl::ZeroDuration()) return UINT64_MAX;
  const absl::Time written_since = (options_.clock ? options_.clock() : absl::Now()) - age;
  const std::vector<std::string> paths = log_->SegmentPaths();
  uint64_t keep_from = UINT64_MAX;
  int64_t newer_bytes = 0;  // What the segments newer than the one looked at take.
  for (auto path = paths.rbegin(); path != paths.rend(); ++path) {
    struct stat info {};
    const std::optional<uint64_t> first =
        SegmentFirstPosition(std::filesystem::path(*path).filename().string());
    if (!first.has_value()) break;  // Not a LocalLog segment (the simulator's log).
    // A segment that cannot be looked at is kept.
    if (stat(path->c_str(), &info) != 0) {
      keep_from = *first;
      continue;
    }
    const bool kept =
        newer_bytes < bytes ||
        (age > absl::ZeroDuration() && absl::TimeFromTimespec(info.st_mtim) >= written_since);
    if (!kept) break;
    keep_from = *first;
    newer_bytes += static_cast<int64_t>(info.st_size);
  }
  return keep_from;
}

absl::StatusOr<StagedBackup> RocksDbStore::StageBackup() {
  if (backup_staged_.exchange(true, std::memory_order_acq_rel)) {
    return absl::FailedPreconditionError(
        "another backup is being taken; one runs at a time: retry once it has ended");
  }
  StagedBackup staged;
  staged.dir = absl::StrCat(options_.data_dir, "/", kBackupStagingDirectory);
  staged.ledger_id = ledger_id_;
  staged.format_version = kFormatVersion;
  // Whatever fails below leaves nothing staged.
  auto discard = absl::MakeCleanup([this] { DiscardStagedBackup(); });
  std::error_code error;
  std::filesystem::remove_all(staged.dir, error);
  if (error) {
    return absl::UnavailableError(absl::StrCat("removing ", staged.dir, ": ", error.message()));
  }
  {
    // One checkpoint at a time: the copy is of this checkpoint's tables, and none deletes the
    // log segments the copy needs (the pin) before it is set.
    absl::MutexLock checkpoint_lock(&checkpoint_mu_);
    SteadyTime step_start = SteadyNow();
    const auto step_done = [&](absl::string_view step) {
      const SteadyTime now = SteadyNow();
      absl::StrAppend(&staged.steps, staged.steps.empty() ? "" : ", ", step, " ",
                      absl::FormatDuration(
                          absl::Trunc(absl::FromChrono(now - step_start), absl::Microseconds(10))));
      step_start = now;
    };
    absl::StatusOr<uint64_t> checkpointed = CheckpointLocked(step_done);
    if (!checkpointed.ok()) return checkpointed.status();
    const uint64_t applied = *checkpointed;
    {
      absl::ReaderMutexLock lock(&mu_);
      if (handles_ == nullptr) return ClosedError();
      rocksdb::Checkpoint* raw = nullptr;
      rocksdb::Status made = rocksdb::Checkpoint::Create(handles_->db.get(), &raw);
      std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
      // Hard links to the tables just flushed (and any flushed since, which hold only changes
      // the log copy below holds too). No flush of its own: the memtables hold only what the
      // applier wrote since, which the log copy holds as well.
      if (made.ok()) {
        made = checkpoint->CreateCheckpoint(staged.dir, std::numeric_limits<uint64_t>::max());
      }
      if (!made.ok()) return FromRocks(made, "copying the database for a backup");
    }
    step_done("RocksDB checkpoint");
    // Later checkpoints keep the log's entries after `applied` until the copy below has them.
    backup_pin_.store(applied + 1, std::memory_order_release);
    staged.applied_position = applied;
  }
  staged.last_position = appended_.load(std::memory_order_acquire);
  const SteadyTime copy_start = SteadyNow();
  absl::Status copied =
      CopyLogEntries(*log_, staged.applied_position + 1, staged.last_position,
                     absl::StrCat(staged.dir, "/", kLogDirectory), kBackupLogSegmentBytes);
  backup_pin_.store(UINT64_MAX, std::memory_order_release);
  if (!copied.ok()) return copied;
  absl::StrAppend(
      &staged.steps, ", log copy ",
      absl::FormatDuration(absl::Trunc(SteadySince(copy_start), absl::Microseconds(10))));
  for (const auto& file : std::filesystem::recursive_directory_iterator(staged.dir, error)) {
    if (!file.is_regular_file()) continue;
    staged.files.push_back(std::filesystem::relative(file.path(), staged.dir).string());
  }
  if (error) {
    return absl::UnavailableError(absl::StrCat("listing ", staged.dir, ": ", error.message()));
  }
  std::sort(staged.files.begin(), staged.files.end());
  std::move(discard).Cancel();
  return staged;
}

void RocksDbStore::DiscardStagedBackup() {
  std::error_code error;
  const std::string dir = absl::StrCat(options_.data_dir, "/", kBackupStagingDirectory);
  std::filesystem::remove_all(dir, error);
  if (error) {
    std::cerr << "ledgerd: could not remove a backup's staged copy " << dir << ": "
              << error.message() << " (removed at the next start)\n";
  }
  backup_staged_.store(false, std::memory_order_release);
}

absl::StatusOr<std::string> RocksDbStore::BeginGroupWrite(
    absl::Span<const BatchWrite* const> batches) {
  if (hooks_.write_fault) {
    if (absl::Status fault = hooks_.write_fault(); !fault.ok()) return fault;
  }
  // Before the log: a deleted directory still takes writes into its unlinked files, which no
  // restart would ever read.
  if (absl::Status in_place = guard_->Check(); !in_place.ok()) return in_place;
  if (closed_.load(std::memory_order_acquire)) {
    absl::ReaderMutexLock lock(&mu_);
    if (handles_ == nullptr) return ClosedError();
  }
  if (absl::Status poison = log_->poisoned(); !poison.ok()) {
    // The last append failed: its entry is on disk in no known form. Writes resume only once the
    // entry is zeroed and synced, so that what the shards rolled back is what the disk holds.
    const SteadyTime now = SteadyNow();
    if (last_repair_attempt_.has_value() &&
        now - *last_repair_attempt_ < SteadyTimeout(kReopenInterval)) {
      return poison;
    }
    last_repair_attempt_ = now;
    if (absl::Status repaired = log_->Repair(); !repaired.ok()) {
      return absl::UnavailableError(
          absl::StrCat(poison.message(), "; repairing it failed: ", repaired.message()));
    }
    std::cerr << "ledgerd: the log was repaired after a failed write; writes resume\n";
  }
  std::string payload = EncodeGroup(batches);
  {
    // The applier's lag is bounded: past kMaxUnappliedBytes the group waits for it.
    absl::MutexLock lock(&apply_mu_);
    const auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_) {
      return unapplied_bytes_ < kMaxUnappliedBytes || applier_stopping_;
    };
    if (!apply_changed_.WaitFor(apply_mu_, kApplyWait, room)) {
      return absl::UnavailableError(
          "the store is behind the log by more than 64 MiB; writes wait for it");
    }
  }
  return payload;
}

absl::Status RocksDbStore::WriteGroup(absl::Span<const BatchWrite* const> batches) {
  absl::MutexLock write_lock(&write_mu_);
  absl::StatusOr<std::string> payload = BeginGroupWrite(batches);
  if (!payload.ok()) return payload.status();
  absl::StatusOr<uint64_t> position = log_->Append(*payload);
  if (!position.ok()) return position.status();
  // A replica's entry reached the applier through FollowCommitted before Append returned.
  if (raft_ == nullptr) TakeCommitted(*position, *std::move(payload));
  return absl::OkStatus();
}

int RocksDbStore::GroupWritesInFlight() const {
  return raft_ == nullptr ? 1 : options_.cluster->writes_in_flight;
}

void RocksDbStore::StartGroupWrite(absl::Span<const BatchWrite* const> batches,
                                   bool behind_writes_in_flight, GroupWritten written) {
  if (raft_ == nullptr) {
    written(WriteGroup(batches));
    return;
  }
  absl::Status refused;
  {
    absl::MutexLock write_lock(&write_mu_);
    // Behind a write that failed and is not handled yet: the group may hold batches decided on
    // top of it, which the pipeline fails with it, so it must not land (as it could once
    // BeginGroupWrite repaired the log).
    absl::Status poison = log_->poisoned();
    absl::StatusOr<std::string> payload = poison.ok() || !behind_writes_in_flight
                                              ? BeginGroupWrite(batches)
                                              : absl::StatusOr<std::string>(std::move(poison));
    if (payload.ok()) {
      // Under the lock, so that entries take positions in the order their writes started. The
      // entry reaches the applier through FollowCommitted before `written` is told.
      raft_->Propose(*payload,
                     [written = std::move(written)](const absl::StatusOr<uint64_t>& position) {
                       written(position.status());
                     });
      return;
    }
    refused = payload.status();
  }
  written(std::move(refused));
}

void RocksDbStore::FollowCommitted(uint64_t position, absl::string_view payload) {
  TakeCommitted(position, std::string(payload));
}

void RocksDbStore::TakeCommitted(uint64_t position, std::string payload) {
  std::vector<RecentRequests::Change> requests;
  absl::Status listed = ForEachLogChange(payload, [&](const LogChange& change) {
    if (change.family == LogFamily::kRequests) {
      requests.push_back({.key = change.key, .value = change.value});
    } else if (UnappliedRecords::Keeps(change.family)) {
      unapplied_.Add(position, change.family, change.key, change.value);
    }
  });
  recent_requests_.Add(requests);  // What the entry held up to a malformed part.
  if (!listed.ok()) {
    // Only a replica's entry, from another leader, can fail here (this node's own were just
    // encoded). Committed on a majority, so the applier meets it too and keeps failing on it:
    // said here, where the position is known.
    std::cerr << "ledgerd: the committed log entry at position " << position
              << " is malformed: " << listed.message() << "\n";
  }
  appended_.store(position, std::memory_order_release);
  bool batch_filled = false;
  {
    absl::MutexLock lock(&apply_mu_);
    batch_filled = unapplied_bytes_ < kApplyBatchBytes &&
                   unapplied_bytes_ + static_cast<int64_t>(payload.size()) >= kApplyBatchBytes;
    unapplied_bytes_ += static_cast<int64_t>(payload.size());
    unapplied_entries_.push_back(Unapplied{.position = position, .payload = std::move(payload)});
  }
  // The applier, gathering a batch, wakes once it is full (not at every entry: its untimed wait
  // for the first entry is Abseil's, woken by the unlock).
  if (batch_filled) apply_changed_.NotifyAll();
}

std::optional<RaftStatus> RocksDbStore::replica_status() const {
  if (raft_ == nullptr) return std::nullopt;
  return raft_->Status();
}

absl::Status RocksDbStore::CatchUpAsLeader() {
  if (raft_ == nullptr) return absl::OkStatus();
  absl::StatusOr<uint64_t> barrier = raft_->Barrier();
  if (!barrier.ok()) return barrier.status();
  // FollowCommitted has queued everything up to the barrier (appended_ >= *barrier).
  return AwaitApplied();
}

absl::Status RocksDbStore::ConfirmLeadership() {
  if (raft_ == nullptr) return absl::OkStatus();
  return raft_->Barrier().status();
}

void RocksDbStore::CloseAfterFailureLocked(const absl::Status& failure) {
  handles_.reset();
  closed_.store(true, std::memory_order_release);
  ++generation_;
  failure_ = failure;
  last_reopen_attempt_ = SteadyNow();
  apply_changed_.NotifyAll();  // A read waiting for the applier is answered: closed.
}

std::string RocksDbStore::EncodeGroup(absl::Span<const BatchWrite* const> batches) {
  LogEntryBuilder entry;
  for (const BatchWrite* batch : batches) {
    for (const AccountWrite& account : batch->accounts) {
      entry.Put(LogFamily::kAccounts, AccountKey(account.account_id), EncodeAccount(account.state));
    }
    for (const JournalEntry& journal : batch->journal) {
      entry.Put(LogFamily::kJournal, JournalKey(journal.account_id, journal.sequence),
                EncodeJournal(journal));
    }
    for (const RequestWrite& request : batch->requests) {
      entry.Put(LogFamily::kRequests, RequestKey(request.account_id, request.request_id),
                EncodeRequest(request.record));
    }
    for (const TransferWrite& transfer : batch->transfers) {
      // A pending record lives under its source (what recovery resumes), a final one under its
      // id, which replaces the pending one in the same entry: one key per step.
      const std::string pending_key =
          PendingTransferKey(transfer.transfer_id, transfer.record.from);
      if (transfer.record.state == TransferState::kPending) {
        entry.Put(LogFamily::kDefault, pending_key, EncodeTransfer(transfer.record));
      } else {
        entry.Put(LogFamily::kDefault, TransferKey(transfer.transfer_id),
                  EncodeTransfer(transfer.record));
        if (transfer.ends_pending) entry.Delete(LogFamily::kDefault, pending_key);
      }
    }
    for (const CreditWrite& credit : batch->credits) {
      entry.Put(LogFamily::kDefault, CreditKey(credit.transfer_id), EncodeCredit(credit.receipt));
    }
  }
  return entry.Take();
}

void RocksDbStore::RunApplier() {
  pthread_setname_np(pthread_self(), "ledger-applier");
  // RocksDB's default per-thread perf level counts every key comparison of the memtable insert
  // in a thread-local, which through the shared library is a __tls_get_addr call each: 11-16% of
  // a group write of 64-256 deposits (docs/journal-tuning.md). Nothing reads those counts. The
  // level is per thread, and this is the thread that writes.
  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kDisable);
  std::vector<Unapplied> entries;
  SteadyTime next_spare_attempt;  // The clock's epoch: at once.
  SteadyTime next_checkpoint_attempt;
  while (true) {
    // The next segment, made here ahead of time rather than on the journal thread when the
    // current one fills (at most one attempt a second while the disk is full).
    if (SteadyNow() >= next_spare_attempt && !log_->PrepareAhead().ok()) {
      next_spare_attempt = SteadyNow() + std::chrono::seconds(1);
    }
    uint64_t applied = 0;
    std::vector<SnapshotRequest*> snapshots;
    {
      absl::MutexLock lock(&apply_mu_);
      const auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_) {
        return !unapplied_entries_.empty() || applier_stopping_ || !snapshot_requests_.empty();
      };
      apply_mu_.Await(absl::Condition(&work));
      // Between two batches the derived state is exactly applied_'s: snapshots are read here.
      snapshots.swap(snapshot_requests_);
      applied = applied_;
      if (snapshots.empty() && unapplied_entries_.empty()) {
        return;  // Stopping, and everything is applied.
      }
    }
    if (!snapshots.empty()) {
      ServeSnapshots(snapshots, applied);
      continue;
    }
    {
      absl::MutexLock lock(&apply_mu_);
      // Gather a larger batch for a moment, unless a read (or a snapshot) waits for the applier.
      const auto batch_ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_) {
        return unapplied_bytes_ >= kApplyBatchBytes || readers_waiting_ > 0 || applier_stopping_ ||
               !snapshot_requests_.empty();
      };
      apply_changed_.WaitFor(apply_mu_, kApplyBatchWait, batch_ready);
      // Everything queued, in one RocksDB write: the applier catches up in large batches.
      entries.clear();
      while (!unapplied_entries_.empty()) {
        entries.push_back(std::move(unapplied_entries_.front()));
        unapplied_entries_.pop_front();
      }
      applied = applied_;
    }
    if (hooks_.before_apply) hooks_.before_apply();
    absl::Status status = ApplyEntries(entries, applied);
    while (!status.ok()) {
      // The database refused the write (a failed flush behind it: a full disk, an I/O error).
      // Its memtables are lost with it: close it, and reopen it from its tables and the log.
      {
        absl::MutexLock lock(&mu_);
        if (handles_ != nullptr) CloseAfterFailureLocked(status);
      }
      absl::SleepFor(kReopenInterval);
      absl::MutexLock lock(&mu_);
      status = ReopenLocked();
      {
        absl::MutexLock stopping(&apply_mu_);
        if (!status.ok() && applier_stopping_) {
          unapplied_bytes_ = 0;
          // Snapshots asked meanwhile get their default answer (Unavailable: the store is
          // stopping) rather than a wait that no applier would ever end.
          for (SnapshotRequest* request : snapshot_requests_) request->done = true;
          snapshot_requests_.clear();
          apply_changed_.NotifyAll();
          return;  // Stopping: the log keeps what was not applied, for the next start.
        }
      }
    }
    int64_t bytes = 0;
    for (const Unapplied& entry : entries) bytes += static_cast<int64_t>(entry.payload.size());
    {
      absl::MutexLock lock(&apply_mu_);
      applied_ = std::max(applied_, entries.back().position);
      unapplied_bytes_ -= bytes;
    }
    apply_changed_.NotifyAll();
    ForgetApplied(entries);
    // Once the log has a segment behind the one being written, a checkpoint lets it go; once
    // the records held in memory reach their bound, it writes them to RocksDB.
    // One that fails (a full disk) is tried again a second later, not at every turn: each
    // attempt writes table files and logs a line.
    if ((log_->SegmentCount() > 1 ||
         RecentRecordsBytes() >= options_.recent_records_checkpoint_bytes) &&
        SteadyNow() >= next_checkpoint_attempt) {
      if (absl::Status checkpointed = Checkpoint(); !checkpointed.ok()) {
        next_checkpoint_attempt = SteadyNow() + SteadyTimeout(kCheckpointRetryInterval);
        std::cerr << "ledgerd: checkpoint failed (" << checkpointed.message()
                  << "); the log keeps its segments until one succeeds (next try in "
                  << absl::FormatDuration(kCheckpointRetryInterval) << ")\n";
      }
    }
  }
}

absl::Status RocksDbStore::ApplyEntries(const std::vector<Unapplied>& entries, uint64_t after) {
  absl::MutexLock apply_lock(&apply_write_mu_);
  absl::ReaderMutexLock lock(&mu_);
  if (handles_ == nullptr) return ClosedError();
  // Idempotency records reach RocksDB at the next checkpoint, from RecentRequests (added as the
  // entries became durable), journal entries from RecentJournal, and accounts from the dirty
  // accounts kept here: none of them goes through the memtable. Accounts are kept in the log's
  // order, so the last change of each wins with no sort (sorting every change of a 1,000-op
  // entry to find the last of each key was a fifth of the applier's CPU under Apply load).
  // What is left (transfer records, deletions) is sorted by family and key, the last change of
  // a key kept: RocksDB's memtable inserts a run of sorted keys from where the previous insert
  // ended instead of from the top of its skiplist.
  std::vector<LogChange> changes;
  std::vector<RecentJournal::Put> journal;
  std::vector<std::pair<absl::string_view, std::optional<absl::string_view>>> accounts;
  uint64_t last = after;
  for (const Unapplied& entry : entries) {
    if (entry.position <= after) continue;  // Replayed when the database was reopened.
    absl::Status read = ForEachLogChange(entry.payload, [&](const LogChange& change) {
      if (change.family == LogFamily::kRequests) return;
      if (change.family == LogFamily::kJournal && change.value.has_value() &&
          JournalKeySequence(change.key).has_value()) {
        journal.push_back({.key = change.key, .value = *change.value});
        return;
      }
      if (change.family == LogFamily::kAccounts) {
        accounts.emplace_back(change.key, change.value);
        return;
      }
      changes.push_back(change);
    });
    if (!read.ok()) return read;
    last = entry.position;
  }
  if (last == after) return absl::OkStatus();
  recent_journal_.Add(journal);
  std::stable_sort(changes.begin(), changes.end(), [](const LogChange& a, const LogChange& b) {
    return a.family != b.family ? a.family < b.family : a.key < b.key;
  });
  rocksdb::WriteBatch write;
  rocksdb::Status put;
  absl::MutexLock dirty_lock(&dirty_mu_);
  // An account's state is written at the next checkpoint, once, however often it changed: a
  // third of the keys a Deposit would insert into RocksDB's memtable. Until then it is read from
  // here; a crash replays it from the log. (No entry deletes an account; were one to, the
  // deletion goes to the memtable now and a later put in the log wins at the checkpoint.)
  for (const auto& [key, value] : accounts) {
    if (value.has_value()) {
      dirty_accounts_.try_emplace(key).first->second.assign(value->data(), value->size());
    } else {
      dirty_accounts_.erase(key);
      put = write.Delete(handles_->families[kAccounts], ToSlice(key));
      if (!put.ok()) break;
    }
  }
  for (size_t i = 0; i < changes.size() && put.ok(); ++i) {
    const LogChange& change = changes[i];
    if (i + 1 < changes.size() && changes[i + 1].family == change.family &&
        changes[i + 1].key == change.key) {
      continue;  // A later change of the same key wins.
    }
    rocksdb::ColumnFamilyHandle* family = handles_->families[static_cast<int>(change.family)];
    put = change.value.has_value() ? write.Put(family, ToSlice(change.key), ToSlice(*change.value))
                                   : write.Delete(family, ToSlice(change.key));
  }
  // `log_applied` is not advanced here: the accounts kept in memory are not in the database
  // yet. Only a checkpoint moves it; a start replays from there (a replay is idempotent).
  if (!put.ok()) return FromRocks(put, "preparing a write");
  // No WAL: the log is the write-ahead log. A crash loses the memtables, and the next start
  // replays the log from the position the tables hold.
  rocksdb::WriteOptions no_wal;
  no_wal.disableWAL = true;
  if (write.Count() == 0) return absl::OkStatus();
  return FromRocks(handles_->db->Write(no_wal, &write), "applying the log to RocksDB");
}

void RocksDbStore::ForgetApplied(const std::vector<Unapplied>& entries) {
  for (const Unapplied& entry : entries) {
    ForEachLogChange(entry.payload, [&](const LogChange& change) {
      if (UnappliedRecords::Keeps(change.family)) {
        unapplied_.Forget(entry.position, change.family, change.key);
      }
    }).IgnoreError();
  }
}

absl::Status RocksDbStore::AwaitApplied() {
  const uint64_t needed = appended_.load(std::memory_order_acquire);
  absl::MutexLock lock(&apply_mu_);
  ++readers_waiting_;
  apply_changed_.NotifyAll();  // The applier stops gathering a batch.
  const absl::Cleanup done = [this]()
                                 ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_) { --readers_waiting_; };
  const auto reached = [this, needed]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_) {
    return applied_ >= needed || closed_.load(std::memory_order_acquire);
  };
  if (!apply_changed_.WaitFor(apply_mu_, kApplyWait, reached)) {
    return absl::UnavailableError(absl::StrCat("the store has not caught up with the log (applied ",
                                               applied_, " of ", needed, ") within ",
                                               absl::FormatDuration(kApplyWait)));
  }
  return absl::OkStatus();
}

absl::Status RocksDbStore::ReopenLocked() {
  const SteadyTime now = SteadyNow();
  if (now - last_reopen_attempt_ < SteadyTimeout(kReopenInterval)) return ClosedError();
  last_reopen_attempt_ = now;
  if (absl::Status in_place = guard_->Check(); !in_place.ok()) return in_place;
  absl::StatusOr<std::unique_ptr<Handles>> reopened = OpenHandles(options_, /*create=*/false);
  if (reopened.ok() && (*reopened)->ledger_id != ledger_id_) {
    reopened = absl::FailedPreconditionError(
        absl::StrCat("the directory now holds another ledger (id ", (*reopened)->ledger_id,
                     ", not ", ledger_id_, ")"));
  }
  if (!reopened.ok()) {
    reopen_failure_ = reopened.status();
    return ClosedError();
  }
  {
    // The accounts kept in memory went with the database's memtables; the replay brings them
    // back into the database itself.
    absl::MutexLock dirty_lock(&dirty_mu_);
    dirty_accounts_.clear();
  }
  absl::StatusOr<uint64_t> replayed = Replay(**reopened, *log_);
  if (!replayed.ok()) {
    reopen_failure_ = replayed.status();
    return ClosedError();
  }
  {
    absl::MutexLock lock(&apply_mu_);
    applied_ = *replayed;
  }
  apply_changed_.NotifyAll();
  handles_ = *std::move(reopened);
  closed_.store(false, std::memory_order_release);
  ++generation_;
  reopen_failure_ = absl::OkStatus();
  std::cerr << "ledgerd: storage reopened " << options_.data_dir << " after a failed write ("
            << failure_.message() << "); writes resume\n";
  return absl::OkStatus();
}

absl::Status RocksDbStore::ReadWith(const std::function<absl::Status(Handles& handles)>& read,
                                    bool await_applied) {
  // Read-your-writes: whatever was acknowledged before this read is applied before it reads.
  // A database reopened after a failure has replayed the whole log before anyone reads it.
  if (await_applied) {
    if (absl::Status caught_up = AwaitApplied(); !caught_up.ok()) return caught_up;
  }
  absl::ReaderMutexLock lock(&mu_);
  if (handles_ == nullptr) return ClosedError();
  return read(*handles_);
}

absl::Status RocksDbStore::ClosedError() const {
  return absl::UnavailableError(absl::StrCat(
      "storage is closed since a write failed (", failure_.message(), ")",
      reopen_failure_.ok() ? ""
                           : absl::StrCat("; reopening it failed: ", reopen_failure_.message()),
      "; it is reopened and the log replayed into it every ",
      absl::FormatDuration(kReopenInterval)));
}

absl::StatusOr<std::optional<RequestRecord>> RocksDbStore::FindRequest(
    absl::string_view account_id, absl::string_view request_id) {
  absl::StatusOr<MemoryLookup> found =
      LookUpRequest(account_id, request_id, rocksdb::ReadOptions());
  if (!found.ok()) return found.status();
  return std::move(found->record);
}

absl::StatusOr<MemoryLookup> RocksDbStore::FindRequestInMemory(absl::string_view account_id,
                                                               absl::string_view request_id) {
  // A closed store reopens on its next read: that is disk work, for a thread that may block.
  if (closed_.load(std::memory_order_acquire)) return MemoryLookup{};
  rocksdb::ReadOptions memory_only;
  memory_only.read_tier = rocksdb::kBlockCacheTier;
  return LookUpRequest(account_id, request_id, memory_only);
}

namespace {

// A lookup answered by RecentRequests' `held` record (nullopt: deleted).
absl::StatusOr<MemoryLookup> AnsweredFromMemory(const std::optional<std::string>& held) {
  MemoryLookup found{.answered = true, .record = std::nullopt};
  if (!held.has_value()) return found;
  absl::StatusOr<RequestRecord> record = DecodeRequest(*held);
  if (!record.ok()) return record.status();
  found.record = *std::move(record);
  return found;
}

// A lookup answered by RocksDB's `read` of `value`, read with `read_options`.
absl::StatusOr<MemoryLookup> AnsweredFromTables(const rocksdb::Status& read,
                                                absl::string_view value,
                                                const rocksdb::ReadOptions& read_options) {
  MemoryLookup found;
  // kBlockCacheTier: the answer is in a block that is not cached.
  if (read.IsIncomplete()) return found;
  // kBlockCacheTier too, from RocksDB 7.8 (fixed upstream in 2024, facebook/rocksdb#12443): a
  // table file not open in its table cache is reported as found with no value ("the key may
  // exist") rather than Incomplete. With max_open_files at -1 every table stays open; should
  // that change, this is a question for the disk, not a corrupt record.
  if (read_options.read_tier == rocksdb::kBlockCacheTier && read.ok() && value.empty()) {
    return found;
  }
  found.answered = true;
  if (read.IsNotFound()) return found;
  if (!read.ok()) return FromRocks(read, "reading an idempotency record");
  absl::StatusOr<RequestRecord> record = DecodeRequest(value);
  if (!record.ok()) return record.status();
  found.record = *std::move(record);
  return found;
}

}  // namespace

std::vector<absl::StatusOr<MemoryLookup>> RocksDbStore::FindRequests(
    absl::Span<const RequestKeyRef> keys, bool may_block) {
  // Memory-only lookups one at a time: RocksDB 7.8's MultiGet with kBlockCacheTier reports a
  // key whose data block is not cached as found with no value, not as Incomplete (its Get does
  // not), and its other no-I/O paths are not worth trusting with an idempotency answer.
  if (!may_block) return LedgerStore::FindRequests(keys, may_block);
  std::vector<absl::StatusOr<MemoryLookup>> found(keys.size(), MemoryLookup{});
  // The keys RecentRequests does not hold, for RocksDB, and where their answers go. Read without
  // waiting for the applier, as LookUpRequest says why: waiting for it held a shard for up to
  // 0.8 s behind each checkpoint under Apply load, 40% of the shards' time, and made the p99 of
  // a 1,000-operation call at half the maximum rate 0.4-0.7 s (docs/benchmarks.md).
  std::vector<std::string> table_keys;
  std::vector<size_t> answer_at;
  for (size_t i = 0; i < keys.size(); ++i) {
    std::string key = RequestKey(keys[i].account_id, keys[i].request_id);
    if (std::optional<std::optional<std::string>> held = recent_requests_.Find(key);
        held.has_value()) {
      found[i] = AnsweredFromMemory(*held);
      continue;
    }
    table_keys.push_back(std::move(key));
    answer_at.push_back(i);
  }
  if (table_keys.empty()) return found;
  const rocksdb::ReadOptions read_options;
  absl::Status status = ReadWith(
      [&](Handles& handles) {
        const std::vector<rocksdb::Slice> slices(table_keys.begin(), table_keys.end());
        std::vector<rocksdb::PinnableSlice> values(slices.size());
        std::vector<rocksdb::Status> reads(slices.size());
        handles.db->MultiGet(read_options, handles.families[kRequests], slices.size(),
                             slices.data(), values.data(), reads.data());
        for (size_t k = 0; k < slices.size(); ++k) {
          found[answer_at[k]] = AnsweredFromTables(reads[k], View(values[k]), read_options);
        }
        return absl::OkStatus();
      },
      /*await_applied=*/false);
  if (!status.ok()) {
    for (const size_t i : answer_at) found[i] = status;
  }
  return found;
}

absl::StatusOr<MemoryLookup> RocksDbStore::LookUpRequest(absl::string_view account_id,
                                                         absl::string_view request_id,
                                                         const rocksdb::ReadOptions& read_options) {
  const std::string key = RequestKey(account_id, request_id);
  // The applier never writes idempotency records: the journal thread holds each in
  // RecentRequests from the moment its entry is durable (a replay, before serving) until a
  // checkpoint has ingested it into RocksDB. So a record is here or in RocksDB (or nowhere), and
  // no lookup waits for the applier, which a checkpoint can keep busy for hundreds of
  // milliseconds (see FindRequests).
  if (std::optional<std::optional<std::string>> held = recent_requests_.Find(key);
      held.has_value()) {
    return AnsweredFromMemory(*held);
  }
  absl::StatusOr<MemoryLookup> found;
  absl::Status status = ReadWith(
      [&](Handles& handles) {
        std::string value;
        const rocksdb::Status read =
            handles.db->Get(read_options, handles.families[kRequests], key, &value);
        found = AnsweredFromTables(read, value, read_options);
        return absl::OkStatus();
      },
      /*await_applied=*/false);
  if (!status.ok()) return status;
  return found;
}

absl::Status RocksDbStore::ForEachAccount(
    const std::function<void(std::string account_id, const AccountState& state)>& load) {
  // No checkpoint meanwhile: one moves the states kept in memory aside (neither in
  // dirty_accounts_ nor in the tables until it ends). At start-up none runs yet; a replica that
  // becomes the leader loads while its applier may be checkpointing.
  absl::MutexLock checkpoint_lock(&checkpoint_mu_);
  return ReadWith([&](Handles& handles) {
    rocksdb::ReadOptions read_options;
    read_options.verify_checksums = true;
    read_options.fill_cache = false;  // One pass at start-up: do not evict what serving needs.
    std::unique_ptr<rocksdb::Iterator> it(
        handles.db->NewIterator(read_options, handles.families[kAccounts]));
    // The states the start-up's replay of the log left in memory (CatchUpWithLog) are newer than
    // the tables': they are loaded instead, in key order with the others. They came from the log
    // with their journal entries (which are in memory too), so the check below holds the tables'
    // states against the tables' journal, as it does when nothing was replayed.
    std::vector<std::pair<std::string, std::string>> replayed;
    {
      absl::MutexLock dirty_lock(&dirty_mu_);
      replayed.assign(dirty_accounts_.begin(), dirty_accounts_.end());
    }
    std::sort(replayed.begin(), replayed.end());
    size_t next_replayed = 0;
    absl::Status replayed_failure;
    const auto load_replayed = [&](size_t end) {
      for (; next_replayed < end && replayed_failure.ok(); ++next_replayed) {
        auto& [key, value] = replayed[next_replayed];
        absl::StatusOr<AccountState> state = DecodeAccount(value);
        if (!state.ok()) {
          replayed_failure = absl::DataLossError(
              absl::StrCat("account ", key, " in the log: ", state.status().message()));
          return;
        }
        load(std::move(key), *state);
      }
    };
    const std::function<void(std::string, const AccountState&)> load_merged =
        [&](std::string account_id, const AccountState& state) {
          size_t before = next_replayed;
          while (before < replayed.size() && replayed[before].first < account_id) ++before;
          load_replayed(before);
          if (next_replayed < replayed.size() && replayed[next_replayed].first == account_id) {
            load_replayed(next_replayed + 1);
            return;
          }
          load(std::move(account_id), state);
        };
    // Each account is checked against its newest journal entry, on worker threads, before it is
    // loaded (JournalCheckPool).
    JournalCheckPool check(
        [&] {
          return std::unique_ptr<rocksdb::Iterator>(
              handles.db->NewIterator(read_options, handles.families[kJournal]));
        },
        load_merged, JournalCheckThreads());
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      absl::StatusOr<AccountState> state = DecodeAccount(View(it->value()));
      if (!state.ok()) {
        return absl::DataLossError(
            absl::StrCat("account ", View(it->key()), ": ", state.status().message()));
      }
      if (absl::Status agrees = check.Add(View(it->key()), *state); !agrees.ok()) return agrees;
    }
    if (!it->status().ok()) return FromRocks(it->status(), "reading the accounts");
    if (absl::Status checked = check.Finish(); !checked.ok()) return checked;
    ResumeCompactions(handles);
    load_replayed(replayed.size());
    return replayed_failure;
  });
}

absl::StatusOr<std::optional<AccountState>> RocksDbStore::LookUpAccount(
    Handles& handles, absl::string_view account_id, bool& in_memory) {
  std::string value;
  in_memory = false;
  const std::string key = AccountKey(account_id);
  std::shared_ptr<const AccountStates> checkpointing;
  {
    absl::MutexLock dirty_lock(&dirty_mu_);
    auto dirty = dirty_accounts_.find(key);
    if (dirty != dirty_accounts_.end()) {
      value = dirty->second;
      in_memory = true;
    }
    checkpointing = checkpointing_accounts_;
  }
  // A checkpoint writing the states it took from the map: they are RocksDB's once it is done.
  if (!in_memory && checkpointing != nullptr) {
    auto state = checkpointing->find(key);
    if (state != checkpointing->end()) {
      value = state->second;
      in_memory = true;
    }
  }
  if (!in_memory) {
    rocksdb::Status read =
        handles.db->Get(rocksdb::ReadOptions(), handles.families[kAccounts], key, &value);
    if (read.IsNotFound()) return std::nullopt;
    if (!read.ok()) return FromRocks(read, "reading an account");
  }
  absl::StatusOr<AccountState> state = DecodeAccount(value);
  if (!state.ok()) return state.status();
  return *state;
}

absl::StatusOr<std::optional<AccountState>> RocksDbStore::FindAccount(
    absl::string_view account_id) {
  std::optional<AccountState> found;
  absl::Status status = ReadWith([&](Handles& handles) {
    bool in_memory = false;
    absl::StatusOr<std::optional<AccountState>> state =
        LookUpAccount(handles, account_id, in_memory);
    if (!state.ok()) return state.status();
    if (!state->has_value() || in_memory) {
      // Applied from the log with its journal entry, which may still be in RecentJournal: there
      // is no disk read to check.
      found = *state;
      return absl::OkStatus();
    }
    // A reloaded account is held to its journal as the ones loaded at start-up are: one Seek, on
    // a path taken only after a failed write (or for a History page that came back empty).
    std::unique_ptr<rocksdb::Iterator> journal(
        handles.db->NewIterator(rocksdb::ReadOptions(), handles.families[kJournal]));
    if (absl::Status agrees = AccountJournalCheck(journal.get()).CheckOne(account_id, **state);
        !agrees.ok()) {
      return agrees;
    }
    found = *state;
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return found;
}

absl::StatusOr<AccountsAt> RocksDbStore::ReadAccountsAtApplied(
    const std::vector<std::string>& account_ids) {
  SnapshotRequest request;
  request.account_ids = &account_ids;
  absl::MutexLock lock(&apply_mu_);
  if (applier_stopping_) return request.result;
  snapshot_requests_.push_back(&request);
  apply_changed_.NotifyAll();
  while (!request.done) {
    apply_changed_.WaitFor(apply_mu_, absl::Seconds(1),
                           [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_) { return request.done; });
  }
  return std::move(request.result);
}

void RocksDbStore::ServeSnapshots(const std::vector<SnapshotRequest*>& requests, uint64_t applied) {
  for (SnapshotRequest* request : requests) {
    AccountsAt at;
    at.position = applied;
    absl::Status read = ReadWith(
        [&](Handles& handles) {
          for (const std::string& id : *request->account_ids) {
            bool in_memory = false;
            absl::StatusOr<std::optional<AccountState>> state =
                LookUpAccount(handles, id, in_memory);
            if (!state.ok()) return state.status();
            at.states.push_back(*state);
          }
          return absl::OkStatus();
        },
        /*await_applied=*/false);
    request->result = read.ok() ? absl::StatusOr<AccountsAt>(std::move(at)) : read;
  }
  {
    absl::MutexLock lock(&apply_mu_);
    for (SnapshotRequest* request : requests) request->done = true;
  }
  apply_changed_.NotifyAll();
}

absl::StatusOr<HistoryPage> RocksDbStore::ReadHistory(absl::string_view account_id, uint64_t start,
                                                      int32_t limit) {
  HistoryPage page;
  absl::Status status = ReadWith([&](Handles& handles) {
    const std::string prefix = JournalPrefix(account_id);
    const uint64_t through = start == 0 ? UINT64_MAX : start;
    // The entries since the last checkpoint, from memory first: a checkpoint ingests them into
    // RocksDB before it drops them, so whatever this misses the read below finds.
    std::map<uint64_t, std::string> by_sequence = recent_journal_.Read(prefix, through);
    // Then RocksDB's, up to one past the page: the page is the newest `limit` of both together
    // (an entry in both, while a checkpoint writes it, is one entry).
    rocksdb::ReadOptions read_options;
    rocksdb::Slice lower_bound(prefix);
    read_options.iterate_lower_bound = &lower_bound;
    std::unique_ptr<rocksdb::Iterator> it(
        handles.db->NewIterator(read_options, handles.families[kJournal]));
    int32_t from_tables = 0;
    for (it->SeekForPrev(JournalKey(account_id, through));
         it->Valid() && it->key().starts_with(prefix) && from_tables <= limit; it->Prev()) {
      std::optional<uint64_t> sequence = JournalKeySequence(View(it->key()));
      if (!sequence.has_value() || it->key().size() != prefix.size() + 8) continue;
      by_sequence.try_emplace(*sequence, it->value().ToString());
      ++from_tables;
    }
    if (!it->status().ok()) return FromRocks(it->status(), "reading the journal");
    for (auto held = by_sequence.rbegin(); held != by_sequence.rend(); ++held) {
      if (static_cast<int32_t>(page.entries.size()) == limit) {
        page.next_sequence = held->first;
        break;
      }
      absl::StatusOr<JournalEntry> entry = DecodeJournal(held->second);
      if (!entry.ok()) return entry.status();
      entry->account_id = std::string(account_id);
      entry->sequence = held->first;
      page.entries.push_back(*std::move(entry));
    }
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return page;
}

absl::StatusOr<RocksDbStore::DefaultRead> RocksDbStore::GetDefault(const std::string& key,
                                                                   absl::string_view what,
                                                                   bool memory_only) {
  DefaultRead found;
  // No read of a key waits for the applier: a record is in UnappliedRecords from its append until
  // the applier has written it to RocksDB (it is forgotten only after), so checking there first
  // and RocksDB second finds every acknowledged one. Waiting held a shard's transfer lookups
  // behind each checkpoint, as it did its request_id lookups (FindRequests). Listings of pending
  // transfers, which read RocksDB alone, still wait.
  if (std::optional<std::optional<std::string>> unapplied =
          unapplied_.Find(LogFamily::kDefault, key);
      unapplied.has_value()) {
    return DefaultRead{.answered = true, .value = *std::move(unapplied)};
  }
  // A closed store reopens on its next read: that is disk work, for a thread that may block.
  if (memory_only && closed_.load(std::memory_order_acquire)) return DefaultRead{.answered = false};
  absl::Status status = ReadWith(
      [&](Handles& handles) {
        rocksdb::ReadOptions read_options;
        if (memory_only) read_options.read_tier = rocksdb::kBlockCacheTier;
        std::string value;
        rocksdb::Status read =
            handles.db->Get(read_options, handles.families[kDefault], key, &value);
        if (read.IsNotFound()) return absl::OkStatus();
        if (read.IsIncomplete()) {  // kBlockCacheTier: in a block that is not cached.
          found.answered = false;
          return absl::OkStatus();
        }
        if (!read.ok()) return FromRocks(read, what);
        found.value = std::move(value);
        return absl::OkStatus();
      },
      /*await_applied=*/false);
  if (!status.ok()) return status;
  return found;
}

absl::StatusOr<TransferLookup> RocksDbStore::LookUpTransfer(absl::string_view transfer_id,
                                                            absl::string_view from,
                                                            bool memory_only) {
  DefaultRead read;
  if (!from.empty()) {
    absl::StatusOr<DefaultRead> pending = GetDefault(PendingTransferKey(transfer_id, from),
                                                     "reading a pending transfer", memory_only);
    if (!pending.ok()) return pending.status();
    read = *std::move(pending);
    if (!read.answered) return TransferLookup{};
  }
  if (!read.value.has_value()) {
    absl::StatusOr<DefaultRead> stored =
        GetDefault(TransferKey(transfer_id), "reading a transfer", memory_only);
    if (!stored.ok()) return stored.status();
    read = *std::move(stored);
    if (!read.answered) return TransferLookup{};
  }
  TransferLookup lookup{.answered = true};
  if (!read.value.has_value()) return lookup;
  absl::StatusOr<TransferRecord> record = DecodeTransfer(*read.value);
  if (!record.ok()) return record.status();
  lookup.record = *std::move(record);
  return lookup;
}

absl::StatusOr<CreditLookup> RocksDbStore::LookUpCredit(absl::string_view transfer_id,
                                                        bool memory_only) {
  absl::StatusOr<DefaultRead> read =
      GetDefault(CreditKey(transfer_id), "reading a transfer's credit", memory_only);
  if (!read.ok()) return read.status();
  if (!read->answered) return CreditLookup{};
  CreditLookup lookup{.answered = true};
  if (!read->value.has_value()) return lookup;
  absl::StatusOr<CreditReceipt> receipt = DecodeCredit(*read->value);
  if (!receipt.ok()) return receipt.status();
  lookup.receipt = *std::move(receipt);
  return lookup;
}

absl::StatusOr<std::optional<TransferRecord>> RocksDbStore::FindTransfer(
    absl::string_view transfer_id, absl::string_view from) {
  absl::StatusOr<TransferLookup> found = LookUpTransfer(transfer_id, from, /*memory_only=*/false);
  if (!found.ok()) return found.status();
  return std::move(found->record);
}

absl::StatusOr<std::optional<CreditReceipt>> RocksDbStore::FindCredit(
    absl::string_view transfer_id) {
  absl::StatusOr<CreditLookup> found = LookUpCredit(transfer_id, /*memory_only=*/false);
  if (!found.ok()) return found.status();
  return std::move(found->receipt);
}

absl::StatusOr<TransferLookup> RocksDbStore::FindTransferInMemory(absl::string_view transfer_id,
                                                                  absl::string_view from) {
  return LookUpTransfer(transfer_id, from, /*memory_only=*/true);
}

absl::StatusOr<CreditLookup> RocksDbStore::FindCreditInMemory(absl::string_view transfer_id) {
  return LookUpCredit(transfer_id, /*memory_only=*/true);
}

absl::StatusOr<std::vector<TransferRecord>> RocksDbStore::FindPendingTransfers(
    absl::string_view transfer_id) {
  std::vector<TransferRecord> pending;
  absl::Status status = ReadWith([&](Handles& handles) {
    const std::string prefix =
        absl::StrCat(PendingTransferPrefix(), transfer_id, absl::string_view("\0", 1));
    std::unique_ptr<rocksdb::Iterator> it(
        handles.db->NewIterator(rocksdb::ReadOptions(), handles.families[kDefault]));
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      absl::StatusOr<TransferRecord> record = DecodeTransfer(View(it->value()));
      if (!record.ok()) return record.status();
      pending.push_back(*std::move(record));
    }
    return FromRocks(it->status(), "reading pending transfers");
  });
  if (!status.ok()) return status;
  return pending;
}

absl::StatusOr<std::optional<TransferRecord>> RocksDbStore::ReadTransfer(
    absl::string_view transfer_id) {
  absl::StatusOr<std::optional<TransferRecord>> final_record = FindTransfer(transfer_id, "");
  if (!final_record.ok() || final_record->has_value()) return final_record;
  absl::StatusOr<std::vector<TransferRecord>> pending = FindPendingTransfers(transfer_id);
  if (!pending.ok()) return pending.status();
  if (pending->empty()) return std::nullopt;
  return pending->front();
}

absl::Status RocksDbStore::ForEachPendingTransfer(
    const std::function<void(std::string transfer_id, const TransferRecord& record)>& load) {
  return ReadWith([&](Handles& handles) {
    const std::string prefix = PendingTransferPrefix();
    std::unique_ptr<rocksdb::Iterator> it(
        handles.db->NewIterator(rocksdb::ReadOptions(), handles.families[kDefault]));
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      std::string transfer_id = PendingTransferId(View(it->key()));
      absl::StatusOr<TransferRecord> record = DecodeTransfer(View(it->value()));
      if (transfer_id.empty() || !record.ok() || record->state != TransferState::kPending) {
        return absl::DataLossError(absl::StrCat("a pending transfer's record (key ",
                                                absl::CHexEscape(View(it->key())),
                                                ") is not a pending transfer"));
      }
      load(std::move(transfer_id), *record);
    }
    return FromRocks(it->status(), "listing the pending transfers");
  });
}

absl::StatusOr<int64_t> RocksDbStore::CountRequestRecords() {
  int64_t count = 0;
  absl::Status status = ReadWith([&](Handles& handles) {
    std::unique_ptr<rocksdb::Iterator> it(
        handles.db->NewIterator(rocksdb::ReadOptions(), handles.families[kRequests]));
    for (it->SeekToFirst(); it->Valid(); it->Next()) ++count;
    return FromRocks(it->status(), "counting requests");
  });
  if (!status.ok()) return status;
  return count;
}

bool RocksDbStore::CompactionsDeferred() const {
  absl::ReaderMutexLock lock(&mu_);
  if (handles_ == nullptr) return false;
  bool deferred = true;
  for (rocksdb::ColumnFamilyHandle* family : handles_->families) {
    deferred = deferred && handles_->db->GetOptions(family).disable_auto_compactions;
  }
  return deferred;
}

absl::StatusOr<StoreMemory> RocksDbStore::Memory() {
  // Not through ReadWith: a scrape never reopens a closed database.
  absl::ReaderMutexLock lock(&mu_);
  if (handles_ == nullptr) return ClosedError();
  const Handles& handles = *handles_;
  StoreMemory memory;
  for (rocksdb::ColumnFamilyHandle* family : handles.families) {
    uint64_t memtables = 0;
    uint64_t table_readers = 0;
    if (!handles.db->GetIntProperty(family, rocksdb::DB::Properties::kSizeAllMemTables,
                                    &memtables) ||
        !handles.db->GetIntProperty(family, rocksdb::DB::Properties::kEstimateTableReadersMem,
                                    &table_readers)) {
      return absl::InternalError("RocksDB does not report its memory");
    }
    memory.memtables_bytes += static_cast<int64_t>(memtables);
    memory.table_readers_bytes += static_cast<int64_t>(table_readers);
  }
  memory.block_cache_bytes = static_cast<int64_t>(handles.block_cache->GetUsage());
  memory.recent_records_bytes = RecentRecordsBytes();
  memory.block_cache_pinned_bytes = static_cast<int64_t>(handles.block_cache->GetPinnedUsage());
  return memory;
}

absl::Status RocksDbStore::PurgeExpiredRequests() {
  if (absl::Status checkpointed = Checkpoint(); !checkpointed.ok()) return checkpointed;
  return ReadWith([&](Handles& handles) {
    rocksdb::CompactRangeOptions compact;
    // Rewrite even the bottommost files, where expired records would otherwise stay.
    compact.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
    rocksdb::Status flushed =
        handles.db->Flush(rocksdb::FlushOptions(), handles.families[kRequests]);
    if (!flushed.ok()) return FromRocks(flushed, "flushing requests");
    return FromRocks(
        handles.db->CompactRange(compact, handles.families[kRequests], nullptr, nullptr),
        "compacting requests");
  });
}

}  // namespace ledger::storage
