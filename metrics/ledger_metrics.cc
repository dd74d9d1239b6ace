#include "metrics/ledger_metrics.h"

#include <optional>
#include <string>
#include <utility>

#include "base/check.h"
#include "base/status_code_names.h"

namespace ledger {
namespace {

// Indexed by RpcMethod.
constexpr std::array<const char*, kRpcMethodCount> kMethodNames = {
    "Deposit", "Withdraw", "Balance", "History", "Transfer", "GetTransfer", "Apply", "Watch"};

prometheus::MetricFamily Family(std::string name, std::string help, prometheus::MetricType type) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

prometheus::ClientMetric& AddMetric(prometheus::MetricFamily& family,
                                    std::vector<prometheus::ClientMetric::Label> labels) {
  family.metric.emplace_back();
  family.metric.back().label = std::move(labels);
  return family.metric.back();
}

// A family of one unlabelled counter or gauge holding `value`, appended to `families`.
void PushSingle(std::vector<prometheus::MetricFamily>& families, std::string name, std::string help,
                prometheus::MetricType type, double value) {
  prometheus::MetricFamily family = Family(std::move(name), std::move(help), type);
  prometheus::ClientMetric& metric = AddMetric(family, {});
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  families.push_back(std::move(family));
}

}  // namespace

LedgerMetrics::LedgerMetrics(int32_t num_shards, std::string version)
    : version_(std::move(version)) {
  LEDGER_CHECK(num_shards >= 1);
  shards_.reserve(num_shards);
  for (int32_t i = 0; i < num_shards; ++i) shards_.push_back(std::make_unique<ShardMetrics>());
}

std::vector<ShardObserver*> LedgerMetrics::observers() {
  std::vector<ShardObserver*> observers;
  observers.reserve(shards_.size());
  for (const auto& shard : shards_) observers.push_back(shard.get());
  return observers;
}

void LedgerMetrics::RecordRequest(RpcMethod method, int status_code) {
  if (status_code < 0 || status_code >= static_cast<int>(kStatusCodeCount)) status_code = 2;
  requests_[static_cast<size_t>(method)][status_code].fetch_add(1, std::memory_order_relaxed);
}

uint64_t LedgerMetrics::requests(RpcMethod method, int status_code) const {
  return requests_[static_cast<size_t>(method)][status_code].load(std::memory_order_relaxed);
}

std::vector<prometheus::MetricFamily> LedgerMetrics::Collect() const {
  std::vector<prometheus::MetricFamily> families;
  CollectShardFamilies(families);
  CollectJournal(families);
  CollectRequests(families);
  CollectAdmission(families);
  CollectTransfers(families);
  auto build = Family("ledger_build_info", "Always 1; the version label says which ledgerd runs.",
                      prometheus::MetricType::Gauge);
  AddMetric(build, {{"version", version_}}).gauge.value = 1;
  families.push_back(std::move(build));
  auto recovery = Family("ledger_recovery_seconds",
                         "Time start-up took to load every account from the data directory "
                         "(0 with --durability=none).",
                         prometheus::MetricType::Gauge);
  AddMetric(recovery, {}).gauge.value = recovery_seconds_.load(std::memory_order_relaxed);
  families.push_back(std::move(recovery));
  auto lost = Family("ledger_data_directory_lost",
                     "1 once the data directory was found deleted, replaced or unmounted while "
                     "serving: writes are refused and health is NOT_SERVING until a restart on "
                     "the restored directory.",
                     prometheus::MetricType::Gauge);
  AddMetric(lost, {}).gauge.value = data_directory_lost_.load(std::memory_order_relaxed) ? 1 : 0;
  families.push_back(std::move(lost));
  CollectStoreMemory(families);
  CollectLog(families);
  CollectBackups(families);
  CollectWatch(families);
  CollectReplica(families);
  CollectConnections(families);
  return families;
}

void LedgerMetrics::CollectLog(std::vector<prometheus::MetricFamily>& families) const {
  LogStats stats;
  {
    MutexLock lock(&log_mu_);
    if (!log_) return;  // --durability=none: no log.
    stats = log_();
  }
  using prometheus::MetricType;
  PushSingle(families, "ledger_log_position",
             "Position of the newest entry in the log (one entry per group commit).",
             MetricType::Gauge, static_cast<double>(stats.position));
  PushSingle(families, "ledger_log_applied_position",
             "Position of the newest log entry applied to RocksDB; History and GetTransfer wait "
             "for it to reach what was acknowledged before them.",
             MetricType::Gauge, static_cast<double>(stats.applied_position));
  PushSingle(families, "ledger_log_disk_bytes",
             "Bytes the log's segment files take (preallocated): about two segments of "
             "--log_segment_mib while checkpoints keep up.",
             MetricType::Gauge, static_cast<double>(stats.disk_bytes));
  PushSingle(families, "ledger_log_checkpoints_total",
             "Checkpoints: RocksDB's tables flushed up to a log position and the segments behind "
             "it deleted.",
             MetricType::Counter, static_cast<double>(stats.checkpoints));
  PushSingle(families, "ledger_log_checkpoint_failures_total",
             "Checkpoints that failed (a full disk, an I/O error): the log keeps its segments and "
             "the records stay in memory until one succeeds; tried again a second later.",
             MetricType::Counter, static_cast<double>(stats.checkpoint_failures));
}

void LedgerMetrics::CollectReplica(std::vector<prometheus::MetricFamily>& families) const {
  ReplicaStats stats;
  {
    MutexLock lock(&log_mu_);
    if (!replica_) return;  // A single node.
    stats = replica_();
  }
  using prometheus::MetricType;
  PushSingle(families, "ledger_replica_leader",
             "1 while Raft says this replica leads the cluster, else 0.", MetricType::Gauge,
             stats.leader ? 1 : 0);
  PushSingle(families, "ledger_replica_serving",
             "1 while this replica serves ledger calls (it leads, has caught up and has loaded its "
             "shards); every other replica refuses them NOT_LEADER. Summed over the cluster: 1.",
             MetricType::Gauge, stats.serving ? 1 : 0);
  PushSingle(families, "ledger_replica_node_id", "This replica's --node_id.", MetricType::Gauge,
             static_cast<double>(stats.node_id));
  PushSingle(families, "ledger_replica_leader_id",
             "The --node_id of the leader this replica knows of; 0 when it knows none.",
             MetricType::Gauge, static_cast<double>(stats.leader_id));
  PushSingle(families, "ledger_replica_term",
             "Raft's current term here: it rises by one or more with every election.",
             MetricType::Gauge, static_cast<double>(stats.term));
  PushSingle(families, "ledger_replica_commit_position",
             "The newest log position this replica knows to be committed on a majority.",
             MetricType::Gauge, static_cast<double>(stats.commit_position));
  PushSingle(families, "ledger_replica_applied_position",
             "The newest committed log position this replica's log has taken; behind "
             "commit_position while it catches up.",
             MetricType::Gauge, static_cast<double>(stats.applied_position));
  PushSingle(families, "ledger_replica_needs_state_through",
             "Above 0 while this replica, behind the leader's snapshot, waits for a member's state "
             "through that log position (it fetches it and starts again).",
             MetricType::Gauge, static_cast<double>(stats.needs_state_through));
  PushSingle(families, "ledger_replica_read_barriers_total",
             "Read barriers committed: each let every read waiting when it was proposed be served.",
             MetricType::Counter, static_cast<double>(stats.read_barriers));
  PushSingle(families, "ledger_replica_read_barrier_failures_total",
             "Read barriers that failed (this replica could not show it still led): their reads "
             "were refused NOT_LEADER.",
             MetricType::Counter, static_cast<double>(stats.read_barrier_failures));
  PushSingle(families, "ledger_replica_sends_refused_total",
             "Raft messages this replica did not send because their peer already had 16 MiB of "
             "entries or 4,096 messages queued (a peer cut off by the network): each is lost, as "
             "Raft allows, and sent again once the peer answers. Counts from the log's last open.",
             MetricType::Counter, static_cast<double>(stats.sends_refused));
}

void LedgerMetrics::CollectBackups(std::vector<prometheus::MetricFamily>& families) const {
  BackupStats stats;
  {
    MutexLock lock(&log_mu_);
    if (!backups_) return;
    stats = backups_();
  }
  using prometheus::MetricType;
  auto total = Family("ledger_backups_total",
                      "Online backups (ledgerctl backup) by result: ok (streamed whole, manifest "
                      "included) or failed (the store failed, or the caller went away).",
                      MetricType::Counter);
  AddMetric(total, {{"result", "ok"}}).counter.value = static_cast<double>(stats.completed);
  AddMetric(total, {{"result", "failed"}}).counter.value = static_cast<double>(stats.failed);
  families.push_back(std::move(total));
  auto last = Family("ledger_backup_last_success_timestamp_seconds",
                     "When the last backup that streamed whole ended (Unix seconds); 0 before "
                     "the first since start.",
                     MetricType::Gauge);
  AddMetric(last, {}).gauge.value = static_cast<double>(stats.last_completed_unix_seconds);
  families.push_back(std::move(last));
}

void LedgerMetrics::CollectWatch(std::vector<prometheus::MetricFamily>& families) const {
  WatchStats stats;
  {
    MutexLock lock(&log_mu_);
    if (!watch_) return;
    stats = watch_();
  }
  using prometheus::MetricType;
  const auto gauge = [&families](const char* name, const char* help, double value) {
    auto family = Family(name, help, MetricType::Gauge);
    AddMetric(family, {}).gauge.value = value;
    families.push_back(std::move(family));
  };
  const auto counter = [&families](const char* name, const char* help, double value) {
    auto family = Family(name, help, MetricType::Counter);
    AddMetric(family, {}).counter.value = value;
    families.push_back(std::move(family));
  };
  gauge("ledger_watchers", "Watch streams served now.", static_cast<double>(stats.watchers));
  gauge("ledger_watch_lag_positions",
        "The slowest watcher's lag: log positions committed and not yet sent to it.",
        static_cast<double>(stats.max_lag_positions));
  gauge("ledger_watch_lag_seconds",
        "How long since the slowest watcher was last sent everything committed (0 when every "
        "watcher is caught up).",
        stats.max_lag_seconds);
  counter("ledger_watch_events_sent_total", "Committed operations sent to watchers.",
          static_cast<double>(stats.events_sent));
  counter("ledger_watch_messages_sent_total",
          "Watch messages sent (operations of whole log positions, or a position alone).",
          static_cast<double>(stats.messages_sent));
}

void LedgerMetrics::CollectConnections(std::vector<prometheus::MetricFamily>& families) const {
  ConnectionCounts counts;
  {
    MutexLock lock(&connections_mu_);
    if (!connections_) return;
    counts = connections_();
  }
  using prometheus::MetricType;
  auto open = Family("ledger_connections",
                     "Client connections open on the gRPC port (as of the accept loop's last "
                     "look, at most a second ago).",
                     MetricType::Gauge);
  AddMetric(open, {}).gauge.value = static_cast<double>(counts.open);
  families.push_back(std::move(open));
  auto max = Family("ledger_connections_max",
                    "--max_connections: past it, accepting one more connection closes the idlest.",
                    MetricType::Gauge);
  AddMetric(max, {}).gauge.value = static_cast<double>(counts.max);
  families.push_back(std::move(max));
  auto accepted = Family("ledger_connections_accepted_total",
                         "Client connections accepted on the gRPC port.", MetricType::Counter);
  AddMetric(accepted, {}).counter.value = static_cast<double>(counts.accepted);
  families.push_back(std::move(accepted));
  auto closed = Family("ledger_connections_closed_total",
                       "Idle client connections ledgerd closed to make room, by reason: "
                       "connection_limit (--max_connections reached) or out_of_descriptors "
                       "(accept() found no file descriptor left).",
                       MetricType::Counter);
  AddMetric(closed, {{"reason", "connection_limit"}}).counter.value =
      static_cast<double>(counts.closed_at_limit);
  AddMetric(closed, {{"reason", "out_of_descriptors"}}).counter.value =
      static_cast<double>(counts.closed_out_of_descriptors);
  families.push_back(std::move(closed));
  PushSingle(families, "ledger_out_of_descriptors_total",
             "Times accept() on the gRPC port failed for want of a file descriptor (EMFILE, "
             "ENFILE) or of kernel memory: the open-file limit is too low for --max_connections "
             "and everything else ledgerd holds open.",
             prometheus::MetricType::Counter, static_cast<double>(counts.out_of_descriptors));
}

void LedgerMetrics::CollectStoreMemory(std::vector<prometheus::MetricFamily>& families) const {
  std::optional<StoreMemoryBytes> memory;
  {
    MutexLock lock(&store_memory_mu_);
    if (!store_memory_) return;  // --durability=none: no store.
    memory = store_memory_();
  }
  if (!memory.has_value()) return;
  auto family = Family("ledger_store_memory_bytes",
                       "Memory RocksDB holds, by kind: memtables (at most 64 MiB together), "
                       "block_cache (data, index and filter blocks; at most 32 MiB), "
                       "table_readers (held by the open table files outside the cache), "
                       "recent_records (idempotency records and journal entries held until the "
                       "next checkpoint writes them).",
                       prometheus::MetricType::Gauge);
  AddMetric(family, {{"kind", "memtables"}}).gauge.value = static_cast<double>(memory->memtables);
  AddMetric(family, {{"kind", "block_cache"}}).gauge.value =
      static_cast<double>(memory->block_cache);
  AddMetric(family, {{"kind", "table_readers"}}).gauge.value =
      static_cast<double>(memory->table_readers);
  AddMetric(family, {{"kind", "recent_records"}}).gauge.value =
      static_cast<double>(memory->recent_records);
  families.push_back(std::move(family));
}

void LedgerMetrics::CollectShardFamilies(std::vector<prometheus::MetricFamily>& families) const {
  using prometheus::MetricType;
  auto depth = Family("ledger_mailbox_depth",
                      "Messages queued in the shard's mailbox now, waiting to be applied (an "
                      "Apply call's part for the shard is one message).",
                      MetricType::Gauge);
  auto capacity = Family("ledger_mailbox_capacity",
                         "Operations the shard holds at most, queued or awaiting their write; a "
                         "call (or an Apply call's part) that does not fit is shed.",
                         MetricType::Gauge);
  auto held = Family("ledger_mailbox_operations",
                     "Operations the shard holds now against ledger_mailbox_capacity: queued, or "
                     "decided and awaiting their write.",
                     MetricType::Gauge);
  auto wait = Family("ledger_mailbox_wait_seconds",
                     "Time from an operation's admission to the shard until its handler starts "
                     "(an Apply part's operations share their part's admission). Rising while "
                     "handler time stays flat means the shard is saturated.",
                     MetricType::Histogram);
  auto handler = Family("ledger_handler_seconds",
                        "Time the shard's handler takes for one operation, by operation.",
                        MetricType::Histogram);
  auto rejected = Family("ledger_mailbox_rejected_total",
                         "Messages (calls, or Apply calls' parts) shed with RESOURCE_EXHAUSTED "
                         "because the shard had no room for them.",
                         MetricType::Counter);
  auto rejected_operations =
      Family("ledger_mailbox_rejected_operations_total",
             "Operations shed with RESOURCE_EXHAUSTED because the shard had no room for them (a "
             "call is one, an Apply part all of its operations).",
             MetricType::Counter);
  auto expired = Family("ledger_expired_total",
                        "Messages skipped, not applied, because the caller had cancelled or its "
                        "deadline had passed while the message waited.",
                        MetricType::Counter);
  auto internal = Family("ledger_internal_errors_total",
                         "Messages whose handler failed unexpectedly and answered INTERNAL.",
                         MetricType::Counter);
  auto accounts = Family("ledger_accounts", "Accounts the shard owns.", MetricType::Gauge);
  auto batch_size =
      Family("ledger_batch_size",
             "Operations the shard drained and decided together in one batch (an Apply part is "
             "never split).",
             MetricType::Histogram);
  auto storage_errors = Family("ledger_storage_errors_total",
                               "Failed storage writes or reads; their calls were answered "
                               "UNAVAILABLE and nothing of them was applied.",
                               MetricType::Counter);

  const Router* router = router_.load(std::memory_order_acquire);
  for (size_t i = 0; i < shards_.size(); ++i) {
    const std::string label = std::to_string(i);
    const ShardMetrics& shard = *shards_[i];
    if (router != nullptr) {
      const Shard& actor = router->shard(static_cast<int32_t>(i));
      AddMetric(depth, {{"shard", label}}).gauge.value = static_cast<double>(actor.MailboxDepth());
      AddMetric(capacity, {{"shard", label}}).gauge.value =
          static_cast<double>(actor.mailbox_capacity());
      AddMetric(held, {{"shard", label}}).gauge.value = static_cast<double>(actor.OperationsHeld());
    }
    shard.wait().Collect(AddMetric(wait, {{"shard", label}}));
    for (int op = 0; op < kOpCount; ++op) {
      const std::string op_name(OpName(static_cast<Op>(op)));
      shard.handler(static_cast<Op>(op))
          .Collect(AddMetric(handler, {{"op", op_name}, {"shard", label}}));
    }
    AddMetric(rejected, {{"shard", label}}).counter.value = static_cast<double>(shard.shed());
    AddMetric(rejected_operations, {{"shard", label}}).counter.value =
        static_cast<double>(shard.shed_operations());
    AddMetric(expired, {{"shard", label}}).counter.value = static_cast<double>(shard.expired());
    AddMetric(internal, {{"shard", label}}).counter.value =
        static_cast<double>(shard.internal_errors());
    AddMetric(accounts, {{"shard", label}}).gauge.value = static_cast<double>(shard.accounts());
    shard.batch_size().Collect(AddMetric(batch_size, {{"shard", label}}));
    AddMetric(storage_errors, {{"shard", label}}).counter.value =
        static_cast<double>(shard.storage_errors());
  }
  for (auto* family : {&depth, &capacity, &held, &wait, &handler, &rejected, &rejected_operations,
                       &expired, &internal, &accounts, &batch_size, &storage_errors}) {
    families.push_back(std::move(*family));
  }
}

void LedgerMetrics::CollectJournal(std::vector<prometheus::MetricFamily>& families) const {
  using prometheus::MetricType;
  auto write = Family("ledger_journal_write_seconds",
                      "Time one journal write took: every shard's batches queued since the "
                      "previous write, in one RocksDB write and, with --durability=sync, one sync.",
                      MetricType::Histogram);
  auto calls = Family("ledger_journal_group_calls",
                      "Calls one journal write made durable (all shards): _sum/_count is the calls "
                      "per sync, the group-commit factor; _count is the writes (syncs).",
                      MetricType::Histogram);
  auto batches = Family("ledger_journal_group_batches",
                        "Shard batches one journal write made durable.", MetricType::Histogram);
  journal_.write().Collect(AddMetric(write, {}));
  journal_.group_calls().Collect(AddMetric(calls, {}));
  journal_.group_batches().Collect(AddMetric(batches, {}));
  for (auto* family : {&write, &calls, &batches}) families.push_back(std::move(*family));
}

void LedgerMetrics::CollectAdmission(std::vector<prometheus::MetricFamily>& families) const {
  const AdmissionControl* admission = admission_.load(std::memory_order_acquire);
  if (admission == nullptr) return;
  auto admitted = Family("ledger_admitted_total",
                         "Ledger calls admitted under the server's bound on calls in flight "
                         "(--max_in_flight).",
                         prometheus::MetricType::Counter);
  AddMetric(admitted, {}).counter.value = static_cast<double>(admission->admitted());
  families.push_back(std::move(admitted));
  auto refused = Family("ledger_refused_total",
                        "Ledger calls refused unapplied, by reason: in_flight_limit, "
                        "fair_share and mailbox_full answer RESOURCE_EXHAUSTED with "
                        "grpc-retry-pushback-ms, shutting_down answers UNAVAILABLE.",
                        prometheus::MetricType::Counter);
  for (const RefusalReason reason : {RefusalReason::kInFlightLimit, RefusalReason::kFairShare,
                                     RefusalReason::kMailboxFull, RefusalReason::kShuttingDown}) {
    AddMetric(refused, {{"reason", RefusalReasonName(reason)}}).counter.value =
        static_cast<double>(admission->refused(reason));
  }
  families.push_back(std::move(refused));
  auto in_flight =
      Family("ledger_in_flight", "Ledger calls admitted and not yet answered, server-wide.",
             prometheus::MetricType::Gauge);
  AddMetric(in_flight, {}).gauge.value = static_cast<double>(admission->in_flight());
  families.push_back(std::move(in_flight));
  auto limit = Family("ledger_in_flight_limit",
                      "The bound on ledger calls in flight (--max_in_flight); beyond it a call is "
                      "refused at once with RESOURCE_EXHAUSTED.",
                      prometheus::MetricType::Gauge);
  AddMetric(limit, {}).gauge.value = static_cast<double>(admission->max_in_flight());
  families.push_back(std::move(limit));
}

void LedgerMetrics::CollectTransfers(std::vector<prometheus::MetricFamily>& families) const {
  const Router* router = router_.load(std::memory_order_acquire);
  if (router == nullptr) return;
  const TransferCoordinator& transfers = router->transfers();
  auto count = Family("ledger_transfers_in_flight",
                      "Transfers between shards debited from their source and neither credited "
                      "to their destination nor refunded yet.",
                      prometheus::MetricType::Gauge);
  AddMetric(count, {}).gauge.value = static_cast<double>(transfers.in_flight_count());
  families.push_back(std::move(count));
  auto amount = Family("ledger_transfers_in_flight_amount",
                       "The money of ledger_transfers_in_flight, in minor units: on no balance "
                       "right now. Sum of balances + this = deposits - withdrawals.",
                       prometheus::MetricType::Gauge);
  AddMetric(amount, {}).gauge.value = static_cast<double>(transfers.in_flight_amount());
  families.push_back(std::move(amount));
  auto retries = Family("ledger_transfer_step_retries_total",
                        "Steps of transfers between shards sent again: the next shard's mailbox "
                        "was full, or its write failed. Never dropped.",
                        prometheus::MetricType::Counter);
  AddMetric(retries, {}).counter.value = static_cast<double>(transfers.step_retries());
  families.push_back(std::move(retries));
}

void LedgerMetrics::CollectRequests(std::vector<prometheus::MetricFamily>& families) const {
  auto requests = Family("ledger_requests_total",
                         "Finished RPCs by method and final gRPC status code, including calls "
                         "refused before they reached a shard.",
                         prometheus::MetricType::Counter);
  for (size_t method = 0; method < kRpcMethodCount; ++method) {
    for (size_t code = 0; code < kStatusCodeCount; ++code) {
      AddMetric(requests, {{"code", kStatusCodeNames[code]}, {"method", kMethodNames[method]}})
          .counter.value =
          static_cast<double>(requests_[method][code].load(std::memory_order_relaxed));
    }
  }
  families.push_back(std::move(requests));

  auto apply_operations = Family("ledger_apply_operations",
                                 "Operations per Apply call (calls refused as a whole by their "
                                 "size or bytes are not counted).",
                                 prometheus::MetricType::Histogram);
  {
    MutexLock lock(&apply_mu_);
    apply_operations_.Collect(apply_operations.metric.emplace_back());
  }
  families.push_back(std::move(apply_operations));
  auto apply_results = Family("ledger_apply_results_total",
                              "Operations of Apply calls answered, by the gRPC status code of "
                              "each operation's result.",
                              prometheus::MetricType::Counter);
  for (size_t code = 0; code < kStatusCodeCount; ++code) {
    AddMetric(apply_results, {{"code", kStatusCodeNames[code]}}).counter.value =
        static_cast<double>(apply_results_[code].load(std::memory_order_relaxed));
  }
  families.push_back(std::move(apply_results));
}

void LedgerMetrics::RecordApplyOperations(size_t operations) {
  MutexLock lock(&apply_mu_);
  apply_operations_.Record(operations);
}

void LedgerMetrics::RecordApplyResults(const std::array<uint64_t, kStatusCodeCount>& codes) {
  for (size_t code = 0; code < kStatusCodeCount; ++code) {
    if (codes[code] != 0) apply_results_[code].fetch_add(codes[code], std::memory_order_relaxed);
  }
}

}  // namespace ledger
