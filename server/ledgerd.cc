// ledgerd's main: the ledger server. Flags live only here; everything else takes options structs.
// (The file is named after the binary so that --help lists its flags.)
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/steady_wait.h"
#include "cli/command_line.h"
#include "cli/host_port.h"
#include "server/backup_restore.h"
#include "server/ledger_id_check.h"
#include "server/ledger_server.h"
#include "server/library_logs.h"
#include "server/listener_watchdog.h"
#include "server/peer_credentials.h"
#include "server/state_transfer.h"
#include "server/transport_limits.h"
#include "server/watch_feed.h"
#include "server/watch_retention.h"

namespace {

int32_t DefaultShards() {
  return std::max<int32_t>(ledger::kMinShards,
                           static_cast<int32_t>(std::thread::hardware_concurrency()));
}

}  // namespace

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "HOST:PORT for gRPC (ledger.v1.Ledger, grpc.health.v1.Health, reflection); :PORT is "
          "every interface, [::1]:PORT an IPv6 address; port 0 picks a free port, printed at "
          "start. Loopback by default; another address needs TLS (--tls_cert_file) or "
          "--plaintext_beyond_loopback");
ABSL_FLAG(bool, plaintext_beyond_loopback, false,
          "allow plaintext gRPC, without TLS or authentication, on a --listen address other than "
          "loopback: anyone who reaches the port may call every method. Without TLS, ledgerd "
          "refuses such an address unless this is given; use it only on a private network or "
          "behind the bundled HAProxy (docs/deployment.md)");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464",
          "HOST:PORT for Prometheus metrics at GET /metrics (plain HTTP, read-only), spelled as "
          "--listen; loopback by default; empty serves none");
ABSL_FLAG(std::string, ports_file, "",
          "once gRPC and metrics are listening, write the addresses they are bound to as one "
          "line of JSON to this file, e.g. {\"pid\":1234,\"grpc\":\"127.0.0.1:43121\","
          "\"metrics\":\"127.0.0.1:39417\"} (\"metrics\":null without metrics), for "
          "scripts and tests that start ledgerd on port 0; written whole (PATH.tmp, then a "
          "rename), removed on a clean stop. Its directory must exist and be writable. Empty: "
          "none");
ABSL_FLAG(bool, verbose, false,
          "also print what gRPC, RocksDB and the metrics HTTP server log while ledgerd starts "
          "(by default a refused start prints only ledgerd's own one-line reason)");
ABSL_FLAG(int32_t, shards, DefaultShards(),
          "number of account shards, each one thread with its own mailbox (2 to 1024; default: "
          "the number of hardware threads, at least 2). Accounts map to shards by a stable hash");
ABSL_FLAG(int64_t, mailbox_capacity, static_cast<int64_t>(ledger::kDefaultMailboxCapacity),
          "operations each shard holds at once (1 to 16777216): queued, and with durability also "
          "decided and waiting for their write. A call counts 1, an Apply call's part for the "
          "shard its number of operations. A call (or part) that does not fit fails at once with "
          "RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, max_in_flight, ledger::kDefaultMaxInFlight,
          "ledger calls the whole server holds at once, admitted and not yet answered (1 to "
          "16777216); one more is refused at once with RESOURCE_EXHAUSTED and a "
          "grpc-retry-pushback-ms trailer, before it is parsed. Bounds the latency of admitted "
          "calls under overload (see docs/overload.md)");
ABSL_FLAG(int64_t, max_connections, 0,
          "client connections the gRPC port holds at once (0 to 16777216); accepting one more "
          "closes the idlest first (never used, then longest silent). 0: three quarters of the "
          "open-file limit, which ledgerd raises to its hard limit at start; the rest is kept for "
          "the storage and /metrics. Each connection is a file descriptor");
ABSL_FLAG(int64_t, max_batch, static_cast<int64_t>(ledger::kDefaultMaxBatch),
          "most operations a shard drains and applies per wake-up (1 to 65536; an Apply call's "
          "part is never split, so a batch holds at least one whole part)");
ABSL_FLAG(int64_t, overdraft_limit, 0,
          "how far below 0 a withdrawal may take a balance, in minor units (>= 0)");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(10),
          "on SIGINT/SIGTERM, how long to wait for calls in flight before cancelling them");
ABSL_FLAG(std::string, ledger_id, "",
          "`ledgerd init` only: the new ledger's id (32 lowercase hexadecimal digits, as init "
          "prints) instead of a random one: the replicas of a cluster are made with one id");
ABSL_FLAG(std::string, from, "",
          "`ledgerd restore` only: the backup directory to restore (written by `ledgerctl backup "
          "--to DIR`)");
ABSL_FLAG(std::string, data_dir, "./data",
          "directory of the ledger: its log (ledger_log/, the truth: one entry per group commit) "
          "and a RocksDB database derived from it that holds the accounts, their journal and the "
          "idempotency records. `ledgerd init` creates it; the server only opens an "
          "existing ledger and refuses a missing or empty directory (so a lost or unmounted "
          "volume never becomes an empty ledger) and anything it cannot read as its own");
ABSL_FLAG(std::string, durability, "sync",
          "when a Deposit or Withdraw is answered OK: sync = after its batch is fsynced to disk "
          "(survives a power loss); async = after it is written to the OS, without fsync (survives "
          "a crash of ledgerd, may lose the last moments of writes on a power loss or kernel "
          "crash); none = memory only, nothing on disk (every balance is lost on exit; no "
          "History, no request_id deduplication)");
ABSL_FLAG(int64_t, log_segment_mib, ledger::storage::kDefaultLogSegmentBytes >> 20,
          "size of each log segment file in MiB (1 to 1024), preallocated when it is made: the "
          "log takes about three of them on disk (the one written, until the next checkpoint the "
          "one before, and a spare made ahead so that no append waits for one). With --node_id "
          "libraft's log takes segments of this size too (three more preallocated); each that "
          "fills stalls the replica's Raft loop for a moment, so smaller ones stall more often");
ABSL_FLAG(absl::Duration, idempotency_ttl, absl::Hours(24),
          "how long a request_id's outcome is remembered: a retry within it is answered with the "
          "recorded result instead of being applied again");
ABSL_FLAG(int64_t, max_watchers, ledger::kDefaultMaxWatchers,
          "Watch streams the server serves at once (0 to 4096); one more is refused "
          "RESOURCE_EXHAUSTED, WATCH_LIMIT. Each holds at most one message (about 64 KiB of "
          "operations) while gRPC sends it, and a place in the log");
ABSL_FLAG(int64_t, max_watchers_per_client, ledger::kDefaultMaxWatchersPerClient,
          "Watch streams one client (as --fair_share_by says who a client is) holds at once (1 "
          "to 4096); one more is refused RESOURCE_EXHAUSTED, WATCH_LIMIT");
ABSL_FLAG(int64_t, max_watch_accounts, ledger::kDefaultMaxWatchAccounts,
          "account ids one Watch may filter on (1 to 100000); more is INVALID_ARGUMENT");
