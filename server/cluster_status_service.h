// Defines `ClusterStatusService`, ledger.v1.LedgerCluster (proto/ledger/v1/ledger_cluster.proto):
// a replica's view of its cluster (who leads, in which term, how far each member's log has
// come), which `ledgerctl cluster status` asks of every member. Every live member answers,
// leader or not; nothing in it needs the leader.
#ifndef LEDGER_SERVER_CLUSTER_STATUS_SERVICE_H_
#define LEDGER_SERVER_CLUSTER_STATUS_SERVICE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "ledger/v1/ledger_cluster.grpc.pb.h"
#include "server/leadership.h"
#include "storage/ledger_storage.h"

namespace ledger {

// Thread-safe.
class ClusterStatusService final : public v1::LedgerCluster::CallbackService {
 public:
  struct Member {
    uint64_t node_id = 0;
    std::string raft_address;  // --peers
    std::string grpc_address;  // --peer_clients; empty when not given.
  };

  // A single node: `leadership` null; `store` (null without durability) gives the ledger id. A
  // replica: `leadership` says whether it serves and `store` where Raft stands; `members` are
  // --peers. Neither is owned: both outlive the gRPC server.
  ClusterStatusService(const Leadership* leadership, const storage::LedgerStorage* store,
                       std::vector<Member> members);

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* context,
                                   const v1::ClusterStatusRequest* request,
                                   v1::ClusterStatusResponse* response) override;

 private:
  void Fill(v1::ClusterStatusResponse& response) const;

  const Leadership* const leadership_;
  const storage::LedgerStorage* const store_;
  const std::vector<Member> members_;
};

}  // namespace ledger

#endif  // LEDGER_SERVER_CLUSTER_STATUS_SERVICE_H_
