// Defines `LedgerService`, the gRPC front end of `ledger.v1.Ledger` on the callback API: it
// admits each call (or refuses it at once, beyond the server's bound on calls in flight),
// validates it, routes it to the shard that owns the account and returns at once; the shard's
// reply finishes the call.
#ifndef LEDGER_SERVER_LEDGER_SERVICE_H_
#define LEDGER_SERVER_LEDGER_SERVICE_H_

#include <cstdint>
#include <string>

#include "grpcpp/grpcpp.h"
#include "ledger/v1/ledger.grpc.pb.h"
#include "metrics/ledger_metrics.h"
#include "server/call_answer.h"
#include "server/client_identity.h"
#include "server/leadership.h"
#include "server/read_barrier.h"
#include "server/watch_feed.h"
#include "shard/admission_control.h"
#include "shard/ledger_rules.h"
#include "shard/router.h"
#include "storage/ledger_storage.h"

namespace ledger {

// Every method of ledger.v1.Ledger on the callback API, taking the request's raw bytes: the
// service parses them itself, so that bytes that are not a valid request (truncated, or a string
// that is not UTF-8) get INVALID_ARGUMENT with a message, where gRPC's own parse would answer
// with no message at all.
using RawLedgerService = v1::Ledger::WithRawCallbackMethod_Deposit<
    v1::Ledger::WithRawCallbackMethod_Withdraw<v1::Ledger::WithRawCallbackMethod_Balance<
        v1::Ledger::WithRawCallbackMethod_History<v1::Ledger::WithRawCallbackMethod_Transfer<
            v1::Ledger::WithRawCallbackMethod_GetTransfer<v1::Ledger::WithRawCallbackMethod_Apply<
                v1::Ledger::WithRawCallbackMethod_Watch<v1::Ledger::Service>>>>>>>>;

struct ServiceOptions {
  // Only words messages: the shards apply the limit.
  int64_t overdraft_limit = 0;
  // Refuse a Deposit or Withdraw without a request_id (INVALID_ARGUMENT), so that every write
  // whose outcome is unknown can be retried safely.
  bool require_request_id = false;
  // Who a client is, without a client certificate, for its share of --max_in_flight.
  FairShareBy fair_share_by = FairShareBy::kAddress;
  // A cluster replica: ledger calls are served only while this says so (not owned; null on a
  // single node).
  const Leadership* leadership = nullptr;
  // With `leadership`: reads wait for it, so that a deposed leader serves none (not owned).
  ReadBarrier* read_barrier = nullptr;
  // Serves Watch (not owned; must outlive the service).
  WatchFeed* watch_feed = nullptr;
};

// Thread-safe: gRPC calls each method from its callback threads. No method blocks: a call is
// either finished at once (over the in-flight limit, bad input, shed, shutting down) or handed to
// a shard.
class LedgerService final : public RawLedgerService {
 public:
  // `router`, `admission`, `metrics` and `store` are not owned and must outlive the service;
  // `store` is null when the server keeps no journal (--durability=none).
  LedgerService(Router* router, AdmissionControl* admission, LedgerMetrics* metrics,
                storage::LedgerStorage* store, const ServiceOptions& options);

  grpc::ServerUnaryReactor* Deposit(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Withdraw(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Balance(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  // Reads the journal from the store on the calling gRPC thread: it is already on disk and the
  // store is thread-safe, so History never queues behind a shard's writes.
  grpc::ServerUnaryReactor* History(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;

  // Hands the transfer to the router's TransferCoordinator, which answers once it is final.
  grpc::ServerUnaryReactor* Transfer(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  // Reads the transfer's record from the store on the calling gRPC thread, as History does.
  grpc::ServerUnaryReactor* GetTransfer(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  // Many operations in one call: see ApplyCall.
  grpc::ServerUnaryReactor* Apply(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  // A stream of committed operations, served by the WatchFeed (not by the shards, and outside
  // --max_in_flight: it has bounds of its own).
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Watch(grpc::CallbackServerContext* context,
                                                    const grpc::ByteBuffer* request) override;

 private:
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* Submit(grpc::CallbackServerContext* context, Op op,
                                   const grpc::ByteBuffer& request_bytes,
                                   grpc::ByteBuffer* response_bytes);
  // Hands an admitted, valid account call to its shard, or answers it when the shard refuses.
  template <typename Call>
  void SendToShard(Call& call, Op op);
  // The first thing every handler does: on a cluster replica that does not serve (Leadership),
  // refuses the call NOT_LEADER and returns its reactor; else null.
  grpc::ServerUnaryReactor* RefuseUnlessLeading(grpc::CallbackServerContext* context,
                                                RpcMethod method);
  // The second: admits the call for the server and its client.
  AdmissionControl::Admission Admit(const grpc::CallbackServerContext& context);
  // Answers a call that was not admitted (the in-flight limit, or its client's fair share):
  // RESOURCE_EXHAUSTED with the reason and the pushback, and nothing of the request parsed or
  // copied.
  grpc::ServerUnaryReactor* RefuseUnadmitted(grpc::CallbackServerContext* context, RpcMethod method,
                                             const AdmissionControl::Admission& admission);
  grpc::Status ReadHistory(const v1::HistoryRequest& request, v1::HistoryResponse& response);
  grpc::Status ReadTransfer(const v1::GetTransferRequest& request,
                            v1::GetTransferResponse& response);

  Router* const router_;
  AdmissionControl* const admission_;
  LedgerMetrics* const metrics_;
  storage::LedgerStorage* const store_;
  const ServiceOptions options_;
  // The words of every refusal at --max_in_flight, built once.
  const std::string over_limit_message_;
};

}  // namespace ledger

#endif  // LEDGER_SERVER_LEDGER_SERVICE_H_
