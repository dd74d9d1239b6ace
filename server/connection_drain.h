// Defines `ConnectionDrain`: tells every client connection of a running gRPC server to go
// elsewhere (an HTTP/2 GOAWAY) and stops accepting new ones, while the server keeps serving the
// calls that are already on their way; the first step of a graceful stop.
//
// Why: grpc::Server::Shutdown marks the server as shut down *before* it sends the GOAWAY, and in
// gRPC 1.51 every call whose headers arrive after that mark is cancelled unseen by any handler
// (Server::CallData::StartNewRpc "zombies" it). A client at full speed always has calls on the
// wire in that window, one round trip and a ping long: each comes back CANCELLED, which tells its
// caller nothing about whether it was applied. Sending the GOAWAY first, and shutting gRPC down
// only once the clients have had time to read it, closes that window: a call that reaches ledgerd
// is served, and one that a client sends after the GOAWAY is refused by the transport, which gRPC
// clients retry elsewhere (or fail as never sent once no listener is left).
//
// How: gRPC 1.51's public API has no way to send a GOAWAY without shutting down. Its core server
// does, `grpc_core::Server::StopListening` and `SendGoaways`, which gRPC's own end-to-end tests
// call for exactly this and libgrpc exports; this file declares and calls those two, nothing else.
// They are internal, so they are used only when built against gRPC 1.51 (checked at compile time
// against grpcpp/version_info.h); with any other version `Start` says it is unsupported, and the
// stop falls back to grpc::Server::Shutdown alone. tests/e2e/stop_under_load_test.cc shows what
// each gives.
#ifndef LEDGER_SERVER_CONNECTION_DRAIN_H_
#define LEDGER_SERVER_CONNECTION_DRAIN_H_

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace ledger {

// Stops `server` listening and sends every connection a graceful GOAWAY (gRPC's two-step one: a
// GOAWAY for "every stream so far", a ping, then the final GOAWAY once the ping comes back).
// Calls already on a connection are still served. Blocks until gRPC has taken both requests
// (microseconds; at most `timeout`). False, having done nothing, when unsupported or when gRPC
// did not take them in time. Call at most once, before grpc::Server::Shutdown.
bool StopListeningAndSendGoaways(grpc::Server& server, absl::Duration timeout);

// Whether any client connection to `server` is still open. After the GOAWAY each one closes
// once its last call is answered. False when unsupported.
bool HasOpenConnections(grpc::Server& server);

}  // namespace ledger

#endif  // LEDGER_SERVER_CONNECTION_DRAIN_H_
