// Defines `LedgerServer`: the shards, the gRPC server with the ledger, health and reflection
// services, and the order in which they start and stop.
#ifndef LEDGER_SERVER_LEDGER_SERVER_H_
#define LEDGER_SERVER_LEDGER_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/ledger_service.h"
#include "shard/router.h"

namespace ledger {

struct ServerOptions {
  // host:port; port 0 picks a free port (see LedgerServer::port).
  std::string listen_address = "0.0.0.0:50051";
  RouterOptions router;
  // How long a graceful shutdown waits for calls in flight before cancelling them.
  absl::Duration shutdown_grace = absl::Seconds(10);
};

// Thread-safe: port() from any thread; Shutdown from one controlling thread. Shutdown is
// mandatory before destruction.
class LedgerServer {
 public:
  // Starts the shards, then serves. InvalidArgument for an option out of range; Unavailable when
  // the address cannot be listened on (in use, or not an address of this machine).
  static absl::StatusOr<std::unique_ptr<LedgerServer>> Start(const ServerOptions& options);

  ~LedgerServer();

  LedgerServer(const LedgerServer&) = delete;
  LedgerServer& operator=(const LedgerServer&) = delete;

  // The port actually bound.
  int port() const { return port_; }
  const Router& router() const { return *router_; }

  // Graceful stop, in this order: health NOT_SERVING; refuse new calls (callers get
  // UNAVAILABLE); wait up to shutdown_grace for calls in flight, then cancel the rest; drain every
  // mailbox (every accepted message is applied and answered); join the shard threads.
  // Idempotent.
  void Shutdown();

 private:
  LedgerServer(std::unique_ptr<Router> router, absl::Duration shutdown_grace,
               int64_t overdraft_limit);

  const std::unique_ptr<Router> router_;
  const absl::Duration shutdown_grace_;
  LedgerService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace ledger

#endif  // LEDGER_SERVER_LEDGER_SERVER_H_