ABSL_FLAG(std::string, watch_retention, "0",
          "log kept behind the checkpoints for watchers that resume or fall behind: a size "
          "(20GiB: the newest log segments holding that much) or an age (24h: every segment "
          "written within it); 0 keeps only what the next start needs (the segment written and "
          "those not yet checkpointed), and a watcher behind that is told POSITION_NOT_KEPT. Disk "
          "cost: the size, or the log written in that time (about 1 KiB per operation), plus one "
          "segment (--log_segment_mib)");
ABSL_FLAG(std::string, fair_share_by, "address",
          "who a client is, for its fair share of --max_in_flight among the clients calling at "
          "once (a client at its share is refused with FAIR_SHARE while others are served): "
          "address = every connection from one IP address, connection = each connection; a client "
          "that presents a mutual-TLS certificate is always its certificate's identity");
ABSL_FLAG(bool, require_request_id, false,
          "refuse (INVALID_ARGUMENT) every Deposit and Withdraw that carries no request_id, so "
          "that any write whose outcome is unknown (deadline, storage failure) can be retried "
          "safely with the same request_id");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate chain the gRPC port presents; with --tls_key_file, gRPC is served over "
          "TLS only (empty: plaintext). Re-read every --tls_refresh_interval: a rotated "
          "certificate is served to new connections without a restart");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "PEM CA bundle for mutual TLS: every client must present a certificate it verifies, "
          "else the handshake fails (empty: clients present none). Re-read like the certificate");
ABSL_FLAG(std::string, authz_policy_file, "",
          "gRPC authorization policy (JSON, gRFC A43; see deploy/authz/policy.example.json): which "
          "client certificates may call which methods, every other call is PERMISSION_DENIED. "
          "Needs mutual TLS. Re-read every --tls_refresh_interval; a file that does not parse is "
          "logged and the previous policy kept");
ABSL_FLAG(absl::Duration, tls_refresh_interval, absl::Seconds(60),
          "how often the TLS and policy files are read again for changes (1s to 24h, whole "
          "seconds)");

// What one client's connections may cost; bounds in server/transport_limits.h. gRPC 1.51 cannot
// defend against every hostile client by itself: docs/deployment.md, "Exposure", says which
// need the proxy.
ABSL_FLAG(int32_t, max_concurrent_streams, ledger::TransportLimits{}.max_concurrent_streams,
          "calls one HTTP/2 connection may have open at once (1 to 100000); a client must wait "
          "for one to finish before starting another");
ABSL_FLAG(int64_t, transport_memory_mb, ledger::TransportLimits{}.memory_mb,
          "memory, in MiB, that gRPC's connections and calls may hold together (16 to 65536); "
          "near it gRPC slows reads, refuses new connections and closes the busiest one");
ABSL_FLAG(int32_t, grpc_max_threads, ledger::TransportLimits{}.max_threads,
          "threads gRPC's synchronous services (reflection) may use (2 to 10000)");
ABSL_FLAG(int32_t, max_receive_message_bytes, ledger::TransportLimits{}.max_receive_message_bytes,
          "largest request message accepted, in bytes (1024 to 67108864); larger ones fail with "
          "RESOURCE_EXHAUSTED");
ABSL_FLAG(absl::Duration, max_connection_idle, ledger::TransportLimits{}.max_connection_idle,
          "a connection with no call in flight for this long is closed (clients reconnect)");
ABSL_FLAG(absl::Duration, max_connection_age, ledger::TransportLimits{}.max_connection_age,
          "every connection is closed after this long (GOAWAY; clients reconnect), so that none "
          "is held forever");
ABSL_FLAG(absl::Duration, max_connection_age_grace,
          ledger::TransportLimits{}.max_connection_age_grace,
          "how long calls in flight on a connection past --max_connection_age may still finish");
ABSL_FLAG(absl::Duration, handshake_timeout, ledger::TransportLimits{}.handshake_timeout,
          "a connection that has not completed its HTTP/2 handshake within this is closed (an "
          "idle TCP connection holds a file descriptor no longer)");
ABSL_FLAG(absl::Duration, keepalive_time, ledger::TransportLimits{}.keepalive_time,
          "the server pings a connection that has been silent this long, to find dead peers");
ABSL_FLAG(absl::Duration, keepalive_timeout, ledger::TransportLimits{}.keepalive_timeout,
          "a connection whose ping is not answered within this is closed");
ABSL_FLAG(absl::Duration, min_client_ping_interval,
          ledger::TransportLimits{}.min_client_ping_interval,
          "clients may ping at most this often; the third ping sooner closes the connection "
          "(GOAWAY ENHANCE_YOUR_CALM)");

ABSL_FLAG(uint64_t, node_id, 0,
          "this replica's id in a cluster of three (docs/replication.md): 1, 2 or 3, as in "
          "--peers. 0 (the default): a single node, no cluster");
ABSL_FLAG(std::string, peers, "",
          "with --node_id: every member of the cluster, this one included, as "
          "ID=HOST:PORT,ID=HOST:PORT,ID=HOST:PORT, at the address the replicas reach each other "
          "on (Raft, plaintext and unauthenticated: keep it on a private network). The same on "
          "every member");
ABSL_FLAG(std::string, peer_clients, "",
          "with --node_id: each member's gRPC address as its clients reach it, "
          "ID=HOST:PORT,...; a follower names the leader's in its NOT_LEADER refusals. Empty: "
          "refusals name the leader's id only");
ABSL_FLAG(std::string, peer_tls_ca_file, "",
          "with --node_id and --tls_cert_file: PEM CA bundle that verifies the other members' "
          "gRPC certificates when this replica fetches a member's state or asks its ledger id "
          "(it presents --tls_cert_file as its client certificate). Empty: --tls_client_ca_file, "
          "or the system's roots without it");
ABSL_FLAG(std::string, raft_listen, "",
          "with --node_id: where this replica listens for the others; empty: its own address in "
          "--peers");
ABSL_FLAG(std::string, raft_dir, "",
          "with --node_id: the Raft log, term and vote; empty: DATA_DIR/raft");
ABSL_FLAG(absl::Duration, election_timeout, absl::Milliseconds(300),
          "with --node_id: how long a follower waits without hearing from a leader before it "
          "stands for election (randomised up to twice this); the same on every member");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Milliseconds(50),
          "with --node_id: how often the leader tells the followers it is there; at most a "
          "third of --election_timeout");

ABSL_FLAG(int64_t, raft_snapshot_entries, 65536,
          "with --node_id: libraft takes a snapshot every this many entries (16 to 1048576) or "
          "64 MiB of them, whichever comes first, and keeps 128 behind it; a replica further "
          "behind than that fetches the leader's state. Memory: each replica holds the entries "
          "since its last snapshot");

ABSL_FLAG(int32_t, raft_writes_in_flight, 1,
          "with --node_id: group commits the leader keeps in flight at once (1 to 8); above 1 it "
          "proposes the next while a majority writes the one before, which pays where the round "
          "trip, not CPU, bounds a commit (docs/replication.md 9.2)");

