// Defines `ConnectionAcceptor`: ledgerd's own accept loop for the gRPC port, which hands each
// connection to gRPC (ServerBuilder's ExternalConnectionAcceptor, FROM_FD) and keeps serving when
// the process runs out of file descriptors.
//
// Why: gRPC 1.51's own listener stops accepting for good after accept() fails once with EMFILE
// (CVE-2023-4785): 1,100 idle connections under a 1,024-descriptor limit took ledgerd off the
// network. This loop instead
// - bounds the connections (`max_connections`, by default three quarters of the open-file limit,
//   so that the storage and /metrics keep descriptors of their own): one more closes the idlest
//   (open_connections.h: never-used first, then the longest silent);
// - keeps one descriptor in reserve (/dev/null) for when the limit is hit anyway (something else
//   took the descriptors, or --max_connections is set too high): it closes the reserve to accept
//   the waiting connection, closes the idlest connections to free more, and takes the reserve
//   back once gRPC has closed them;
// - never spins: out of descriptors with no reserve (or out of kernel memory), it leaves the
//   listeners alone for kOutOfDescriptorsRetry at a time, and while the reserve cannot be taken
//   back it closes the idlest connections, a batch every 100 ms, whether or not a client waits
//   (the storage and /metrics need descriptors too).
// ListenerWatchdog (listener_watchdog.h) stays as the last resort, should this loop stop.
//
// Binding follows gRPC's own rules, so that --listen means what it meant: every address the host
// resolves to (127.0.0.1 and ::1 for localhost), a wildcard (0.0.0.0 or ::, however spelled) as
// one dual-stack socket (IPv4 alone where that cannot be had), port 0 as one free port shared by
// all of them, SO_REUSEADDR and no SO_REUSEPORT, TCP_NODELAY and gRPC's TCP_USER_TIMEOUT. Not
// carried over: gRPC's listener drops new connections while its memory quota is under pressure.
#ifndef LEDGER_SERVER_CONNECTION_ACCEPTOR_H_
#define LEDGER_SERVER_CONNECTION_ACCEPTOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/option_bound.h"
#include "base/steady_wait.h"
#include "grpcpp/server_builder.h"
#include "metrics/connection_counts.h"
#include "server/open_connections.h"

namespace ledger {

// How long the loop leaves the listeners alone when it is out of descriptors and has used its
// reserve: gRPC needs a moment to close the connections it was told to end.
inline constexpr absl::Duration kOutOfDescriptorsRetry = absl::Milliseconds(10);
// How often the loop forgets the connections gRPC has closed (ledger_connections is that fresh).
inline constexpr absl::Duration kConnectionPruneInterval = absl::Seconds(1);
// --max_connections; 0 stands for DefaultMaxConnections.
inline constexpr OptionBound kMaxConnectionsBound{"--max_connections", 0, int64_t{1} << 24};

// --max_connections' default for a process whose open-file limit is `open_file_limit`: three
// quarters of it, the rest kept for the storage's files, /metrics and gRPC's own descriptors (at
// least 64 of them). Within 1 and kMaxConnectionsBound.max.
int64_t DefaultMaxConnections(uint64_t open_file_limit);

// Thread-safe: counts() from any thread; the rest from one controlling thread.
class ConnectionAcceptor {
 public:
  // Listens on `address` (host:port) as described above, before the gRPC server starts, for at
  // most `max_connections` (1 to kMaxConnectionsBound.max) at once, with TCP_USER_TIMEOUT
  // `tcp_user_timeout` on every connection (zero: the kernel's), as gRPC's listener sets it from
  // the keepalive timeout. Unavailable, naming the cause, when no address could be bound; when
  // only some could, says which not on stderr and serves the others, as gRPC does.
  static absl::StatusOr<std::unique_ptr<ConnectionAcceptor>> Listen(
      const std::string& address, int64_t max_connections,
      absl::Duration tcp_user_timeout = absl::ZeroDuration());
  // Stop()s.
  ~ConnectionAcceptor();

  ConnectionAcceptor(const ConnectionAcceptor&) = delete;
  ConnectionAcceptor& operator=(const ConnectionAcceptor&) = delete;

  // The port bound (the one chosen, when `address` asked for port 0).
  int port() const { return port_; }

  // Starts the loop: each connection accepted is handed to `handoff`. Call once, after the gRPC
  // server that made `handoff` has started.
  void Start(std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> handoff);

  // Stops the loop and closes the listening sockets: from here on a new connection is refused.
  // Ends the connections whose clients never sent a byte (no call can be on them; gRPC's stop
  // would wait out its grace for them). The others stay gRPC's. Call before the gRPC server stops
  // listening or shuts down (gRPC frees what `handoff` points to then). Idempotent.
  void Stop();

  ConnectionCounts counts() const;

 private:
  ConnectionAcceptor(std::vector<int> listeners, int port, int wake_fd, int64_t max_connections,
                     absl::Duration tcp_user_timeout);

  void Run();
  // Accepts what waits on `listener`, a bounded number at a time.
  void AcceptFrom(int listener);
  // A connection just accepted: make room for it within max_connections, then hand it to gRPC.
  void Admit(int listener, int fd);
  // accept() failed for want of a descriptor.
  void OnOutOfDescriptors(int listener, int error);
  // Out of descriptors: closes the idlest, one batch per kOutOfDescriptorsCloseInterval at most
  // (gRPC needs a moment to close the last batch); how many it closed.
  size_t CloseIdlestToFreeDescriptors();
  // At most a line a second.
  static void LogAcceptFailure(int error);
  // Opens the reserve descriptor again; false while none is free.
  bool TakeReserve();
  void Publish();

  const std::vector<int> listeners_;
  const int port_;
  const int wake_fd_;  // An eventfd: Stop writes to it.
  const int64_t max_connections_;
  const absl::Duration tcp_user_timeout_;
  // How many connections one closing closes: one scan of TCP_INFO serves that many accepts.
  const size_t close_batch_;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> handoff_;
  std::thread thread_;
  bool stopped_ = false;

  // The loop's own, on its thread.
  OpenConnections open_;
  int reserve_fd_ = -1;
  std::optional<SteadyTime> last_out_of_descriptors_close_;
  // Until then the loop leaves the listeners alone (accept() or poll() lacked kernel memory).
  SteadyTime back_off_until_;

  std::atomic<int64_t> open_count_{0};
  std::atomic<int64_t> accepted_{0};
  std::atomic<int64_t> closed_at_limit_{0};
  std::atomic<int64_t> closed_out_of_descriptors_{0};
  std::atomic<int64_t> out_of_descriptors_{0};
};

}  // namespace ledger

#endif  // LEDGER_SERVER_CONNECTION_ACCEPTOR_H_
