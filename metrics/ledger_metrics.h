// Defines `LedgerMetrics`, every Prometheus series ledgerd exports, and `ShardMetrics`, the
// per-shard observer that records into them without locks on the hot path.
//
// Families (names are a contract with the dashboard, the alert rules and users' queries; see
// docs/metrics.md): ledger_mailbox_depth, ledger_mailbox_capacity, ledger_mailbox_wait_seconds,
// ledger_handler_seconds, ledger_mailbox_rejected_total, ledger_expired_total,
// ledger_internal_errors_total, ledger_requests_total, ledger_accounts, ledger_build_info,
// ledger_batch_size, ledger_journal_write_seconds, ledger_journal_group_calls,
// ledger_journal_group_batches, ledger_storage_errors_total, ledger_recovery_seconds,
// ledger_admitted_total, ledger_refused_total, ledger_in_flight, ledger_in_flight_limit,
// ledger_mailbox_operations, ledger_mailbox_rejected_operations_total, ledger_apply_operations,
// ledger_apply_results_total, ledger_store_memory_bytes, ledger_connections,
// ledger_connections_max, ledger_connections_accepted_total, ledger_connections_closed_total,
// ledger_out_of_descriptors_total (and the transfer families).
//
// Values are kept in plain atomics owned by this class and turned into Prometheus families only
// when scraped (LedgerMetrics is a prometheus::Collectable): nothing on the hot path touches
// prometheus-cpp's Family or its mutexes.
#ifndef LEDGER_METRICS_LEDGER_METRICS_H_
#define LEDGER_METRICS_LEDGER_METRICS_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/annotated_mutex.h"
#include "base/status_code_names.h"
#include "metrics/batch_size_histogram.h"
#include "metrics/connection_counts.h"
#include "metrics/log_histogram.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "shard/admission_control.h"
#include "shard/commit_pipeline.h"
#include "shard/ledger_rules.h"
#include "shard/router.h"
#include "shard/shard_observer.h"

namespace ledger {

// The RPCs of ledger.v1.Ledger, as ledger_requests_total's method label.
enum class RpcMethod : uint8_t {
  kDeposit,
  kWithdraw,
  kBalance,
  kHistory,
  kTransfer,
  kGetTransfer,
  kApply,
  kWatch
};
inline constexpr size_t kRpcMethodCount = 8;

// The RPC that carries each shard operation.
constexpr RpcMethod MethodOf(Op op) {
  switch (op) {
    case Op::kDeposit:
      return RpcMethod::kDeposit;
    case Op::kWithdraw:
      return RpcMethod::kWithdraw;
    case Op::kBalance:
      return RpcMethod::kBalance;
    case Op::kTransfer:
    case Op::kTransferCredit:
    case Op::kTransferSettle:
      return RpcMethod::kTransfer;
  }
  return RpcMethod::kBalance;
}

// One shard's series. Thread-safe: OnShed from any thread; the other observer methods from the
// thread applying the shard's messages (one at a time, see LogHistogram); Collect* from any thread.
class ShardMetrics final : public ShardObserver {
 public:
  void OnShed(size_t operations) override {
    shed_.fetch_add(1, std::memory_order_relaxed);
    shed_operations_.fetch_add(operations, std::memory_order_relaxed);
  }
  void OnExpired() override { Bump(expired_); }
  void OnHandled(Op op, std::chrono::nanoseconds wait, std::chrono::nanoseconds handler) override {
    wait_.Record(wait);
    handler_[static_cast<size_t>(op)].Record(handler);
  }
  void OnInternalError() override { Bump(internal_errors_); }
  void OnBatch(size_t size, size_t accounts) override {
    batch_size_.Record(size);
    accounts_.store(accounts, std::memory_order_relaxed);
  }
  void OnStorageError() override { Bump(storage_errors_); }

  const LogHistogram& wait() const { return wait_; }
  const LogHistogram& handler(Op op) const { return handler_[static_cast<size_t>(op)]; }
  const BatchSizeHistogram& batch_size() const { return batch_size_; }
  uint64_t storage_errors() const { return storage_errors_.load(std::memory_order_relaxed); }
  uint64_t shed() const { return shed_.load(std::memory_order_relaxed); }
  uint64_t shed_operations() const { return shed_operations_.load(std::memory_order_relaxed); }
  uint64_t expired() const { return expired_.load(std::memory_order_relaxed); }
  uint64_t internal_errors() const { return internal_errors_.load(std::memory_order_relaxed); }
  size_t accounts() const { return accounts_.load(std::memory_order_relaxed); }