ABSL_FLAG(absl::Duration, debug_handler_delay, absl::ZeroDuration(),
          "FAULT INJECTION, for load tests only: sleep this long in every handler to make "
          "overload reproducible. Leave at 0 in production");

ABSL_FLAG(std::string, debug_crash_after_transfer_step, "",
          "FAULT INJECTION, for crash tests only: exit at once (status 86, as a crash) right "
          "after the first transfer across shards makes this step durable: debited, credited or "
          "settled. Empty (the default) in production");

namespace {

// The status a --debug_crash_after_transfer_step exit ends with, for tests to tell it apart.
constexpr int kDebugCrashExitCode = 86;

// How long a replica waits, before it joins, for the other members to say which ledger they hold
// (server/ledger_id_check.h). A member that is down refuses the connection at once; one cut off
// costs this much of every start.
constexpr absl::Duration kLedgerIdCheckTimeout = absl::Seconds(2);

// Reads the transport flags. Each numeric flag is checked against its bound before it is
// narrowed into the struct, then the struct as LedgerServer::Start checks it: InvalidArgument
// names the flag.
absl::StatusOr<ledger::TransportLimits> TransportLimitsFromFlags() {
  const int64_t max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  const int64_t memory_mb = absl::GetFlag(FLAGS_transport_memory_mb);
  const int64_t max_threads = absl::GetFlag(FLAGS_grpc_max_threads);
  const int64_t max_receive_message_bytes = absl::GetFlag(FLAGS_max_receive_message_bytes);
  for (const auto& [bound, value] :
       {std::pair{ledger::kMaxConcurrentStreamsBound, max_concurrent_streams},
        std::pair{ledger::kTransportMemoryMbBound, memory_mb},
        std::pair{ledger::kGrpcMaxThreadsBound, max_threads},
        std::pair{ledger::kMaxReceiveMessageBytesBound, max_receive_message_bytes}}) {
    if (absl::Status status = ledger::CheckOptionBound(bound, value); !status.ok()) return status;
  }
  ledger::TransportLimits limits;
  limits.max_concurrent_streams = static_cast<int32_t>(max_concurrent_streams);
  limits.memory_mb = memory_mb;
  limits.max_threads = static_cast<int32_t>(max_threads);
  limits.max_receive_message_bytes = static_cast<int32_t>(max_receive_message_bytes);
  limits.max_connection_idle = absl::GetFlag(FLAGS_max_connection_idle);
  limits.max_connection_age = absl::GetFlag(FLAGS_max_connection_age);
  limits.max_connection_age_grace = absl::GetFlag(FLAGS_max_connection_age_grace);
  limits.handshake_timeout = absl::GetFlag(FLAGS_handshake_timeout);
  limits.keepalive_time = absl::GetFlag(FLAGS_keepalive_time);
  limits.keepalive_timeout = absl::GetFlag(FLAGS_keepalive_timeout);
  limits.min_client_ping_interval = absl::GetFlag(FLAGS_min_client_ping_interval);
  if (absl::Status status = ledger::ValidateTransportLimits(limits); !status.ok()) return status;
  return limits;
}

// The fault injection ledgerd's --debug_ flags ask for, as the server's test hooks (kept out of
// its options); empty hooks without them.
absl::StatusOr<ledger::ServerTestHooks> FaultInjectionFromFlags() {
  ledger::ServerTestHooks hooks;
  if (const std::string crash_step = absl::GetFlag(FLAGS_debug_crash_after_transfer_step);
      !crash_step.empty()) {
    std::optional<ledger::TransferStep> step;
    for (ledger::TransferStep candidate :
         {ledger::TransferStep::kDebited, ledger::TransferStep::kCredited,
          ledger::TransferStep::kSettled}) {
      if (ledger::TransferStepName(candidate) == crash_step) step = candidate;
    }
    if (!step.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--debug_crash_after_transfer_step must be debited, credited or settled; got \"",
          crash_step, "\""));
    }
    hooks.router.transfers.after_step = [crash = *step](ledger::TransferStep done,
                                                        absl::string_view transfer_id) {
      if (done != crash) return;
      std::cerr << "ledgerd: --debug_crash_after_transfer_step: transfer " << transfer_id << " is "
                << ledger::TransferStepName(done) << "; exiting now as a crash\n";
      std::_Exit(kDebugCrashExitCode);
    };
  }
  return hooks;
}

// What the start-up line says of gRPC's transport: its security and, for plaintext beyond
// loopback, that --plaintext_beyond_loopback asked for it.
std::string GrpcTransportWords(const ledger::ServerOptions& options, const std::string& security) {
  const absl::StatusOr<ledger::cli::HostPort> listen = ledger::cli::ParseHostPort(
      "--listen", options.listen_address, ledger::cli::AddressUse::kListen, 50051);
  if (options.transport_security.cert_file.empty() && listen.ok() && !listen->IsLoopback()) {
    return absl::StrCat(security, " beyond loopback (--plaintext_beyond_loopback)");
  }
  return security;
}

// Parses --peers or --peer_clients: ID=HOST:PORT,...; every address checked like --listen's.
absl::StatusOr<std::vector<ledger::storage::RaftPeer>> ParsePeersFlag(absl::string_view flag,
                                                                      absl::string_view text) {
  absl::StatusOr<std::vector<ledger::storage::RaftPeer>> peers =
      ledger::storage::ParseRaftPeers(text);
  if (!peers.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", peers.status().message()));
  }
  for (ledger::storage::RaftPeer& peer : *peers) {
    absl::StatusOr<ledger::cli::HostPort> address =
        ledger::cli::ParseHostPort(absl::StrCat(flag, " (node ", peer.id, ")"), peer.address,
                                   ledger::cli::AddressUse::kConnect, 7001);
    if (!address.ok()) return address.status();
    peer.address = address->ToString();
  }
  return peers;
}

