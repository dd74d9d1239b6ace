// Defines `LedgerServer`: the shards, the gRPC server with the ledger, health and reflection
// services, and the order in which they start and stop.
#ifndef LEDGER_SERVER_LEDGER_SERVER_H_
#define LEDGER_SERVER_LEDGER_SERVER_H_

#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/steady_wait.h"
#include "grpcpp/grpcpp.h"
#include "metrics/ledger_metrics.h"
#include "metrics/metrics_endpoint.h"
#include "server/backup_service.h"
#include "server/cluster_status_service.h"
#include "server/connection_acceptor.h"
#include "server/leadership.h"
#include "server/ledger_service.h"
#include "server/reflection_service.h"
#include "server/transport_limits.h"
#include "server/transport_security.h"
#include "server/watch_feed.h"
#include "shard/router.h"
#include "storage/ledger_storage.h"
#include "storage/rocksdb_store.h"

namespace ledger {

// --max_in_flight's default: docs/overload.md has the figures behind it.
inline constexpr int64_t kDefaultMaxInFlight = 256;

struct ServerOptions {
  // host:port; port 0 picks a free port (see LedgerServer::port).
  std::string listen_address = "127.0.0.1:50051";
  // host:port for GET /metrics (Prometheus text format); empty serves no metrics. Port 0 picks
  // a free port (see LedgerServer::metrics_port).
  std::string metrics_listen_address;
  // Reported as ledger_build_info{version}.
  std::string version = "dev";
  // Its `observers` are set by the server (the metrics of each shard), and so are `store`,
  // `idempotency_ttl` and `clock` (from `storage`).
  RouterOptions router;
  // Where and how durably the accounts are kept. With durability kNone nothing is opened: the
  // accounts live in memory only, History is refused and request_ids are not deduplicated.
  storage::StoreOptions storage;
  // How long a graceful shutdown waits for calls in flight before cancelling them.
  absl::Duration shutdown_grace = absl::Seconds(10);
  // The most ledger calls admitted and not yet answered, server-wide; beyond it a call is refused
  // at once with RESOURCE_EXHAUSTED (see shard/admission_control.h). Within [kMaxInFlightMin,
  // kMaxInFlightMax].
  int64_t max_in_flight = kDefaultMaxInFlight;
  // Refuse Deposits and Withdraws that carry no request_id (see ServiceOptions).
  bool require_request_id = false;
  // Who a client is, without a mutual-TLS certificate, for its fair share of max_in_flight
  // (shard/client_shares.h).
  FairShareBy fair_share_by = FairShareBy::kAddress;
  // TLS, mutual TLS and the authorization policy of the gRPC port; the default is plaintext.
  // Metrics are plain HTTP whatever this says.
  TransportSecurityOptions transport_security;
  // What one client's connections may cost (streams, memory, lifetime, pings): see
  // transport_limits.h.
  TransportLimits transport;
  // The most client connections on the gRPC port; past it, accepting one more closes the idlest
  // (connection_acceptor.h). 0: DefaultMaxConnections of the open-file limit at start. Within
  // kMaxConnectionsBound.
  int64_t max_connections = 0;
  // A cluster replica (storage.cluster set): each member's id to the gRPC address its clients
  // call it at, which a follower names in its NOT_LEADER refusals (--peer_clients). May be empty.
  std::map<uint64_t, std::string> peer_client_addresses;
  // Watch's bounds (watch_feed.h); client_by is set from fair_share_by.
  WatchOptions watch;
};

// Where tests (and ledgerd's fault-injection flags) reach inside the server's router and store:
// kept out of ServerOptions, which hold only what production configures. Empty in production.
struct ServerTestHooks {
  RouterTestHooks router;
  storage::StoreTestHooks store;
};

// How long Shutdown lets gRPC deliver the answers the shards have already given, even once the
// grace has run out (see Shutdown). Only calls still unanswered then wait this long.
inline constexpr absl::Duration kAnswerDeliveryMin = absl::Seconds(1);

// How long Shutdown waits for gRPC to take its request to send the GOAWAYs (it takes
// microseconds; past this the stop goes on without them).
inline constexpr absl::Duration kGoawayRequestTimeout = absl::Seconds(1);
// The longest Shutdown waits, after the GOAWAYs, for the clients to close their connections
// before it shuts gRPC down (within the grace). A gRPC client closes one round trip after the
// GOAWAY once its last call is answered; a connection held open longer carries a stream only
// Shutdown ends, or a client that does not answer pings.
inline constexpr absl::Duration kGoawaySettleMax = absl::Seconds(2);
inline constexpr absl::Duration kConnectionPollInterval = absl::Milliseconds(5);

// How often a durable server checks that its data directory is still in place.
inline constexpr absl::Duration kDataDirectoryCheckInterval = absl::Seconds(1);
// How often a cluster replica asks whether it leads: part of a failover's time.
inline constexpr absl::Duration kLeadershipPollInterval = absl::Milliseconds(5);
// How long a replica waits before it tries again to fetch the leader's state.
inline constexpr absl::Duration kStateTransferRetryInterval = absl::Seconds(1);
// The free space a replica whose Raft log could not be written waits for before it starts again:
// libraft prepares its next 8 MiB segment at once, and the store and the mirror write too.
inline constexpr uint64_t kRoomToRestartBytes = uint64_t{32} << 20;
// How often it looks, and says so while it waits.
inline constexpr absl::Duration kRoomCheckInterval = absl::Seconds(1);

// Thread-safe: port() from any thread; Shutdown from one controlling thread. Shutdown is
// mandatory before destruction.
class LedgerServer {
 public:
  // Opens the data directory and loads every account from it, starts the metrics endpoint and
  // the shards, then serves. InvalidArgument for an option out of range, or a TLS or policy file
  // that is missing or malformed (checked before the store is opened); FailedPrecondition for a
  // data directory that is refused (see RocksDbStore::Open) or cannot be read; Unavailable when
  // an address cannot be listened on (in use, or not this machine's).
  static absl::StatusOr<std::unique_ptr<LedgerServer>> Start(const ServerOptions& options);
  // The same, with test hooks.
  static absl::StatusOr<std::unique_ptr<LedgerServer>> Start(const ServerOptions& options,
                                                             const ServerTestHooks& hooks);

