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

namespace ledger {

absl::Status CheckLedgerIdWithMembers(const std::string& ledger_id, uint64_t node_id,
                                      const std::map<uint64_t, std::string>& member_addresses,
                                      absl::Duration timeout) {
  struct Answer {
    uint64_t id = 0;
    std::string address;
    grpc::Status status;
    v1::ClusterStatusResponse response;
  };
  const auto deadline = std::chrono::system_clock::now() + SteadyTimeout(timeout);
  std::vector<std::future<Answer>> pending;
  pending.reserve(member_addresses.size());
  for (const auto& [id, address] : member_addresses) {
    if (id == node_id) continue;
    pending.push_back(std::async(std::launch::async, [id, address, deadline] {
      Answer answer;
      answer.id = id;
      answer.address = address;
      grpc::ClientContext context;
      context.set_deadline(deadline);
      answer.status = v1::LedgerCluster::NewStub(
                          grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))
                          ->Status(&context, v1::ClusterStatusRequest(), &answer.response);
      return answer;
    }));
  }
  for (std::future<Answer>& each : pending) {
    const Answer answer = each.get();
    if (!answer.status.ok() || answer.response.ledger_id().empty() ||
        answer.response.ledger_id() == ledger_id) {
      continue;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", answer.id, " at ", answer.address, " holds ledger ", answer.response.ledger_id(),
        ", and this data directory ledger ", ledger_id,
        ": it is not a replica of this cluster, and joining would let it replace the members' "
        "entries. A replica is made with `ledgerd init --ledger_id=",
        answer.response.ledger_id(),
        "` on an empty directory (it then fetches the leader's state)"));
  }
  return absl::OkStatus();
}

}  // namespace ledger
