// Defines `PeerChannelCredentials`: how a cluster replica reaches another member's gRPC port,
// to fetch its state (state_transfer.h) or ask its ledger id (ledger_id_check.h). It reaches
// the members as their clients do, and the members of one cluster serve alike:
//  - in plaintext when its own gRPC port is plaintext;
//  - over TLS when its own port serves TLS. It verifies the member's certificate against
//    --peer_tls_ca_file (empty: --tls_client_ca_file, the CA of a cluster whose members verify
//    each other with the one they verify clients with; both empty: the system's roots), for the
//    host of the member's --peer_clients address. It presents its own certificate and key
//    (--tls_cert_file, --tls_key_file) as its client certificate, so a member with mutual TLS
//    verifies it, and a member's authorization policy must admit it to
//    /ledger.v1.LedgerAdmin/Backup and /ledger.v1.LedgerCluster/Status (docs/replication.md).
#ifndef LEDGER_SERVER_PEER_CREDENTIALS_H_
#define LEDGER_SERVER_PEER_CREDENTIALS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "server/transport_security.h"

namespace ledger {

// `own` is this replica's gRPC port's. Reads the files now, at each call, so that a rotated
// certificate is used from the next fetch on; InvalidArgument names the flag and the file.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> PeerChannelCredentials(
    const TransportSecurityOptions& own);

}  // namespace ledger

#endif  // LEDGER_SERVER_PEER_CREDENTIALS_H_
