// Defines `ApplyCall`, one Apply call (many operations, one result each) from its admission to its
// answer: it validates each operation with the rules of its own RPC, splits the valid ones by
// shard, sends each shard its part as one message (accepted or refused whole), gathers one Reply
// per operation and answers the call once the last one is in, which is once every applied
// operation is durable. See docs/architecture.md, "Batch calls".
#ifndef LEDGER_SERVER_APPLY_CALL_H_
#define LEDGER_SERVER_APPLY_CALL_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "google/protobuf/arena.h"
#include "grpcpp/grpcpp.h"
#include "ledger/v1/ledger.pb.h"
#include "metrics/ledger_metrics.h"
#include "server/leadership.h"
#include "server/read_barrier.h"
#include "server/status_mapping.h"
#include "shard/admission_control.h"
#include "shard/message.h"
#include "shard/router.h"

namespace ledger {

// What an ApplyCall needs from the service. Not owned; must outlive every call.
struct ApplyEnvironment {
  Router* router = nullptr;
  AdmissionControl* admission = nullptr;
  // The admitted call's share of its client (AdmissionControl::Admission::slot).
  ClientShares::Slot client = nullptr;
  LedgerMetrics* metrics = nullptr;
  int64_t overdraft_limit = 0;
  bool require_request_id = false;
  // A cluster leader's: a call with a Balance waits for a barrier (server/read_barrier.h), and is
  // refused as `leadership` says when there is none. Both null on a single node.
  ReadBarrier* read_barrier = nullptr;
  const Leadership* leadership = nullptr;
};

// Thread contract: Start runs on the gRPC thread that admitted the call. Each operation's
// completion is then called once, by whichever thread answers it (a sender deciding inline, a
// shard thread, the commit pipeline, the transfer courier), possibly concurrently for operations
// of different shards; the thread that completes the last one answers the call and deletes it.
class ApplyCall {
 public:
  // Takes an admitted call: parses it, answers it at once when it is malformed (or too large), or
  // sends its parts. Returns the call's reactor.
  static grpc::ServerUnaryReactor* Start(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer& request_bytes,
                                         grpc::ByteBuffer* response_bytes,
                                         const ApplyEnvironment& environment);

 private:
  // One operation: what the front end knows of it (for its words), and the shard's answer.
  class Operation final : public Completion {
   public:
    bool CallerGone() const override { return call->context_->IsCancelled(); }
    void Complete(const Reply& answer) override {
      reply = answer;
      call->OperationDone();
    }

    ApplyCall* call = nullptr;
    CallFacts facts;
    Reply reply;
  };

  ApplyCall(grpc::CallbackServerContext* context, grpc::ByteBuffer* response_bytes,
            const ApplyEnvironment& environment);
  ~ApplyCall() = default;

  // Validates every operation, builds the parts and sends them.
  void Dispatch();
  // Builds operation `index`'s message (or, for a Transfer, has the coordinator build it); false
  // when the server no longer takes transfers.
  bool BuildMessage(int index, Message& message);
  // The part messages_[begin, end) that `shard` did not take: each of its operations is
  // answered kMailboxFull (or kShuttingDown), unapplied.
  void RefusePart(int32_t shard, size_t begin, size_t end, SendOutcome sent);
  void OperationDone() {
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) Answer();
  }
  // Writes every result, finishes the call and deletes it.
  void Answer();
  void Finish(const grpc::Status& status);

  grpc::CallbackServerContext* const context_;
  grpc::ServerUnaryReactor* const reactor_;
  grpc::ByteBuffer* const response_bytes_;
  const ApplyEnvironment environment_;
  // The request and the response live on one arena: a call of 8,192 operations would otherwise
  // make tens of thousands of small allocations.
  google::protobuf::Arena arena_;
  v1::ApplyRequest* const request_;
  std::unique_ptr<Operation[]> operations_;
  // The operations that failed validation, by index in increasing order, with their status: kept
  // apart from `operations_`, since most calls have none.
  std::vector<std::pair<int, grpc::Status>> invalid_;
  // The messages of every part, each shard's contiguous and in request order.
  std::vector<Message> messages_;
  // For each message, the index of its operation.
  std::vector<int> message_operation_;
  // Operations not yet answered, plus one that Dispatch holds until every part is sent.
  std::atomic<size_t> remaining_{1};
  // Some part was refused by a full mailbox: the call carries the pushback.
  std::chrono::milliseconds pushback_{0};
  bool refused_full_ = false;
};

}  // namespace ledger

#endif  // LEDGER_SERVER_APPLY_CALL_H_
