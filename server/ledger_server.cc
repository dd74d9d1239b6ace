#include "server/ledger_server.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/check.h"
#include "cli/host_port.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/authz_policy.h"
#include "server/connection_drain.h"
#include "server/grpc_deadline.h"
#include "server/peer_credentials.h"
#include "server/state_transfer.h"

namespace ledger {
namespace {

constexpr char kServiceName[] = "ledger.v1.Ledger";

void SetServing(grpc::Server& server, bool serving) {
  grpc::HealthCheckServiceInterface* health = server.GetHealthCheckService();
  LEDGER_CHECK(health != nullptr);
  health->SetServingStatus(serving);  // Every service, including the overall "" entry.
  health->SetServingStatus(kServiceName, serving);
}

// Hands every account, and every transfer left pending, that `store` holds to the shards of
// `router` (not started yet); returns how many accounts.
absl::StatusOr<int64_t> LoadShards(storage::LedgerStorage& store, Router& router,
                                   const std::string& data_dir) {
  int64_t accounts = 0;
  absl::Status loaded =
      store.ForEachAccount([&](std::string account_id, const AccountState& state) {
        router.LoadAccount(std::move(account_id), state);
        ++accounts;
      });
  if (!loaded.ok()) {
    // DataLoss (an account that disagrees with its journal) stays DataLoss: corrupt data.
    return absl::Status(loaded.code() == absl::StatusCode::kDataLoss
                            ? absl::StatusCode::kDataLoss
                            : absl::StatusCode::kFailedPrecondition,
                        absl::StrCat("cannot load the accounts from data directory ", data_dir,
                                     ": ", loaded.message(), ". Refusing to start without them"));
  }
  // Transfers whose debit is durable and whose end is not: each goes back to its source's
  // shard, and the coordinator sends its credit again once started (see
  // docs/architecture.md, "Transfers"); GetTransfer shows them PENDING until then.
  int64_t resumed = 0;
  absl::Status pending =
      store.ForEachPendingTransfer([&](std::string transfer_id, const TransferRecord& record) {
        router.LoadPendingTransfer(std::move(transfer_id), record);
        ++resumed;
      });
  if (!pending.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load the pending transfers from data directory ", data_dir, ": ",
                     pending.message(), ". Refusing to start without them"));
  }
  if (resumed > 0) {
    std::cerr << "ledgerd: resuming " << resumed
              << " pending transfer(s) found in the data directory\n";
  }
  return accounts;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LedgerServer>> LedgerServer::Start(const ServerOptions& options) {
  return Start(options, ServerTestHooks{});
}

absl::StatusOr<std::unique_ptr<LedgerServer>> LedgerServer::Start(const ServerOptions& options,
                                                                  const ServerTestHooks& hooks) {
  if (absl::Status status =
          CheckDurationAtLeast("--shutdown_grace", options.shutdown_grace, absl::ZeroDuration());
      !status.ok()) {
    return status;
  }
  if (absl::Status status = ValidateTransportLimits(options.transport); !status.ok()) return status;
  if (absl::Status status = CheckOptionBound(kMaxInFlightBound, options.max_in_flight);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = CheckOptionBound(kMaxConnectionsBound, options.max_connections);
      !status.ok()) {
    return status;
  }
  RouterOptions router_options = options.router;
  router_options.shard.idempotency_ttl = options.storage.idempotency_ttl;
  router_options.shard.clock = options.storage.clock;
  const bool durable = options.storage.durability != storage::Durability::kNone;
  // Validated before the store is opened and before the metrics, which are sized by the shard
  // count.
  if (absl::Status status = Router::ValidateOptions(router_options); !status.ok()) return status;
  // Before the store: a mistyped certificate path fails at once.
  absl::StatusOr<std::unique_ptr<ServerTransportSecurity>> transport_security =
      ServerTransportSecurity::Create(options.transport_security);
  if (!transport_security.ok()) return transport_security.status();

  // The only place the server names the RocksDB store: from here on it is a LedgerStorage.
  std::unique_ptr<storage::LedgerStorage> store;
  if (durable) {
    absl::StatusOr<std::unique_ptr<storage::RocksDbStore>> opened =
        storage::RocksDbStore::Open(options.storage, hooks.store);
    if (!opened.ok()) return opened.status();
    store = *std::move(opened);
    router_options.shard.store = store.get();
  }
  auto metrics = std::make_shared<LedgerMetrics>(router_options.num_shards, options.version);
  router_options.observers = metrics->observers();
  router_options.commit_observer = metrics->commit_observer();
  absl::StatusOr<std::unique_ptr<Router>> router = Router::Create(router_options, hooks.router);
  if (!router.ok()) return router.status();

  // Recovery: every account goes to the shard that owns it under this run's shard count. A
  // cluster replica loads them only once it leads (FollowLeadership).
  const bool replica = options.storage.cluster.has_value();
  int64_t recovered = 0;
  absl::Duration recovery_time;
  if (store != nullptr && !replica) {
    const SteadyTime recovery_start = SteadyNow();
    absl::StatusOr<int64_t> loaded = LoadShards(*store, **router, options.storage.data_dir);
    if (!loaded.ok()) return loaded.status();
    recovered = *loaded;
    recovery_time = SteadySince(recovery_start);
    metrics->SetRecoverySeconds(absl::ToDoubleSeconds(recovery_time));
  }

  metrics->AttachRouter(router->get());
  if (store != nullptr) {
    storage::LedgerStorage* const memory_of = store.get();
    metrics->AttachStoreMemory([memory_of]() -> std::optional<StoreMemoryBytes> {
      absl::StatusOr<storage::StoreMemory> memory = memory_of->Memory();
      if (!memory.ok()) return std::nullopt;
      return StoreMemoryBytes{.memtables = memory->memtables_bytes,
                              .block_cache = memory->block_cache_bytes,
                              .table_readers = memory->table_readers_bytes,
                              .recent_records = memory->recent_records_bytes};
    });
    metrics->AttachLog([memory_of]() {
      const storage::LogProgress log = memory_of->log_progress();
      return LogStats{.position = log.position,
                      .applied_position = log.applied_position,
                      .disk_bytes = log.disk_bytes,
                      .checkpoints = log.checkpoints,
                      .checkpoint_failures = log.checkpoint_failures};
    });
  }
  std::unique_ptr<Leadership> leadership;
  std::unique_ptr<ReadBarrier> read_barrier;
  if (replica) {
    leadership = std::make_unique<Leadership>(options.storage.cluster->node_id,
                                              options.peer_client_addresses, store.get());
    read_barrier =
        std::make_unique<ReadBarrier>([raw = store.get()] { return raw->ConfirmLeadership(); });
  }
  WatchOptions watch_options = options.watch;
  watch_options.client_by = options.fair_share_by;
  auto watch_feed =
      std::make_unique<WatchFeed>(store.get(), leadership.get(), metrics.get(), watch_options);
  metrics->AttachWatch([feed = watch_feed.get()] { return feed->stats(); });
  const ServiceOptions service_options{
      .overdraft_limit = options.router.shard.policy.overdraft_limit,
      .require_request_id = options.require_request_id,
      .fair_share_by = options.fair_share_by,
      .leadership = leadership.get(),
      .read_barrier = read_barrier.get(),
      .watch_feed = watch_feed.get()};
  std::unique_ptr<LedgerServer> server(new LedgerServer(std::move(metrics), std::move(store),
                                                        *std::move(router), options.shutdown_grace,
                                                        options.max_in_flight, service_options));
  if (leadership != nullptr) {
    server->metrics_->AttachReplica(
        [store = server->store_.get(), gate = leadership.get(), reads = read_barrier.get()] {
          const std::optional<storage::RaftStatus> status = store->replica_status();
          ReplicaStats stats{.node_id = gate->node_id(),
                             .serving = gate->serving(),
                             .read_barriers = reads->barriers(),
                             .read_barrier_failures = reads->failures()};
          if (status.has_value()) {
            stats.leader = status->leader;
            stats.term = status->term;
            stats.leader_id = status->leader_id;
            stats.commit_position = status->commit_position;
            stats.applied_position = status->applied_position;
            stats.needs_state_through = status->needs_state_through;
            stats.sends_refused = status->sends_refused;
          }
          return stats;
        });
  }
  server->leadership_ = std::move(leadership);
  server->watch_feed_ = std::move(watch_feed);
  server->storage_options_ = options.storage;
  server->peer_client_addresses_ = options.peer_client_addresses;
  server->peer_security_ = options.transport_security;
  server->read_barrier_ = std::move(read_barrier);
  server->metrics_->AttachAdmission(&server->admission_);
  server->recovered_accounts_ = recovered;
  server->recovery_time_ = recovery_time;
  server->transport_security_ = *std::move(transport_security);
  AuthzPolicyWatcher* const policy = server->transport_security_->policy_watcher();
  if (policy != nullptr) policy->CountDenialsIn(server->metrics_);
  // A replica's members (--peers): their hosts may fetch its state without a policy
  // (server/state_transfer.h), and ledger.v1.LedgerCluster lists them.
  std::vector<std::string> replica_hosts;
  std::vector<ClusterStatusService::Member> members;
  if (replica) {
    for (const storage::RaftPeer& peer : options.storage.cluster->peers) {
      absl::StatusOr<cli::HostPort> address = cli::ParseHostPort(
          "--peers", peer.address, cli::AddressUse::kConnect, /*example_port=*/7001);
      if (address.ok()) replica_hosts.push_back(address->host);
      const auto client = options.peer_client_addresses.find(peer.id);
      members.push_back({.node_id = peer.id,
                         .raft_address = peer.address,
                         .grpc_address = client == options.peer_client_addresses.end()
                                             ? std::string()
                                             : client->second});
    }
  }
  server->cluster_status_service_ = std::make_unique<ClusterStatusService>(
      server->leadership_.get(), server->store_.get(), std::move(members));
  server->admin_service_ = std::make_unique<LedgerAdminService>(
      server->store_.get(), /*authorized_by_policy=*/policy != nullptr, options.version,
      std::move(replica_hosts));
  if (server->store_ != nullptr) {
    server->metrics_->AttachBackups(
        [admin = server->admin_service_.get()] { return admin->stats(); });
  }
  if (!options.metrics_listen_address.empty()) {
    absl::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint =
        MetricsEndpoint::Start(options.metrics_listen_address, server->metrics_);
    if (!endpoint.ok()) {
      server->Shutdown();
      return endpoint.status();
    }
    server->metrics_endpoint_ = *std::move(endpoint);
  }

  // ledgerd accepts the connections itself and hands them to gRPC, whose own listener stops for
  // good after one failed accept() (connection_acceptor.h).
  // TCP_USER_TIMEOUT: gRPC sets the keepalive timeout on its listener when keepalive is on, as
  // it always is here (transport_limits.h).
  absl::StatusOr<std::unique_ptr<ConnectionAcceptor>> acceptor = ConnectionAcceptor::Listen(
      options.listen_address,
      options.max_connections > 0 ? options.max_connections
                                  : DefaultMaxConnections(SoftOpenFileLimit()),
      options.transport.keepalive_timeout);
  if (!acceptor.ok()) {
    server->Shutdown();
    return acceptor.status();
  }
  server->acceptor_ = *std::move(acceptor);
  server->port_ = server->acceptor_->port();
  server->metrics_->AttachConnections(
      [acceptor = server->acceptor_.get()] { return acceptor->counts(); });

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  ApplyTransportLimits(options.transport, builder);
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> handoff =
      builder.experimental().AddExternalConnectionAcceptor(
          grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
          server->transport_security_->credentials());
  builder.RegisterService(&server->service_);
  builder.RegisterService(server->admin_service_.get());
  builder.RegisterService(server->cluster_status_service_.get());
  builder.RegisterService(&server->reflection_);  // Not gRPC's plugin: see reflection_service.h.

  if (!replica) server->router_->Start();
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr) {
    server->Shutdown();
    return absl::InternalError(
        absl::StrCat("gRPC could not start serving on ", options.listen_address));
  }
  server->acceptor_->Start(std::move(handoff));
  SetServing(*server->server_, true);
  if (replica) {
    // The ledger service is SERVING only on the replica that serves it: the leader.
    server->server_->GetHealthCheckService()->SetServingStatus(kServiceName, false);
    server->leadership_thread_ = std::thread([raw = server.get()] { raw->FollowLeadership(); });
  }
  if (server->store_ != nullptr) {
    server->watcher_ = std::thread([raw = server.get()] { raw->WatchDataDirectory(); });
  }
  return server;
}

