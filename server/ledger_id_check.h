// Defines `CheckLedgerIdWithMembers`: before a replica joins its cluster, every other member that
// answers must hold the same ledger (the id `ledgerd init` gave it). A data directory of another
// ledger (a copy of another cluster's, a replica made by `ledgerd init` without --ledger_id)
// would otherwise take part in the elections and, with a longer log, lead and replace the
// members' entries with its own. A member that does not answer (the cluster is starting, it is
// down, or it refuses this replica's certificate) is not waited for: that case is not checked.
#ifndef LEDGER_SERVER_LEDGER_ID_CHECK_H_
#define LEDGER_SERVER_LEDGER_ID_CHECK_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/security/credentials.h"

namespace ledger {

// Asks each member of `member_addresses` (--peer_clients: id to gRPC address) but `node_id` for
// its ledger id (ledger.v1.LedgerCluster/Status, with `credentials`: PeerChannelCredentials),
// all at once, for at most `timeout`.
// FailedPrecondition naming the first member whose ledger id differs from `ledger_id`, with how
// to make this replica right; OK otherwise.
absl::Status CheckLedgerIdWithMembers(const std::string& ledger_id, uint64_t node_id,
                                      const std::map<uint64_t, std::string>& member_addresses,
                                      const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                                      absl::Duration timeout);

}  // namespace ledger

#endif  // LEDGER_SERVER_LEDGER_ID_CHECK_H_
