#include "server/ledger_service.h"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/proto_buffer_writer.h"
#include "server/request_validation.h"
#include "server/status_mapping.h"
#include "shard/check.h"
#include "shard/message.h"

namespace ledger {
namespace {

// Every admitted call ends here, exactly once: counted by its final code, released from the
// in-flight count (`shard`: the shard that answered it, -1 for none), then finished.
void FinishCall(grpc::ServerUnaryReactor& reactor, LedgerMetrics& metrics,
                AdmissionControl& admission, RpcMethod method, int32_t shard,
                const grpc::Status& status) {
  metrics.RecordRequest(method, static_cast<int>(status.error_code()));
  admission.Answered(shard);
  reactor.Finish(status);
}

// Tells the client when to retry: gRPC's pushback convention, in whole milliseconds.
void AddPushback(grpc::CallbackServerContext& context, std::chrono::milliseconds pushback) {
  context.AddTrailingMetadata(kRetryPushbackKey, std::to_string(pushback.count()));
}

// Serializes an OK call's response into the bytes gRPC sends.
template <typename Response>
void SerializeResponse(const Response& response, grpc::ByteBuffer& bytes) {
  bool own_buffer = false;
  grpc::Status serialized =
      grpc::SerializationTraits<Response>::Serialize(response, &bytes, &own_buffer);
  LEDGER_CHECK(serialized.ok());  // A message we built always serializes.
}

// One call from its arrival to its answer: owns the parsed request (the shard's Message views its
// strings) for as long as the call lives. Created by the gRPC thread that admitted the call; once
// handed to a shard, used by one thread at a time: the thread deciding it calls CallerGone, and
// whoever answers it (that thread, or the commit pipeline's journal or completion thread) calls
// Complete exactly once. Finish and Complete delete it.
template <typename Request, typename Response>
class PendingCall final : public Completion {
 public:
  PendingCall(grpc::CallbackServerContext* context, grpc::ByteBuffer* response_bytes,
              LedgerMetrics* metrics, AdmissionControl* admission, RpcMethod method)
      : context_(context),
        reactor_(context->DefaultReactor()),
        response_bytes_(response_bytes),
        metrics_(metrics),
        admission_(admission),
        method_(method) {}

  grpc::ServerUnaryReactor* reactor() const { return reactor_; }
  grpc::CallbackServerContext& context() const { return *context_; }
  Request& request() { return request_; }
  CallFacts& facts() { return facts_; }
  // Whether the shard took the call (and so answers it): only those count towards the shard's
  // drain rate. Set before the send, since an accepted call may be gone by its return.
  void set_handed_to_shard(bool handed) { handed_to_shard_ = handed; }

  bool CallerGone() const override { return context_->IsCancelled(); }

  void Complete(const Reply& reply) override {
    if (reply.outcome == Outcome::kOk) {
      Response response;
      response.set_balance(reply.balance);
      if constexpr (!std::is_same_v<Response, v1::BalanceResponse>) {
        response.set_replayed(reply.replayed);
      }
      SerializeResponse(response, *response_bytes_);
    }
    Finish(ToGrpcStatus(reply, facts_));
  }

  void Finish(const grpc::Status& status) {
    FinishCall(*reactor_, *metrics_, *admission_, method_, handed_to_shard_ ? facts_.shard : -1,
               status);
    delete this;
  }

 private:
  ~PendingCall() = default;

