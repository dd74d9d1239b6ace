// Defines `Leadership`: whether a cluster replica's front end serves ledger calls, and the answer
// it gives when it does not. A replica serves only while it leads the cluster and has loaded its
// shards from everything committed before its term (LedgerServer::FollowLeadership decides
// that); every ledger call it gets otherwise is refused UNAVAILABLE with reason NOT_LEADER, whose
// metadata names the leader's gRPC address, so that a client calls that one instead.
#ifndef LEDGER_SERVER_LEADERSHIP_H_
#define LEDGER_SERVER_LEADERSHIP_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

#include "grpcpp/support/status.h"
#include "storage/ledger_storage.h"

namespace ledger {

// Thread-safe.
class Leadership {
 public:
  // `client_addresses`: each member's id to the address its clients call it at (--peer_clients);
  // a member missing from it is named by id only. `store` (not owned) says who leads.
  Leadership(uint64_t node_id, std::map<uint64_t, std::string> client_addresses,
             const storage::LedgerStorage* store);

  bool serving() const { return serving_.load(std::memory_order_acquire); }
  void set_serving(bool serving) { serving_.store(serving, std::memory_order_release); }
  uint64_t node_id() const { return node_id_; }

  // UNAVAILABLE, NOT_LEADER: who leads now, if anyone is known to.
  grpc::Status Refusal() const;

 private:
  const uint64_t node_id_;
  const std::map<uint64_t, std::string> client_addresses_;
  const storage::LedgerStorage* const store_;
  std::atomic<bool> serving_{false};
};

}  // namespace ledger

#endif  // LEDGER_SERVER_LEADERSHIP_H_