// Reads the cluster flags (--node_id and the rest) into `options`; nothing without --node_id.
absl::Status ClusterOptionsFromFlags(ledger::ServerOptions& options) {
  const uint64_t node_id = absl::GetFlag(FLAGS_node_id);
  const std::string peers_flag = absl::GetFlag(FLAGS_peers);
  if (node_id == 0) {
    for (const auto& [flag, set] :
         {std::pair<const char*, bool>{"--peers", !peers_flag.empty()},
          {"--peer_clients", !absl::GetFlag(FLAGS_peer_clients).empty()},
          {"--peer_tls_ca_file", !absl::GetFlag(FLAGS_peer_tls_ca_file).empty()},
          {"--raft_listen", !absl::GetFlag(FLAGS_raft_listen).empty()},
          {"--raft_dir", !absl::GetFlag(FLAGS_raft_dir).empty()},
          {"--raft_snapshot_entries", absl::GetFlag(FLAGS_raft_snapshot_entries) != 65536},
          {"--raft_writes_in_flight", absl::GetFlag(FLAGS_raft_writes_in_flight) != 1}}) {
      if (set) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, " is for a cluster replica: give --node_id too"));
      }
    }
    return absl::OkStatus();
  }
  if (options.storage.durability == ledger::storage::Durability::kNone) {
    return absl::InvalidArgumentError(
        "--node_id: a cluster replica keeps its ledger on disk; --durability=none keeps none");
  }
  if (peers_flag.empty()) {
    return absl::InvalidArgumentError(
        "--node_id needs --peers: every member of the cluster, ID=HOST:PORT,...");
  }
  absl::StatusOr<std::vector<ledger::storage::RaftPeer>> peers =
      ParsePeersFlag("--peers", peers_flag);
  if (!peers.ok()) return peers.status();
  if (peers->size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--peers names ", peers->size(), " members; a cluster has three (docs/replication.md)"));
  }
  ledger::storage::ClusterOptions cluster;
  cluster.node_id = node_id;
  bool listed = false;
  for (const ledger::storage::RaftPeer& peer : *peers) {
    listed = listed || peer.id == node_id;
    absl::StatusOr<ledger::cli::HostPort> address = ledger::cli::ParseHostPort(
        "--peers", peer.address, ledger::cli::AddressUse::kConnect, 7001);
    if (address.ok() && !address->IsLoopback() && !absl::GetFlag(FLAGS_plaintext_beyond_loopback)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--peers: node ", peer.id, " at ", peer.address,
          " is beyond this machine, and Raft's traffic is plaintext and unauthenticated (libraft "
          "0.15 has no TLS): keep the replicas on a private network and say "
          "--plaintext_beyond_loopback to mean it"));
    }
  }
  if (!listed) {
    return absl::InvalidArgumentError(absl::StrCat("--node_id=", node_id, " is not among --peers"));
  }
  cluster.peers = *std::move(peers);
  const std::string peer_clients = absl::GetFlag(FLAGS_peer_clients);
  if (!peer_clients.empty()) {
    absl::StatusOr<std::vector<ledger::storage::RaftPeer>> clients =
        ParsePeersFlag("--peer_clients", peer_clients);
    if (!clients.ok()) return clients.status();
    for (const ledger::storage::RaftPeer& client : *clients) {
      const bool member = std::any_of(
          cluster.peers.begin(), cluster.peers.end(),
          [&client](const ledger::storage::RaftPeer& peer) { return peer.id == client.id; });
      if (!member) {
        return absl::InvalidArgumentError(
            absl::StrCat("--peer_clients names node ", client.id, ", which is not in --peers"));
      }
      options.peer_client_addresses[client.id] = client.address;
    }
    // Before it joins: the members that answer hold this replica's ledger.
    cluster.check_ledger_id =
        [node_id, members = options.peer_client_addresses,
         security = options.transport_security](const std::string& ledger_id) -> absl::Status {
      absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
          ledger::PeerChannelCredentials(security);
      if (!credentials.ok()) return credentials.status();
      return ledger::CheckLedgerIdWithMembers(ledger_id, node_id, members, *credentials,
                                              kLedgerIdCheckTimeout);
    };
  }
  const std::string raft_listen = absl::GetFlag(FLAGS_raft_listen);
  if (!raft_listen.empty()) {
    absl::StatusOr<ledger::cli::HostPort> bind = ledger::cli::ParseHostPort(
        "--raft_listen", raft_listen, ledger::cli::AddressUse::kListen, 7001);
    if (!bind.ok()) return bind.status();
    cluster.bind_address = bind->ToString();
  }
  cluster.raft_dir = absl::GetFlag(FLAGS_raft_dir);
  cluster.election_timeout = absl::GetFlag(FLAGS_election_timeout);
  cluster.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  if (cluster.election_timeout < absl::Milliseconds(50) ||
      cluster.election_timeout > absl::Seconds(60)) {
    return absl::InvalidArgumentError(absl::StrCat("--election_timeout must be 50ms to 60s; got ",
                                                   absl::FormatDuration(cluster.election_timeout)));
  }
  if (cluster.heartbeat_interval < absl::Milliseconds(5) ||
      cluster.heartbeat_interval * 3 > cluster.election_timeout) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--heartbeat_interval must be at least 5ms and at most a third of --election_timeout (",
        absl::FormatDuration(cluster.election_timeout), "); got ",
        absl::FormatDuration(cluster.heartbeat_interval)));
  }
  const int64_t snapshot_entries = absl::GetFlag(FLAGS_raft_snapshot_entries);
  if (snapshot_entries < 16 || snapshot_entries > 1048576) {
    return absl::InvalidArgumentError(
        absl::StrCat("--raft_snapshot_entries must be 16 to 1048576; got ", snapshot_entries));
  }
  cluster.snapshot_entries = static_cast<unsigned>(snapshot_entries);
  const int32_t writes_in_flight = absl::GetFlag(FLAGS_raft_writes_in_flight);
  if (writes_in_flight < 1 || writes_in_flight > 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("--raft_writes_in_flight must be 1 to 8; got ", writes_in_flight));
  }
  cluster.writes_in_flight = writes_in_flight;
  options.storage.cluster = std::move(cluster);
  return absl::OkStatus();
}