 private:
  // One writer at a time, as for LogHistogram.
  static void Bump(std::atomic<uint64_t>& counter) {
    counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  LogHistogram wait_;
  std::array<LogHistogram, kOpCount> handler_;
  BatchSizeHistogram batch_size_;
  alignas(kCacheLineBytes) std::atomic<uint64_t> shed_{0};  // Many writers: senders.
  std::atomic<uint64_t> shed_operations_{0};
  std::atomic<uint64_t> expired_{0};
  std::atomic<uint64_t> internal_errors_{0};
  std::atomic<uint64_t> storage_errors_{0};
  std::atomic<size_t> accounts_{0};
};

// The commit pipeline's series (one journal thread for the process). Thread-safe: the observer
// method from the journal thread only; Collect* from any thread.
class JournalMetrics final : public CommitObserver {
 public:
  void OnGroupWrite(size_t batches, size_t calls, std::chrono::nanoseconds duration,
                    bool /*ok*/) override {
    write_.Record(duration);
    group_calls_.Record(calls);
    group_batches_.Record(batches);
  }

  const LogHistogram& write() const { return write_; }
  const BatchSizeHistogram& group_calls() const { return group_calls_; }
  const BatchSizeHistogram& group_batches() const { return group_batches_; }

 private:
  LogHistogram write_;
  BatchSizeHistogram group_calls_;
  BatchSizeHistogram group_batches_;
};

// What the store holds in memory, by what holds it (ledger_store_memory_bytes{kind}).
struct StoreMemoryBytes {
  int64_t memtables = 0;
  int64_t block_cache = 0;
  int64_t table_readers = 0;
  int64_t recent_records = 0;
};

// Where the log stands (ledger_log_*).
struct LogStats {
  uint64_t position = 0;             // The newest entry appended.
  uint64_t applied_position = 0;     // The newest entry applied to RocksDB.
  int64_t disk_bytes = 0;            // The segment files.
  uint64_t checkpoints = 0;          // Checkpoints done since start.
  uint64_t checkpoint_failures = 0;  // Checkpoints that failed since start.
};

// What a cluster replica knows of its cluster (ledger_replica_*).
struct ReplicaStats {
  uint64_t node_id = 0;
  bool leader = false;   // Raft says this replica leads.
  bool serving = false;  // It serves ledger calls: it leads, caught up and loaded its shards.
  uint64_t term = 0;
  uint64_t leader_id = 0;  // 0 when no leader is known.
  uint64_t commit_position = 0;
  uint64_t applied_position = 0;     // libraft's: what this replica's log mirror has taken.
  uint64_t needs_state_through = 0;  // Above 0 while it waits for a member's state.
  uint64_t read_barriers = 0;
  uint64_t read_barrier_failures = 0;
  uint64_t sends_refused = 0;  // Raft messages refused: their peer had too much queued.
};

// Online backups since start (ledger_backups_total, ledger_backup_last_success_timestamp_seconds).
struct BackupStats {
  uint64_t completed = 0;  // Streamed whole, manifest included.
  uint64_t failed = 0;     // Began but did not end whole: the store failed, or the caller went.
  int64_t last_completed_unix_seconds = 0;  // 0 before the first.
};

// Watch streams (ledger_watch*): server/watch_feed.h.
struct WatchStats {
  int64_t watchers = 0;      // Streams served now.
  uint64_t events_sent = 0;  // Operations sent since start.
  uint64_t messages_sent = 0;
  // The slowest watcher's: positions committed and not yet sent to it, and how long since it
  // was last sent everything committed (0 when every watcher is caught up).
  uint64_t max_lag_positions = 0;
  double max_lag_seconds = 0;
};

// Thread-safe.
class LedgerMetrics final : public prometheus::Collectable {
 public:
  // `version` labels ledger_build_info.
  LedgerMetrics(int32_t num_shards, std::string version);

  // One observer per shard, for RouterOptions::observers. Valid as long as this object.
  std::vector<ShardObserver*> observers();
  const ShardMetrics& shard(int32_t index) const { return *shards_[index]; }
  // For RouterOptions::commit_observer. Valid as long as this object.
  CommitObserver* commit_observer() { return &journal_; }
  const JournalMetrics& journal() const { return journal_; }

  // Depth and capacity are read from the router at scrape time. Call once, before the first
  // scrape; `router` must outlive this object's scrapes.
  void AttachRouter(const Router* router) { router_.store(router, std::memory_order_release); }
  // Admitted and refused calls and calls in flight are read from `admission` at scrape time.
  // Call once, before the first scrape; `admission` must outlive this object's scrapes.
  void AttachAdmission(const AdmissionControl* admission) {
    admission_.store(admission, std::memory_order_release);
  }