  ~LedgerServer();

  LedgerServer(const LedgerServer&) = delete;
  LedgerServer& operator=(const LedgerServer&) = delete;

  // The port actually bound.
  int port() const { return port_; }
  // The metrics port actually bound; 0 when metrics are not served.
  int metrics_port() const { return metrics_endpoint_ ? metrics_endpoint_->port() : 0; }
  const Router& router() const { return *router_; }
  // Null with durability kNone.
  storage::LedgerStorage* store() const { return store_.get(); }
  // What start-up loaded from the data directory.
  int64_t recovered_accounts() const { return recovered_accounts_.load(std::memory_order_relaxed); }
  absl::Duration recovery_time() const { return recovery_time_; }
  const LedgerMetrics& metrics() const { return *metrics_; }
  const AdmissionControl& admission() const { return admission_; }
  const WatchFeed& watch_feed() const { return *watch_feed_; }
  const ServerTransportSecurity& transport_security() const { return *transport_security_; }
  // What the accept loop has done (ledger_connections*).
  ConnectionCounts connections() const { return acceptor_->counts(); }
  // A cluster replica: notified once it has stopped leading (or could not load what it leads),
  // after which it serves nothing; ledgerd then starts again as a follower. Never on a single
  // node.
  const SteadyNotification& demoted() const { return demoted_; }
  // Once demoted() for it: a data directory holding the leader's state, which takes the place of
  // this replica's own before it starts again (ReplaceDataDirectory); empty otherwise.
  const std::string& state_to_take() const { return state_to_take_; }