// Reads the flags into options; InvalidArgument names the flag that is out of range.
absl::StatusOr<ledger::ServerOptions> OptionsFromFlags() {
  ledger::ServerOptions options;
  absl::StatusOr<ledger::cli::HostPort> listen = ledger::cli::ParseHostPort(
      "--listen", absl::GetFlag(FLAGS_listen), ledger::cli::AddressUse::kListen, 50051);
  if (!listen.ok()) return listen.status();
  options.listen_address = listen->ToString();
  const std::string metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  if (!metrics_listen.empty()) {
    absl::StatusOr<ledger::cli::HostPort> metrics = ledger::cli::ParseHostPort(
        "--metrics_listen", metrics_listen, ledger::cli::AddressUse::kListen, 9464);
    if (!metrics.ok()) return metrics.status();
    // Debian's prometheus-cpp builds its HTTP server (civetweb) without IPv6.
    if (absl::StrContains(metrics->host, ':')) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--metrics_listen takes an IPv4 address or a host name (the metrics HTTP server has no "
          "IPv6); got \"",
          metrics_listen, "\""));
    }
    options.metrics_listen_address = metrics->ToString();
  }
  options.version = LEDGER_VERSION;
  const int64_t shards = absl::GetFlag(FLAGS_shards);
  const int64_t capacity = absl::GetFlag(FLAGS_mailbox_capacity);
  const int64_t max_batch = absl::GetFlag(FLAGS_max_batch);
  const int64_t overdraft_limit = absl::GetFlag(FLAGS_overdraft_limit);
  options.max_in_flight = absl::GetFlag(FLAGS_max_in_flight);
  options.max_connections = absl::GetFlag(FLAGS_max_connections);
  // The bounds the router, the shards and the server check again (base/option_bound.h), here
  // before anything starts and before a value is narrowed.
  for (const auto& [bound, value] :
       {std::pair{ledger::kShardsBound, shards}, std::pair{ledger::kMailboxCapacityBound, capacity},
        std::pair{ledger::kMaxInFlightBound, options.max_in_flight},
        std::pair{ledger::kMaxConnectionsBound, options.max_connections},
        std::pair{ledger::kMaxBatchBound, max_batch},
        std::pair{ledger::kMaxWatchersBound, absl::GetFlag(FLAGS_max_watchers)},
        std::pair{ledger::kMaxWatchersPerClientBound, absl::GetFlag(FLAGS_max_watchers_per_client)},
        std::pair{ledger::kMaxWatchAccountsBound, absl::GetFlag(FLAGS_max_watch_accounts)},
        std::pair{ledger::kOverdraftLimitBound, overdraft_limit}}) {
    if (absl::Status status = ledger::CheckOptionBound(bound, value); !status.ok()) return status;
  }
  options.router.num_shards = static_cast<int32_t>(shards);
  options.router.shard.mailbox_capacity = static_cast<size_t>(capacity);
  options.router.shard.max_batch = static_cast<size_t>(max_batch);
  options.router.shard.policy.overdraft_limit = overdraft_limit;
  options.router.shard.debug_handler_delay = absl::GetFlag(FLAGS_debug_handler_delay);
  if (absl::Status status = ledger::CheckDurationAtLeast(
          "--debug_handler_delay", options.router.shard.debug_handler_delay, absl::ZeroDuration());
      !status.ok()) {
    return status;
  }
  // The injected sleep must run on shard threads, never on gRPC's.
  options.router.shard.inline_execution =
      options.router.shard.debug_handler_delay == absl::ZeroDuration();
  absl::StatusOr<ledger::storage::Durability> durability =
      ledger::storage::ParseDurability(absl::GetFlag(FLAGS_durability));
  if (!durability.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", durability.status().message()));
  }
  options.storage.durability = *durability;
  options.storage.data_dir = absl::GetFlag(FLAGS_data_dir);
  if (options.storage.data_dir.empty() && *durability != ledger::storage::Durability::kNone) {
    return absl::InvalidArgumentError("--data_dir must name a directory; got an empty value");
  }
  options.storage.idempotency_ttl = absl::GetFlag(FLAGS_idempotency_ttl);
  if (options.storage.idempotency_ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--idempotency_ttl must be greater than 0; got ",
                     absl::FormatDuration(options.storage.idempotency_ttl)));
  }
  const int64_t segment_mib = absl::GetFlag(FLAGS_log_segment_mib);
  if (segment_mib < 1 || segment_mib > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--log_segment_mib must be 1 to 1024; got ", segment_mib));
  }
  options.storage.log_segment_bytes = segment_mib << 20;
  absl::StatusOr<ledger::WatchRetention> retention =
      ledger::ParseWatchRetention(absl::GetFlag(FLAGS_watch_retention));
  if (!retention.ok()) return retention.status();
  options.storage.watch_retention_bytes = retention->bytes;
  options.storage.watch_retention_age = retention->age;
  options.watch.max_watchers = absl::GetFlag(FLAGS_max_watchers);
  options.watch.max_watchers_per_client = absl::GetFlag(FLAGS_max_watchers_per_client);
  options.watch.max_accounts = absl::GetFlag(FLAGS_max_watch_accounts);
  options.storage.created_by = absl::StrCat("ledgerd ", LEDGER_VERSION);
  options.require_request_id = absl::GetFlag(FLAGS_require_request_id);
  const std::optional<ledger::FairShareBy> fair_share_by =
      ledger::ParseFairShareBy(absl::GetFlag(FLAGS_fair_share_by));
  if (!fair_share_by.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--fair_share_by must be address or connection; got \"",
                     absl::GetFlag(FLAGS_fair_share_by), "\""));
  }
  options.fair_share_by = *fair_share_by;
  options.shutdown_grace = absl::GetFlag(FLAGS_shutdown_grace);
  if (absl::Status status = ledger::CheckDurationAtLeast("--shutdown_grace", options.shutdown_grace,
                                                         absl::ZeroDuration());
      !status.ok()) {
    return status;
  }
  // Checked, and the files read, by LedgerServer::Start.
  options.transport_security.cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  options.transport_security.key_file = absl::GetFlag(FLAGS_tls_key_file);
  options.transport_security.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  options.transport_security.authz_policy_file = absl::GetFlag(FLAGS_authz_policy_file);
  options.transport_security.refresh_interval = absl::GetFlag(FLAGS_tls_refresh_interval);
  options.transport_security.peer_ca_file = absl::GetFlag(FLAGS_peer_tls_ca_file);
  // Safe by default: plaintext gRPC beyond this machine only when asked for by name.
  if (options.transport_security.cert_file.empty() && !listen->IsLoopback() &&
      !absl::GetFlag(FLAGS_plaintext_beyond_loopback)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen=", absl::GetFlag(FLAGS_listen),
        " would serve gRPC in plaintext, without TLS or authentication, beyond this machine: give "
        "--tls_cert_file and --tls_key_file (docs/deployment.md), listen on loopback "
        "(127.0.0.1, the default), or say --plaintext_beyond_loopback to mean it"));
  }
  absl::StatusOr<ledger::TransportLimits> transport = TransportLimitsFromFlags();
  if (!transport.ok()) return transport.status();
  options.transport = *transport;
  if (absl::Status cluster = ClusterOptionsFromFlags(options); !cluster.ok()) return cluster;
  return options;
}

// Waits for SIGINT, SIGTERM and SIGHUP on its own thread (the signals are blocked in every other
// thread): the first starts a graceful shutdown, a second one exits at once. SIGHUP drains like
// SIGTERM: ledgerd has nothing a reload would re-read (TLS material and policies are watched and
// reloaded by themselves), and a hang-up must never kill it without a drain.
class SignalWatcher {
 public:
  SignalWatcher() {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    sigaddset(&signals_, SIGHUP);
    // Before any other thread starts, so that every thread inherits the mask.
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
  }
  ~SignalWatcher() { Stop(); }

  // Stops watching: a signal that arrives from now on stays pending (blocked), and an exec keeps
  // it pending for the program that follows, which watches for it again.
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  ledger::SteadyNotification& shutdown_requested() { return shutdown_requested_; }

 private:
  void Run() {
    int received = 0;
    const timespec poll_interval{0, 100'000'000};
    while (!stop_.load()) {
      const int signal_number = sigtimedwait(&signals_, nullptr, &poll_interval);
      if (signal_number < 0) continue;  // EAGAIN (timeout) or EINTR.
      if (++received == 1) {
        std::cerr << "ledgerd: received " << sigabbrev_np(signal_number)
                  << ", shutting down; send it again to exit at once\n";
        shutdown_requested_.Notify();
      } else {
        std::cerr << "ledgerd: second signal, exiting at once without draining\n";
        std::_Exit(EXIT_FAILURE);
      }
    }
  }