LedgerServer::LedgerServer(std::shared_ptr<LedgerMetrics> metrics,
                           std::unique_ptr<storage::LedgerStorage> store,
                           std::unique_ptr<Router> router, absl::Duration shutdown_grace,
                           int64_t max_in_flight, const ServiceOptions& service_options)
    : metrics_(std::move(metrics)),
      store_(std::move(store)),
      router_(std::move(router)),
      shutdown_grace_(shutdown_grace),
      admission_(max_in_flight, router_->num_shards()),
      service_(router_.get(), &admission_, metrics_.get(), store_.get(), service_options) {}

LedgerServer::~LedgerServer() { LEDGER_CHECK(shut_down_); }

void LedgerServer::WatchDataDirectory() {
  while (!stop_watching_.WaitForNotificationWithTimeout(kDataDirectoryCheckInterval)) {
    absl::Status in_place = store_->CheckDataDirectory();
    if (in_place.ok()) continue;
    metrics_->SetDataDirectoryLost();
    SetServing(*server_, false);
    std::cerr << "ledgerd: " << in_place.message()
              << ". Health is NOT_SERVING; reads are still served from memory\n";
    return;
  }
}

void LedgerServer::FollowLeadership() {
  const uint64_t node_id = leadership_->node_id();
  bool leading = false;
  uint64_t term = 0;
  while (!stop_watching_.WaitForNotificationWithTimeout(kLeadershipPollInterval)) {
    const std::optional<storage::RaftStatus> status = store_->replica_status();
    if (!status->log_write_failed.empty()) {
      RestartOnceThereIsRoom(status->log_write_failed);
      return;
    }
    if (leading) {
      if (status->leader && status->term == term) continue;
      // Whatever was decided on top of the lost term fails as a failed write does (outcome
      // unknown); the shards' state may be ahead of the cluster's from here on, so it is not
      // kept: the process starts again as a follower (ledgerd.cc).
      leadership_->set_serving(false);
      server_->GetHealthCheckService()->SetServingStatus(kServiceName, false);
      std::cerr << "ledgerd: node " << node_id << " no longer leads the cluster (it led term "
                << term << "; now term " << status->term
                << "); ledger calls are refused NOT_LEADER, and ledgerd restarts as a follower\n";
      demoted_.Notify();
      return;
    }
    // Even as the leader: it cannot apply anything until it has the state (RaftLog refuses).
    if (status->needs_state_through > 0) {
      if (TakeLeadersState(*status)) return;
      continue;
    }
    if (!status->leader) continue;
    const SteadyTime since = SteadyNow();
    if (absl::Status caught_up = store_->CatchUpAsLeader(); !caught_up.ok()) {
      std::cerr << "ledgerd: node " << node_id << " leads but cannot catch up yet ("
                << caught_up.message() << "); trying again\n";
      continue;
    }
    absl::StatusOr<int64_t> loaded = LoadShards(*store_, *router_, storage_options_.data_dir);
    if (!loaded.ok()) {
      // Some accounts may be in the shards already: never serve from a partial load.
      std::cerr << "ledgerd: node " << node_id << " leads but " << loaded.status().message()
                << "; ledgerd restarts as a follower\n";
      demoted_.Notify();
      return;
    }
    recovered_accounts_.store(*loaded, std::memory_order_relaxed);
    router_->Start();
    term = status->term;
    leading = true;
    leadership_->set_serving(true);
    server_->GetHealthCheckService()->SetServingStatus(kServiceName, true);
    std::cerr << "ledgerd: node " << node_id << " leads the cluster in term " << term
              << " and serves: caught up and loaded " << *loaded << " accounts in "
              << absl::FormatDuration(SteadySince(since)) << "\n";
  }
}

