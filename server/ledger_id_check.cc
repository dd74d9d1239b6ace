#include "server/ledger_id_check.h"

#include <chrono>
#include <future>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/steady_wait.h"
#include "grpcpp/grpcpp.h"
#include "ledger/v1/ledger_cluster.grpc.pb.h"
#include "server/grpc_deadline.h"

namespace ledger {

absl::Status CheckLedgerIdWithMembers(const std::string& ledger_id, uint64_t node_id,
                                      const std::map<uint64_t, std::string>& member_addresses,
                                      const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                                      absl::Duration timeout) {
  struct Answer {
    uint64_t id = 0;
    std::string address;
    grpc::ClientContext context;
    grpc::Status status;
    v1::ClusterStatusResponse response;
  };
  // Bounded on the monotonic clock: a member that never answers (paused, cut off) is cancelled
  // at the deadline, whatever gRPC makes of a wall-clock deadline.
  const SteadyDeadline deadline(timeout);
  std::vector<std::shared_ptr<Answer>> answers;
  std::vector<std::future<void>> pending;
  for (const auto& [id, address] : member_addresses) {
    if (id == node_id) continue;
    auto answer = std::make_shared<Answer>();
    answer->id = id;
    answer->address = address;
    answer->context.set_deadline(GrpcDeadlineIn(timeout));
    answers.push_back(answer);
    pending.push_back(std::async(std::launch::async, [answer, credentials] {
      answer->status =
          v1::LedgerCluster::NewStub(grpc::CreateChannel(answer->address, credentials))
              ->Status(&answer->context, v1::ClusterStatusRequest(), &answer->response);
    }));
  }
  for (size_t i = 0; i < pending.size(); ++i) {
    if (pending[i].wait_for(SteadyTimeout(deadline.Left())) != std::future_status::ready) {
      answers[i]->context.TryCancel();
    }
    pending[i].get();
  }
  for (const std::shared_ptr<Answer>& answer : answers) {
    if (!answer->status.ok() || answer->response.ledger_id().empty() ||
        answer->response.ledger_id() == ledger_id) {
      continue;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", answer->id, " at ", answer->address, " holds ledger ",
        answer->response.ledger_id(), ", and this data directory ledger ", ledger_id,
        ": it is not a replica of this cluster, and joining would let it replace the members' "
        "entries. A replica is made with `ledgerd init --ledger_id=",
        answer->response.ledger_id(),
        "` on an empty directory (it then fetches the leader's state)"));
  }
  return absl::OkStatus();
}

}  // namespace ledger