  sigset_t signals_;
  std::atomic<bool> stop_{false};
  ledger::SteadyNotification shutdown_requested_;
  std::thread thread_;
};

// The exit status of a start refused because the data directory is damaged (a corrupt log, an
// account that disagrees with its journal): restore a backup; restarting will not help.
constexpr int kExitCorruptData = 4;

// `ledgerd init`: creates a new, empty ledger and says so; exit 0, or 1 with the reason.
int InitLedger(const ledger::storage::StoreOptions& storage) {
  if (storage.durability == ledger::storage::Durability::kNone) {
    std::cerr << "ledgerd: init creates a ledger on disk; --durability=none keeps none\n";
    return EXIT_FAILURE;
  }
  absl::StatusOr<std::string> ledger_id = ledger::storage::RocksDbStore::Init(storage);
  if (!ledger_id.ok()) {
    std::cerr << "ledgerd: init: " << ledger_id.status().message() << "\n";
    return EXIT_FAILURE;
  }
  std::cout << "ledgerd: created a new, empty ledger " << *ledger_id << " in " << storage.data_dir
            << "\n";
  return EXIT_SUCCESS;
}

// `ledgerd upgrade`: brings a data directory of an older format to this one; exit 0, or 1 with
// the reason.
int UpgradeLedger(const ledger::storage::StoreOptions& storage) {
  if (storage.durability == ledger::storage::Durability::kNone) {
    std::cerr << "ledgerd: upgrade works on a ledger on disk; --durability=none keeps none\n";
    return EXIT_FAILURE;
  }
  absl::StatusOr<ledger::storage::UpgradeReport> report =
      ledger::storage::RocksDbStore::Upgrade(storage);
  if (!report.ok()) {
    std::cerr << "ledgerd: upgrade: " << report.status().message() << "\n";
    return EXIT_FAILURE;
  }
  if (report->from_version == ledger::storage::kFormatVersion) {
    std::cout << "ledgerd: ledger " << report->ledger_id << " in " << storage.data_dir
              << " is already of data format version " << ledger::storage::kFormatVersion
              << "; nothing to do\n";
  } else {
    std::cout << "ledgerd: upgraded ledger " << report->ledger_id << " in " << storage.data_dir
              << " from data format version " << report->from_version << " to "
              << ledger::storage::kFormatVersion << "\n";
  }
  return EXIT_SUCCESS;
}
// `ledgerd restore --from=DIR --data_dir=DIR2`: makes a data directory of a backup; exit 0, 1 with
// the reason, or 4 when the backup's data fails its checks.
int RestoreLedger(const std::string& from, const ledger::storage::StoreOptions& storage) {
  if (storage.durability == ledger::storage::Durability::kNone) {
    std::cerr << "ledgerd: restore makes a ledger on disk; --durability=none keeps none\n";
    return EXIT_FAILURE;
  }
  absl::StatusOr<ledger::RestoreReport> report = ledger::RestoreBackup(from, storage);
  if (!report.ok()) {
    std::cerr << "ledgerd: restore: " << report.status().message() << "\n";
    return report.status().code() == absl::StatusCode::kDataLoss ? kExitCorruptData : EXIT_FAILURE;
  }
  std::cout << "ledgerd: restored ledger " << report->ledger_id << " as of log position "
            << report->last_position << " (backup taken " << report->created_at << ") into "
            << storage.data_dir << ": " << report->accounts << " accounts, "
            << report->pending_transfers << " pending transfers\n";
  return EXIT_SUCCESS;
}

// How often the listener watchdog looks at the accept queue, and how long connections may wait
// there unaccepted before ledgerd declares its listener lost. The accept loop takes a connection
// within microseconds while it runs, even out of descriptors (connection_acceptor.h): the watchdog
// is the last resort, for a loop that has stopped.
constexpr absl::Duration kWatchdogInterval = absl::Seconds(1);
constexpr absl::Duration kListenerStuckFor = absl::Seconds(5);

// `address` (as parsed by OptionsFromFlags) with the port actually bound.
std::string ListenAddressWithPort(const std::string& address, int port) {
  absl::StatusOr<ledger::cli::HostPort> parsed =
      ledger::cli::ParseHostPort("", address, ledger::cli::AddressUse::kListen, 0);
  return parsed.ok() ? parsed->WithPort(port) : address;
}

// Binds `address` for a moment (SO_REUSEADDR, as the servers do) so that a port in use or an
// address that is not this machine's is refused before the ledger is opened: a refused start
// leaves --data_dir untouched, and prints no library noise. (A race with another process that
// binds in between still fails cleanly in LedgerServer::Start.)
absl::Status CheckCanListen(absl::string_view flag, const std::string& address) {
  absl::StatusOr<ledger::cli::HostPort> parsed =
      ledger::cli::ParseHostPort(flag, address, ledger::cli::AddressUse::kListen, 0);
  if (!parsed.ok()) return parsed.status();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(parsed->port);
  if (const int error = getaddrinfo(parsed->host.c_str(), port.c_str(), &hints, &found);
      error != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot listen on ", address, ": ", gai_strerror(error), " (", flag, ")"));
  }
  int bind_errno = 0;
  for (addrinfo* candidate = found; candidate != nullptr; candidate = candidate->ai_next) {
    const int fd = socket(candidate->ai_family, candidate->ai_socktype, candidate->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    bind_errno = bind(fd, candidate->ai_addr, candidate->ai_addrlen) == 0 ? 0 : errno;
    close(fd);
    if (bind_errno == 0) break;
  }
  freeaddrinfo(found);
  if (bind_errno == 0) return absl::OkStatus();
  const std::string why = bind_errno == EADDRINUSE      ? "the port is in use"
                          : bind_errno == EADDRNOTAVAIL ? "the address is not one of this machine's"
                          : bind_errno == EACCES ? "permission denied (ports below 1024 need root)"
                                                 : std::strerror(bind_errno);
  return absl::UnavailableError(
      absl::StrCat("cannot listen on ", address, ": ", why, " (", flag, ")"));
}

// --ports_file: where ledgerd tells a script or a test which ports it bound, so that nothing has to
// parse the start-up line (prose, for people). The file appears whole or not at all: it is
// written to PATH.tmp and renamed over PATH.
std::string PortsFileTmp(const std::string& path) { return path + ".tmp"; }

// Refuses a --ports_file that could not be written once the server is up (its directory missing
// or unwritable, or a directory itself), before anything starts: creates and removes PATH.tmp.
absl::Status CheckCanWritePortsFile(const std::string& path) {
  const std::string tmp = PortsFileTmp(path);
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--ports_file: cannot write ", tmp, ": ",
                                                   std::strerror(errno),
                                                   " (its directory must exist and be writable)"));
  }
  close(fd);
  unlink(tmp.c_str());
  if (std::error_code error; std::filesystem::is_directory(path, error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ports_file: ", path, " is a directory; it must name a file"));
  }
  return absl::OkStatus();
}