void LedgerServer::RestartOnceThereIsRoom(const std::string& failure) {
  const uint64_t node_id = leadership_->node_id();
  leadership_->set_serving(false);
  server_->GetHealthCheckService()->SetServingStatus(kServiceName, false);
  std::vector<std::string> dirs{storage_options_.data_dir};
  if (storage_options_.cluster.has_value() && !storage_options_.cluster->raft_dir.empty()) {
    dirs.push_back(storage_options_.cluster->raft_dir);
  }
  std::cerr << "ledgerd: node " << node_id << " could not write its Raft log: " << failure
            << ". libraft keeps what it could not write as if written and never writes it again, "
               "so the replica is stuck: ledger calls are refused NOT_LEADER, and ledgerd "
               "restarts as a follower once "
            << absl::StrJoin(dirs, " and ") << " ha" << (dirs.size() > 1 ? "ve " : "s ")
            << (kRoomToRestartBytes >> 20) << " MiB free" << std::endl;
  // Said at the first look and then every 30th, not every second.
  int looks = 0;
  do {
    uint64_t least_free = UINT64_MAX;
    std::string reading;
    for (const std::string& dir : dirs) {
      std::error_code error;
      const std::filesystem::space_info space = std::filesystem::space(dir, error);
      least_free = std::min<uint64_t>(least_free, error ? 0 : space.available);
      absl::StrAppend(&reading, reading.empty() ? "" : ", ", dir, ": ",
                      error ? error.message() : absl::StrCat(space.available >> 20, " MiB free"));
    }
    if (least_free >= kRoomToRestartBytes) {
      std::cerr << "ledgerd: node " << node_id << " has room again (" << reading
                << "); ledgerd restarts as a follower" << std::endl;
      demoted_.Notify();
      return;
    }
    if (looks++ % 30 == 0) {
      std::cerr << "ledgerd: node " << node_id << " waits for room to restart (" << reading << ")"
                << std::endl;
    }
  } while (!stop_watching_.WaitForNotificationWithTimeout(kRoomCheckInterval));
}

