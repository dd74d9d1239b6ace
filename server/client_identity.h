// Defines who a client is for its fair share of --max_in_flight (shard/client_shares.h): the
// identity in its mutual-TLS certificate when it presented one, else its peer address (every
// connection from one address is one client), or, when configured, each connection on its own.
#ifndef LEDGER_SERVER_CLIENT_IDENTITY_H_
#define LEDGER_SERVER_CLIENT_IDENTITY_H_

#include <optional>
#include <string>
#include <string_view>

#include "grpcpp/grpcpp.h"

namespace ledger {

// ledgerd --fair_share_by: what makes a client without a client certificate.
enum class FairShareBy {
  kAddress,     // The peer's IP address: one client however many connections it opens.
  kConnection,  // Each connection (address and port): behind a proxy that multiplexes many
                // clients over its own few connections, use the proxy's mutual TLS instead.
};

// "address" or "connection"; nullopt for anything else.
std::optional<FairShareBy> ParseFairShareBy(std::string_view text);

// The key of the client making the call: "tls:" and the peer's certificate identity (its
// subject alternative names or common name, as gRPC reports them) when it was verified, else
// "address:" and the peer's address, or "connection:" and gRPC's peer string.
std::string ClientKeyOf(const grpc::CallbackServerContext& context, FairShareBy by);

// The address part of gRPC's peer string ("ipv4:10.0.0.7:5123" -> "ipv4:10.0.0.7",
// "ipv6:[::1]:5123" -> "ipv6:[::1]"); a peer without a port is kept whole. Pure: for tests.
std::string_view PeerAddress(std::string_view peer);

}  // namespace ledger

#endif  // LEDGER_SERVER_CLIENT_IDENTITY_H_
