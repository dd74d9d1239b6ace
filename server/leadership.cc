#include "server/leadership.h"

#include <chrono>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/error_status.h"

namespace ledger {
namespace {

// How long a client waits before it asks again when no leader is known: about an election.
constexpr std::chrono::milliseconds kNoLeaderRetryDelay{300};

}  // namespace

Leadership::Leadership(uint64_t node_id, std::map<uint64_t, std::string> client_addresses,
                       const storage::LedgerStorage* store)
    : node_id_(node_id), client_addresses_(std::move(client_addresses)), store_(store) {}

grpc::Status Leadership::Refusal() const {
  const std::optional<storage::RaftStatus> status = store_->replica_status();
  const uint64_t leader = status.has_value() ? status->leader_id : 0;
  ErrorMetadata metadata{{"node_id", absl::StrCat(node_id_)}};
  if (leader == 0) {
    return ErrorStatus(grpc::StatusCode::UNAVAILABLE, v1::NOT_LEADER,
                       absl::StrCat("node ", node_id_,
                                    " is not the leader and knows of none (an election is under "
                                    "way, or this node is cut off from the others); nothing was "
                                    "applied, retry"),
                       std::move(metadata), kNoLeaderRetryDelay);
  }
  metadata.emplace_back("leader_id", absl::StrCat(leader));
  const auto address = client_addresses_.find(leader);
  if (address != client_addresses_.end()) metadata.emplace_back("leader_address", address->second);
  const std::string where =
      address == client_addresses_.end() ? "" : absl::StrCat(", at ", address->second);
  if (leader == node_id_) {
    return ErrorStatus(grpc::StatusCode::UNAVAILABLE, v1::NOT_LEADER,
                       absl::StrCat("node ", node_id_,
                                    " leads but cannot serve this call yet (it is catching up "
                                    "after its election, or could not confirm that it still "
                                    "leads); nothing was applied, retry"),
                       std::move(metadata), kNoLeaderRetryDelay);
  }
  return ErrorStatus(grpc::StatusCode::UNAVAILABLE, v1::NOT_LEADER,
                     absl::StrCat("node ", node_id_, " is not the leader; node ", leader, " leads",
                                  where, ". Nothing was applied: call the leader"),
                     std::move(metadata));
}

}  // namespace ledger