  // The store's memory is read by `read` at scrape time; nullopt (a closed store) leaves the
  // family out of that scrape. Call once, before the first scrape; `read` must stay callable for
  // every scrape (the server stops the metrics endpoint before it closes the store).
  void AttachStoreMemory(std::function<std::optional<StoreMemoryBytes>()> read) {
    MutexLock lock(&store_memory_mu_);
    store_memory_ = std::move(read);
  }
  // The log's positions and size are read by `read` at scrape time (ledger_log_*). Call once,
  // before the first scrape; `read` must stay callable for every scrape.
  void AttachLog(std::function<LogStats()> read) {
    MutexLock lock(&log_mu_);
    log_ = std::move(read);
  }
  // A cluster replica's view is read by `read` at scrape time (ledger_replica_*). Call once,
  // before the first scrape; `read` must stay callable for every scrape. Never on a single node.
  void AttachReplica(std::function<ReplicaStats()> read) {
    MutexLock lock(&log_mu_);
    replica_ = std::move(read);
  }
  // The backups are read by `read` at scrape time (ledger_backup*). Call once, before the first
  // scrape; `read` must stay callable for every scrape.
  void AttachBackups(std::function<BackupStats()> read) {
    MutexLock lock(&log_mu_);
    backups_ = std::move(read);
  }
  // The Watch streams are read by `read` at scrape time (ledger_watch*). Call once, before the
  // first scrape; `read` must stay callable for every scrape.
  void AttachWatch(std::function<WatchStats()> read) {
    MutexLock lock(&log_mu_);
    watch_ = std::move(read);
  }
  // The gRPC port's connections are read by `read` at scrape time (ledger_connections*). Call
  // once, before the first scrape; `read` must stay callable for every scrape.
  void AttachConnections(std::function<ConnectionCounts()> read) {
    MutexLock lock(&connections_mu_);
    connections_ = std::move(read);
  }

  // Counts one finished RPC by method and gRPC status code (0-16; anything else counts as
  // UNKNOWN). Any thread.
  void RecordRequest(RpcMethod method, int status_code);
  uint64_t requests(RpcMethod method, int status_code) const;

  // An Apply call of `operations` operations passed its size check (ledger_apply_operations).
  // Any thread.
  void RecordApplyOperations(size_t operations);
  // An Apply call answered its operations with these codes (ledger_apply_results_total, by gRPC
  // status code 0-16). Any thread.
  void RecordApplyResults(const std::array<uint64_t, kStatusCodeCount>& codes);

  // How long start-up took to load the accounts from disk (ledger_recovery_seconds). Any thread.
  void SetRecoverySeconds(double seconds) {
    recovery_seconds_.store(seconds, std::memory_order_relaxed);
  }

  // The data directory was found deleted, replaced or unmounted while serving
  // (ledger_data_directory_lost = 1 from then on). Any thread.
  void SetDataDirectoryLost() { data_directory_lost_.store(true, std::memory_order_relaxed); }

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  void CollectShardFamilies(std::vector<prometheus::MetricFamily>& families) const;
  void CollectRequests(std::vector<prometheus::MetricFamily>& families) const;
  void CollectJournal(std::vector<prometheus::MetricFamily>& families) const;
  void CollectAdmission(std::vector<prometheus::MetricFamily>& families) const;
  void CollectTransfers(std::vector<prometheus::MetricFamily>& families) const;
  void CollectStoreMemory(std::vector<prometheus::MetricFamily>& families) const;
  void CollectConnections(std::vector<prometheus::MetricFamily>& families) const;
  void CollectLog(std::vector<prometheus::MetricFamily>& families) const;
  void CollectBackups(std::vector<prometheus::MetricFamily>& families) const;
  void CollectWatch(std::vector<prometheus::MetricFamily>& families) const;
  void CollectReplica(std::vector<prometheus::MetricFamily>& families) const;

  const std::string version_;
  std::vector<std::unique_ptr<ShardMetrics>> shards_;
  JournalMetrics journal_;
  std::atomic<const Router*> router_{nullptr};
  std::atomic<const AdmissionControl*> admission_{nullptr};
  std::array<std::array<std::atomic<uint64_t>, kStatusCodeCount>, kRpcMethodCount> requests_{};
  std::atomic<double> recovery_seconds_{0};
  // Apply calls finish on many threads; the histogram takes one writer at a time, and a lock per
  // call (not per operation) costs nothing next to the call.
  mutable Mutex apply_mu_;
  BatchSizeHistogram apply_operations_ ABSL_GUARDED_BY(apply_mu_);
  std::array<std::atomic<uint64_t>, kStatusCodeCount> apply_results_{};
  std::atomic<bool> data_directory_lost_{false};
  mutable Mutex store_memory_mu_;
  std::function<std::optional<StoreMemoryBytes>()> store_memory_ ABSL_GUARDED_BY(store_memory_mu_);
  mutable Mutex log_mu_;
  std::function<LogStats()> log_ ABSL_GUARDED_BY(log_mu_);
  std::function<BackupStats()> backups_ ABSL_GUARDED_BY(log_mu_);
  std::function<WatchStats()> watch_ ABSL_GUARDED_BY(log_mu_);
  std::function<ReplicaStats()> replica_ ABSL_GUARDED_BY(log_mu_);
  mutable Mutex connections_mu_;
  std::function<ConnectionCounts()> connections_ ABSL_GUARDED_BY(connections_mu_);
};

}  // namespace ledger

#endif  // LEDGER_METRICS_LEDGER_METRICS_H_