  // Graceful stop, in this order: stop watching the data directory; health NOT_SERVING; stop
  // accepting (new connections are refused) and send every connection a GOAWAY (see
  // connection_drain.h), so that clients send no new call here while the calls already sent are
  // served; close the shards' mailboxes, so that new ledger calls are refused at once (UNAVAILABLE,
  // nothing applied); drain every mailbox: each accepted call is applied and answered with its real
  // outcome, and those not yet decided when shutdown_grace runs out are answered UNAVAILABLE
  // unapplied; join the shard threads; wait for the clients to close their connections (at most
  // kGoawaySettleMax after the GOAWAY, within the grace); stop gRPC (other calls get what is left
  // of the grace, then are cancelled, but not before kAnswerDeliveryMin has passed); stop serving
  // metrics. Idempotent.
  void Shutdown();
  // Once Shutdown has returned: where its time went, phase by phase ("watchers 8us, GOAWAYs 1ms,
  // transfers 9us, shards 3ms, clients 0, gRPC 2ms"), for the log line that says how long the
  // drain took, so that a slow drain names its cause.
  const std::string& drain_phases() const { return drain_phases_; }

 private:
  LedgerServer(std::shared_ptr<LedgerMetrics> metrics,
               std::unique_ptr<storage::LedgerStorage> store, std::unique_ptr<Router> router,
               absl::Duration shutdown_grace, int64_t max_in_flight,
               const ServiceOptions& service_options);

  // Runs on watcher_ until Shutdown: checks the data directory every
  // kDataDirectoryCheckInterval, and the first time it is gone turns health NOT_SERVING, sets
  // ledger_data_directory_lost and logs why. (The store itself refuses the writes.)
  void WatchDataDirectory();
  // A cluster replica: runs on leadership_thread_ until Shutdown. Once this replica leads, it
  // catches up (LedgerStorage::CatchUpAsLeader), loads the shards from the store, starts them
  // and serves; once it no longer leads the term it loaded in, it stops serving and notifies
  // demoted().
  void FollowLeadership();
  // After a write of libraft's log failed (RaftStatus::log_write_failed): stops serving, waits
  // until the data directory's and the Raft directory's filesystems have kRoomToRestartBytes free
  // (or a stop), then asks for the restart (demoted()), which opens libraft's log again.
  void RestartOnceThereIsRoom(const std::string& failure);
  // A follower behind the leader's snapshot: fetches the leader's state (state_transfer.h).
  // True once it has it (state_to_take() names it, and demoted() is notified); false to try
  // again later.
  bool TakeLeadersState(const storage::RaftStatus& status);

  // Shared with the metrics endpoint, which holds it weakly while serving scrapes.
  const std::shared_ptr<LedgerMetrics> metrics_;
  std::unique_ptr<MetricsEndpoint> metrics_endpoint_;
  // Declared before the router, which writes to it until it stops.
  const std::unique_ptr<storage::LedgerStorage> store_;
  const std::unique_ptr<Router> router_;
  std::atomic<int64_t> recovered_accounts_{0};
  absl::Duration recovery_time_;
  const absl::Duration shutdown_grace_;
  AdmissionControl admission_;
  LedgerService service_;
  // Declared before server_: its streams call back into it until gRPC has stopped.
  std::unique_ptr<WatchFeed> watch_feed_;
  std::unique_ptr<ServerTransportSecurity> transport_security_;
  std::unique_ptr<LedgerAdminService> admin_service_;
  std::unique_ptr<ClusterStatusService> cluster_status_service_;
  ReflectionService reflection_;
  // Accepts the gRPC port's connections and hands them to server_; stopped before it.
  std::unique_ptr<ConnectionAcceptor> acceptor_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  SteadyNotification stop_watching_;
  std::thread watcher_;
  // A cluster replica's: null on a single node.
  std::unique_ptr<Leadership> leadership_;
  std::unique_ptr<ReadBarrier> read_barrier_;
  std::thread leadership_thread_;
  SteadyNotification demoted_;
  storage::StoreOptions storage_options_;
  std::map<uint64_t, std::string> peer_client_addresses_;
  // This replica's own TLS files: it reaches the members as they serve (peer_credentials.h).
  TransportSecurityOptions peer_security_;
  bool state_wait_logged_ = false;
  std::string state_to_take_;
  bool shut_down_ = false;
  std::string drain_phases_;
};

}  // namespace ledger

#endif  // LEDGER_SERVER_LEDGER_SERVER_H_