  grpc::CallbackServerContext* const context_;
  grpc::ServerUnaryReactor* const reactor_;
  grpc::ByteBuffer* const response_bytes_;
  LedgerMetrics* const metrics_;
  AdmissionControl* const admission_;
  const RpcMethod method_;
  Request request_;
  CallFacts facts_;
  bool handed_to_shard_ = false;
};

v1::Operation ToProto(Op op) {
  return op == Op::kWithdraw ? v1::OPERATION_WITHDRAW : v1::OPERATION_DEPOSIT;
}

}  // namespace

LedgerService::LedgerService(Router* router, AdmissionControl* admission, LedgerMetrics* metrics,
                             storage::RocksDbStore* store, const ServiceOptions& options)
    : router_(router),
      admission_(admission),
      metrics_(metrics),
      store_(store),
      options_(options),
      over_limit_(grpc::StatusCode::RESOURCE_EXHAUSTED,
                  absl::StrCat("ledgerd is at its limit of ", admission->max_in_flight(),
                               " calls in flight (--max_in_flight); nothing was applied, retry "
                               "after the ",
                               kRetryPushbackKey, " delay")) {}

grpc::ServerUnaryReactor* LedgerService::RefuseOverLimit(grpc::CallbackServerContext* context,
                                                         RpcMethod method) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  AddPushback(*context, admission_->PushbackAfterInFlightLimit(AdmissionControl::Clock::now()));
  metrics_->RecordRequest(method, static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
  reactor->Finish(over_limit_);
  return reactor;
}

grpc::ServerUnaryReactor* LedgerService::Deposit(grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) {
  return Submit<v1::DepositRequest, v1::DepositResponse>(context, Op::kDeposit, *request, response);
}

grpc::ServerUnaryReactor* LedgerService::Withdraw(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  return Submit<v1::WithdrawRequest, v1::WithdrawResponse>(context, Op::kWithdraw, *request,
                                                           response);
}

grpc::ServerUnaryReactor* LedgerService::Balance(grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) {
  return Submit<v1::BalanceRequest, v1::BalanceResponse>(context, Op::kBalance, *request, response);
}

grpc::ServerUnaryReactor* LedgerService::History(grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* request_bytes,
                                                 grpc::ByteBuffer* response_bytes) {
  if (!admission_->TryAdmit()) return RefuseOverLimit(context, RpcMethod::kHistory);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::HistoryRequest request;
  grpc::Status status = ParseRequest(*request_bytes, request);
  if (status.ok()) {
    v1::HistoryResponse response;
    status = ReadHistory(request, response);
    if (status.ok()) SerializeResponse(response, *response_bytes);
  }
  FinishCall(*reactor, *metrics_, *admission_, RpcMethod::kHistory, /*shard=*/-1, status);
  return reactor;
}

grpc::Status LedgerService::ReadHistory(const v1::HistoryRequest& request,
                                        v1::HistoryResponse& response) {
  HistoryQuery query;
  if (grpc::Status valid = ValidateHistoryRequest(request, query); !valid.ok()) return valid;
  if (store_ == nullptr) {
    return {grpc::StatusCode::FAILED_PRECONDITION,
            "this server keeps no history: it runs with --durability=none (memory only)"};
  }
  absl::StatusOr<storage::HistoryPage> page =
      store_->ReadHistory(request.account_id(), query.start_sequence, query.page_size);
  if (!page.ok()) {
    return {grpc::StatusCode::UNAVAILABLE,
            absl::StrCat("storage failed reading the history: ", page.status().message())};
  }
  // An opened account has at least one entry, so only an empty page needs to ask whether the
  // account exists.
  if (page->entries.empty()) {
    absl::StatusOr<std::optional<AccountState>> account = store_->FindAccount(request.account_id());
    if (!account.ok()) {
      return {grpc::StatusCode::UNAVAILABLE,
              absl::StrCat("storage failed reading the history: ", account.status().message())};
    }
    if (!account->has_value()) {
      CallFacts facts;
      facts.account_id = request.account_id();
      return ToGrpcStatus(Outcome::kAccountNotFound, 0, facts);
    }
  }
  for (const JournalEntry& entry : page->entries) {
    v1::HistoryEntry* out = response.add_entries();
    out->set_sequence(entry.sequence);
    out->set_operation(ToProto(entry.op));
    out->set_amount(entry.amount);
    out->set_balance_after(entry.balance_after);
    out->set_request_id(entry.request_id);
    *out->mutable_time() =
        google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(entry.time));
  }
  if (page->next_sequence != 0) response.set_next_page_token(absl::StrCat(page->next_sequence));
  return grpc::Status::OK;
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* LedgerService::Submit(grpc::CallbackServerContext* context, Op op,
                                                const grpc::ByteBuffer& request_bytes,
                                                grpc::ByteBuffer* response_bytes) {
  if (!admission_->TryAdmit()) return RefuseOverLimit(context, MethodOf(op));
  auto* call = new PendingCall<Request, Response>(context, response_bytes, metrics_, admission_,
                                                  MethodOf(op));
  grpc::ServerUnaryReactor* reactor = call->reactor();
  // From here on `call` may be gone once it is finished or handed to a shard; `reactor` lives
  // until gRPC is done with the call.
  CallFacts& facts = call->facts();
  facts.overdraft_limit = options_.overdraft_limit;
  if (grpc::Status valid =
          ParseAndValidate(request_bytes, op, options_.require_request_id, call->request(), facts);
      !valid.ok()) {
    call->Finish(valid);  // Nothing queued.
    return reactor;
  }
  facts.shard = router_->ShardFor(facts.account_id);
  facts.mailbox_capacity = router_->shard(facts.shard).mailbox_capacity();
  Message message{.op = op,
                  .amount = facts.amount,
                  .account_id = facts.account_id,
                  .completion = call,
                  .enqueued_at = {},
                  .request_id = facts.request_id};
  call->set_handed_to_shard(true);
  const SendOutcome sent = router_->TrySend(facts.shard, std::move(message));
  if (sent != SendOutcome::kAccepted) call->set_handed_to_shard(false);
  switch (sent) {
    case SendOutcome::kAccepted:
      break;  // The shard finishes the call; `call` may already be gone.
    case SendOutcome::kFull:
      admission_->CountRefused(RefusalReason::kMailboxFull);
      AddPushback(call->context(),
                  admission_->PushbackAfterFullMailbox(facts.shard, facts.mailbox_capacity,
                                                       AdmissionControl::Clock::now()));
      call->Complete({Outcome::kMailboxFull, 0});
      break;
    case SendOutcome::kClosed:
      admission_->CountRefused(RefusalReason::kShuttingDown);
      call->Complete({Outcome::kShuttingDown, 0});
      break;
  }
  return reactor;
}

}  // namespace ledger
