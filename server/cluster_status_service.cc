#include "server/cluster_status_service.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace ledger {

ClusterStatusService::ClusterStatusService(const Leadership* leadership,
                                           const storage::LedgerStorage* store,
                                           std::vector<Member> members)
    : leadership_(leadership), store_(store), members_(std::move(members)) {}

grpc::ServerUnaryReactor* ClusterStatusService::Status(grpc::CallbackServerContext* context,
                                                       const v1::ClusterStatusRequest* /*request*/,
                                                       v1::ClusterStatusResponse* response) {
  Fill(*response);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

void ClusterStatusService::Fill(v1::ClusterStatusResponse& response) const {
  if (store_ != nullptr) response.set_ledger_id(store_->ledger_id());
  if (leadership_ == nullptr) {
    response.set_serving(true);  // A single node that answers serves.
    return;
  }
  response.set_replica(true);
  response.set_node_id(leadership_->node_id());
  response.set_serving(leadership_->serving());
  const std::optional<storage::RaftStatus> status =
      store_ != nullptr ? store_->replica_status() : std::nullopt;
  if (status.has_value()) {
    response.set_leader(status->leader);
    response.set_term(status->term);
    response.set_leader_id(status->leader_id);
    response.set_commit_position(status->commit_position);
    response.set_applied_position(status->applied_position);
  }
  for (const Member& member : members_) {
    v1::ClusterMember* out = response.add_members();
    out->set_node_id(member.node_id);
    out->set_raft_address(member.raft_address);
    out->set_grpc_address(member.grpc_address);
    if (status.has_value()) {
      const auto replicated =
          std::find_if(status->replicated.begin(), status->replicated.end(),
                       [&member](const auto& each) { return each.first == member.node_id; });
      if (replicated != status->replicated.end()) out->set_replicated_position(replicated->second);
    }
    if (status.has_value() && member.node_id == status->leader_id) {
      response.set_leader_address(member.grpc_address);
    }
  }
}

}  // namespace ledger