// One line of JSON: {"pid":N,"grpc":"HOST:PORT","metrics":"HOST:PORT"} ("metrics":null when
// `metrics` is empty). The addresses come from ParseHostPort, so they hold no quote to escape.
std::string PortsFileJson(const std::string& grpc, const std::string& metrics) {
  return absl::StrCat("{\"pid\":", getpid(), ",\"grpc\":\"", grpc, "\",\"metrics\":",
                      metrics.empty() ? "null" : absl::StrCat("\"", metrics, "\""), "}\n");
}

absl::Status WritePortsFile(const std::string& path, const std::string& json) {
  const std::string tmp = PortsFileTmp(path);
  {
    std::ofstream file(tmp, std::ios::trunc);
    file << json;
    file.close();
    if (!file) {
      return absl::UnavailableError(
          absl::StrCat("--ports_file: cannot write ", tmp, ": ", std::strerror(errno)));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("--ports_file: cannot rename ", tmp, " to ", path,
                                               ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// Exit status when the accept loop stopped taking connections: a supervisor restarts ledgerd.
constexpr int kExitListenerLost = 3;

// Why WaitForStop returned.
enum class StopCause {
  kSignal,        // SIGINT, SIGTERM or SIGHUP: drain and exit.
  kListenerLost,  // The gRPC port stopped accepting connections: drain, exit kExitListenerLost.
  kDemoted,       // A cluster replica stopped leading: drain, start again as a follower.
};

// Returns once SIGINT/SIGTERM arrived, once no connection has been accepted on `server`'s port
// for kListenerStuckFor while some waited (see ListenerWatchdog), or once a cluster replica
// stopped leading. Then the caller drains as on SIGTERM: on a lost listener, health turns
// NOT_SERVING at once on the connections that still work, and the process exits so that a
// supervisor starts a fresh listener, instead of answering SERVING while no new client can
// connect.
StopCause WaitForStop(SignalWatcher& signals, const ledger::LedgerServer& server) {
  std::atomic<bool> lost{false};
  absl::StatusOr<std::unique_ptr<ledger::ListenerWatchdog>> watchdog =
      ledger::ListenerWatchdog::Start(
          server.port(), kWatchdogInterval, kListenerStuckFor,
          [&lost] {
            std::cerr << "ledgerd: the gRPC port has stopped accepting connections (clients have "
                         "waited "
                      << absl::FormatDuration(kListenerStuckFor)
                      << " in the accept queue). Draining and exiting with status "
                      << kExitListenerLost << " so that a supervisor restarts ledgerd\n";
            lost.store(true);
          },
          [&server] { return server.connections().accepted; });
  if (!watchdog.ok()) std::cerr << "ledgerd: " << watchdog.status().message() << "\n";
  while (!signals.shutdown_requested().WaitForNotificationWithTimeout(absl::Milliseconds(20))) {
    if (lost.load()) return StopCause::kListenerLost;
    if (server.demoted().HasBeenNotified()) return StopCause::kDemoted;
  }
  return StopCause::kSignal;
}

// A demoted replica starts again as a follower: the same program with the same arguments, in
// the same process (its pid, so what supervises it sees no exit). Everything it held is closed
// by then; what is left open is close-on-exec. Returns only when exec fails.
void StartAgainAsFollower(char** argv) {
  std::cerr << "ledgerd: starting again as a follower" << std::endl;
  execv("/proc/self/exe", argv);
  std::cerr << "ledgerd: cannot start again (" << strerror(errno) << "); exiting\n";
}

}  // namespace

int main(int argc, char** argv) {
  const ledger::cli::ProgramSpec program{
      "ledgerd", __FILE__,
      "a sharded account ledger served over gRPC (ledger.v1.Ledger).\n"
      "\n"
      "Usage:\n"
      "  ledgerd init --data_dir=DIR   create a new, empty ledger in DIR (missing or empty) and "
      "exit\n"
      "  ledgerd upgrade --data_dir=DIR\n"
      "                                bring DIR, written by an older ledgerd, to this version's "
      "data\n"
      "                                format (offline; crash-safe: run it again if cut short)\n"
      "  ledgerd restore --from=BACKUP --data_dir=DIR\n"
      "                                make DIR (missing or empty) a data directory from a backup\n"
      "                                taken by `ledgerctl backup` (checked before it is in "
      "place)\n"
      "  ledgerd [--listen=HOST:PORT] [--data_dir=DIR] [--durability=sync|async|none] ...\n"
      "                                serve the ledger in DIR (made by `ledgerd init`)\n"
      "\n"
      "Exit status: 0 after a clean stop; 1 when start-up is refused or on a second signal; 2 for\n"
      "a command line that is wrong (nothing was started); 3 when the gRPC port stopped\n"
      "accepting connections (a supervisor should start ledgerd again); 4 when the data\n"
      "directory is damaged (restore a backup: starting again will not help)."};
  const std::vector<std::string> positional =
      ledger::cli::ParseCommandLineOrExit(argc, argv, program);
  // Debian builds Abseil without NDEBUG, so every absl::Mutex lock also updated a process-wide
  // lock-order graph (deadlock detection): about 2% of the durable path's CPU in perf. The tests
  // keep the detection; the server does without it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const bool init = !positional.empty() && positional[0] == "init";
  const bool upgrade = !positional.empty() && positional[0] == "upgrade";
  const bool restore = !positional.empty() && positional[0] == "restore";
  const bool command = init || upgrade || restore;
  if (positional.size() > (command ? 1 : 0)) {
    const std::string& stray = positional[command ? 1 : 0];
    const std::optional<std::string> close = ledger::cli::DidYouMean(
        stray, {std::string("init"), std::string("upgrade"), std::string("restore")});
    ledger::cli::ExitUsage(
        program,
        absl::StrCat(
            "unexpected argument \"", stray, "\"; the commands are `init`, `upgrade` and `restore`",
            close.has_value() && !command ? absl::StrCat(" (did you mean ", *close, "?)") : ""));
  }

  absl::StatusOr<ledger::ServerOptions> options = OptionsFromFlags();
  absl::StatusOr<ledger::ServerTestHooks> fault_injection = FaultInjectionFromFlags();
  if (!options.ok()) ledger::cli::ExitUsage(program, options.status().message());
  if (!fault_injection.ok()) {
    ledger::cli::ExitUsage(program, fault_injection.status().message());
  }
  ledger::LimitLibraryLogs(/*quiet=*/!absl::GetFlag(FLAGS_verbose));
  options->storage.ledger_id = absl::GetFlag(FLAGS_ledger_id);
  if (!init && !options->storage.ledger_id.empty()) {
    ledger::cli::ExitUsage(program, "--ledger_id is for `ledgerd init` only");
  }
  if (init && !options->storage.ledger_id.empty()) {
    if (absl::Status id = ledger::storage::CheckLedgerId(options->storage.ledger_id); !id.ok()) {
      ledger::cli::ExitUsage(program, absl::StrCat("--ledger_id: ", id.message()));
    }
  }
  if (init) return InitLedger(options->storage);
  if (upgrade) return UpgradeLedger(options->storage);
  const std::string from = absl::GetFlag(FLAGS_from);
  if (restore != !from.empty()) {
    ledger::cli::ExitUsage(program, restore ? "restore needs --from=DIR, the backup to restore"
                                            : "--from is for `ledgerd restore` only");
  }
  if (restore) return RestoreLedger(from, options->storage);
  const std::string ports_file = absl::GetFlag(FLAGS_ports_file);
  if (!ports_file.empty()) {
    if (absl::Status status = CheckCanWritePortsFile(ports_file); !status.ok()) {
      ledger::cli::ExitUsage(program, status.message());
    }
  }
  for (const auto& [flag, address] :
       {std::pair<const char*, const std::string&>{"--listen", options->listen_address},
        {"--metrics_listen", options->metrics_listen_address}}) {
    if (address.empty()) continue;
    if (absl::Status status = CheckCanListen(flag, address); !status.ok()) {
      std::cerr << "ledgerd: " << status.message() << "\n";
      return EXIT_FAILURE;
    }
  }
  // Before the server starts: each connection is a descriptor, and --max_connections' default
  // is a share of the limit. (Logged once the server is up, so that a refused start prints only
  // its reason.)
  const absl::StatusOr<ledger::OpenFileLimit> files = ledger::RaiseOpenFileLimit();
  SignalWatcher signals;
  absl::StatusOr<std::unique_ptr<ledger::LedgerServer>> server =
      ledger::LedgerServer::Start(*options, *fault_injection);
  if (!server.ok()) {
    std::cerr << "ledgerd: " << server.status().message() << "\n";
    // Corrupt data is not a failure a restart can mend: a supervisor should stop and page.
    return server.status().code() == absl::StatusCode::kDataLoss ? kExitCorruptData : EXIT_FAILURE;
  }
  signals.Start();
  ledger::ShowLibraryLogs();  // Started: from now on the libraries' lines are worth seeing.
  if (!files.ok()) {
    std::cerr << "ledgerd: " << files.status().message() << "; continuing with the limit as is\n";
  } else {
    std::cerr << "ledgerd: open-file limit " << files->before
              << (files->after == files->before
                      ? " (already the hard limit)"
                      : absl::StrCat(", raised to ", files->after, " (the hard limit)"))
              << "; at most " << (*server)->connections().max
              << " client connections (--max_connections)\n";
  }
  const ledger::storage::Durability durability = options->storage.durability;
  if (options->storage.cluster.has_value()) {
    std::cerr << "ledgerd: node " << options->storage.cluster->node_id
              << " of a cluster of three, replica of ledger " << (*server)->store()->ledger_id()
              << " in " << options->storage.data_dir
              << "; it serves ledger calls once it leads (followers refuse them NOT_LEADER)\n";
  } else if (durability != ledger::storage::Durability::kNone) {
    std::cerr << "ledgerd: recovered " << (*server)->recovered_accounts() << " accounts of ledger "
              << (*server)->store()->ledger_id() << " from " << options->storage.data_dir << " in "
              << absl::FormatDuration((*server)->recovery_time()) << "\n";
  }
  const std::string storage =
      durability == ledger::storage::Durability::kNone
          ? "durability none (memory only)"
          : absl::StrCat("durability ", ledger::storage::DurabilityName(durability), ", data dir ",
                         options->storage.data_dir);
  const ledger::ShardOptions& shard = options->router.shard;
  const std::string metrics =
      options->metrics_listen_address.empty()
          ? "no metrics"
          : absl::StrCat(
                "metrics on http://",
                ListenAddressWithPort(options->metrics_listen_address, (*server)->metrics_port()),
                "/metrics");
  std::cout << absl::StrFormat(
                   "ledgerd %s: listening on %s, %s, %d shards, mailbox capacity %d, max in "
                   "flight %d, max batch %d, overdraft limit %d, %s, gRPC %s",
                   LEDGER_VERSION,
                   ListenAddressWithPort(options->listen_address, (*server)->port()), metrics,
                   options->router.num_shards, shard.mailbox_capacity, options->max_in_flight,
                   shard.max_batch, shard.policy.overdraft_limit, storage,
                   GrpcTransportWords(*options, (*server)->transport_security().description()))
            << std::endl;
  if (!ports_file.empty()) {
    const std::string json = PortsFileJson(
        ListenAddressWithPort(options->listen_address, (*server)->port()),
        options->metrics_listen_address.empty()
            ? ""
            : ListenAddressWithPort(options->metrics_listen_address, (*server)->metrics_port()));
    if (absl::Status status = WritePortsFile(ports_file, json); !status.ok()) {
      std::cerr << "ledgerd: " << status.message() << "; stopping\n";
      (*server)->Shutdown();
      return EXIT_FAILURE;
    }
  }

  const StopCause cause = WaitForStop(signals, **server);
  const ledger::SteadyTime stop_started = ledger::SteadyNow();
  if (cause == StopCause::kDemoted) {
    std::cerr << "ledgerd: draining, to start again as a follower" << std::endl;
  }
  (*server)->Shutdown();
  const std::string phases = (*server)->drain_phases();
  if (cause == StopCause::kDemoted) {
    const std::string state_to_take = (*server)->state_to_take();
    const ledger::SteadyTime closing = ledger::SteadyNow();
    server->reset();  // The store and its replica closed: the next start opens them.
    std::cerr << "ledgerd: drained in " << absl::FormatDuration(ledger::SteadySince(stop_started))
              << " (" << phases << ", closing the store "
              << absl::FormatDuration(ledger::SteadySince(closing)) << ")\n";
    if (!state_to_take.empty()) {
      if (absl::Status replaced =
              ledger::ReplaceDataDirectory(options->storage.data_dir, state_to_take);
          !replaced.ok()) {
        std::cerr << "ledgerd: cannot put the leader's state in place of "
                  << options->storage.data_dir << ": " << replaced.message() << "\n";
        return EXIT_FAILURE;
      }
      std::cerr << "ledgerd: the leader's state is now " << options->storage.data_dir << "\n";
    }
    // A signal that came while it drained (stopping a cluster a replica at a time makes the last
    // leader lose its quorum) is a stop: it exits instead of starting again. One that comes after
    // this check stays pending across the exec, and stops the follower.
    signals.Stop();
    if (!signals.shutdown_requested().HasBeenNotified()) {
      StartAgainAsFollower(argv);
      return EXIT_FAILURE;
    }
    std::cerr << "ledgerd: asked to stop while it drained: it exits instead of starting again\n";
  }
  // Once drained, just before the exit: while the file is there, the process it names runs (or
  // was killed, and left it).
  if (!ports_file.empty()) unlink(ports_file.c_str());
  std::cerr << "ledgerd: stopped cleanly in "
            << absl::FormatDuration(ledger::SteadySince(stop_started)) << " (" << phases << ")\n";
  return cause == StopCause::kListenerLost ? kExitListenerLost : EXIT_SUCCESS;
}