bool LedgerServer::TakeLeadersState(const storage::RaftStatus& status) {
  const uint64_t node_id = leadership_->node_id();
  // The leader first; any other member's state serves as well when it reaches the snapshot.
  std::vector<std::pair<uint64_t, std::string>> sources;
  for (const auto& [id, address] : peer_client_addresses_) {
    if (id == node_id) continue;
    if (id == status.leader_id) {
      sources.insert(sources.begin(), {id, address});
    } else {
      sources.emplace_back(id, address);
    }
  }
  if (sources.empty()) {
    if (!state_wait_logged_) {
      std::cerr << "ledgerd: node " << node_id
                << " is behind the leader's snapshot at log position " << status.needs_state_through
                << " and must fetch another member's state, but knows no member's gRPC address "
                   "(--peer_clients); it serves nothing until it has one\n";
      state_wait_logged_ = true;
    }
    stop_watching_.WaitForNotificationWithTimeout(kStateTransferRetryInterval);
    return false;
  }
  for (const auto& [id, address] : sources) {
    const SteadyTime since = SteadyNow();
    std::cerr << "ledgerd: node " << node_id << " is behind the leader's snapshot at log position "
              << status.needs_state_through << "; fetching node " << id << "'s state from "
              << address << "\n";
    // Built for each fetch: a certificate rotated since the start is the one presented.
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        PeerChannelCredentials(peer_security_);
    if (!credentials.ok()) {
      std::cerr << "ledgerd: node " << node_id
                << " cannot fetch a member's state: " << credentials.status().message() << "\n";
      break;
    }
    absl::StatusOr<FetchedState> fetched = FetchLeaderState(
        address, *credentials, storage_options_, status.needs_state_through,
        [this, source = id, from_leader = id == status.leader_id] {
          // A leader's state stops being worth its wait once another leads
          // (the source may be cut off: its stream would wait for the ping
          // to fail). Fetched again from the new leader.
          if (!from_leader) return true;
          const std::optional<storage::RaftStatus> now = store_->replica_status();
          return !now.has_value() || now->leader_id == 0 || now->leader_id == source;
        });
    if (!fetched.ok()) {
      std::cerr << "ledgerd: node " << node_id << " could not fetch node " << id << "'s state ("
                << fetched.status().message() << ")\n";
      continue;
    }
    std::cerr << "ledgerd: node " << node_id << " fetched the leader's state from node " << id
              << " (ledger " << fetched->ledger_id << ", through log position "
              << fetched->last_position << ", " << fetched->bytes << " bytes) in "
              << absl::FormatDuration(SteadySince(since))
              << "; it replaces the data directory, and ledgerd starts again on it\n";
    state_to_take_ = fetched->dir;
    demoted_.Notify();
    return true;
  }
  std::cerr << "ledgerd: node " << node_id << " trying again in "
            << absl::FormatDuration(kStateTransferRetryInterval) << "\n";
  stop_watching_.WaitForNotificationWithTimeout(kStateTransferRetryInterval);
  return false;
}

void LedgerServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  const SteadyDeadline grace_deadline(shutdown_grace_);
  // Each phase's time, for drain_phases().
  SteadyTime phase_started = SteadyNow();
  std::vector<std::string> phases;
  const auto phase_done = [&phase_started, &phases](absl::string_view phase) {
    const SteadyTime now = SteadyNow();
    phases.push_back(
        absl::StrCat(phase, " ", absl::FormatDuration(absl::FromChrono(now - phase_started))));
    phase_started = now;
  };
  stop_watching_.Notify();
  if (watcher_.joinable()) watcher_.join();
  if (leadership_thread_.joinable()) leadership_thread_.join();
  if (server_ != nullptr) SetServing(*server_, false);
  phase_done("watchers");
  // Clients first: no new connection (ours is the only listener; gRPC frees what the acceptor
  // hands connections to when it stops listening, so the acceptor stops before that), and every
  // connection is told to go elsewhere (GOAWAY)
  // while gRPC still serves the calls already on it, which the shards answer below. gRPC's own
  // Shutdown would cancel the calls in flight on the wire instead (see connection_drain.h).
  if (acceptor_ != nullptr) acceptor_->Stop();
  const bool goaways_sent =
      server_ != nullptr && StopListeningAndSendGoaways(*server_, kGoawayRequestTimeout);
  const SteadyDeadline goaways_settled(kGoawaySettleMax);
  phase_done("GOAWAYs");
  // Watch streams end at once (UNAVAILABLE, SHUTTING_DOWN: resume from the last position
  // elsewhere): they never end on their own, and would hold their connections open.
  if (watch_feed_ != nullptr) watch_feed_->Stop();
  phase_done("watch streams");
  // Every ledger call gets a definite answer. From here on new ones are refused at once
  // (UNAVAILABLE, nothing applied); accepted ones are applied and answered with their real
  // outcome; past the grace, those not yet decided are refused unapplied. gRPC never has to
  // cancel a call that a shard holds, which would leave its caller not knowing whether it was
  // applied.
  // Transfers across shards first: no new one is taken, and those in flight get half the grace
  // to finish their steps while the mailboxes are still open. What is left is parked (PENDING in
  // the store, its caller told so) and resumed at the next start.
  router_->transfers().StopAccepting();
  if (!router_->transfers().Drain(grace_deadline.Left() / 2)) {
    std::cerr << "ledgerd: " << router_->transfers().active()
              << " transfer(s) still in flight at shutdown; they stay PENDING and resume at the "
                 "next start\n";
  }
  phase_done("transfers");
  router_->CloseMailboxes();
  SteadyNotification drained;
  std::thread grace_timer([this, &drained, &grace_deadline] {
    if (!drained.WaitForNotificationWithTimeout(grace_deadline.Left())) {
      router_->AbandonUndecided();
    }
  });
  router_->Stop();
  drained.Notify();
  grace_timer.join();
  phase_done("shards");
  if (server_ != nullptr) {
    // Each client closes its connection once it has read the GOAWAY and its last answer; by
    // then nothing more can arrive on it. Wait for that (a client's ping answer, one round trip),
    // but not for a connection held open by a stream that only Shutdown ends (a health watch).
    if (goaways_sent) {
      while (HasOpenConnections(*server_) && !grace_deadline.Passed() &&
             !goaways_settled.Passed()) {
        absl::SleepFor(kConnectionPollInterval);
      }
    }
    phase_done("clients");
    // What is left is not the shards' (History, health watches, reflection streams): the rest
    // of the grace, then gRPC cancels it. Never less than kAnswerDeliveryMin: gRPC cancels
    // every call not yet complete at the deadline, including one whose answer a shard has given
    // but gRPC is still sending, and its caller would get "Cancelling all calls" instead of
    // that definite answer (tests/e2e/ledgerd_process_test.cc caught it under ASan).
    server_->Shutdown(GrpcDeadlineIn(std::max(grace_deadline.Left(), kAnswerDeliveryMin)));
    phase_done("gRPC");
  }
  metrics_endpoint_.reset();  // Last, so that the drain can still be watched.
  drain_phases_ = absl::StrJoin(phases, ", ");
}

}  // namespace ledger
