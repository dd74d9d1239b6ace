#include "server/ledger_service.h"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "google/protobuf/util/time_util.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/proto_buffer_writer.h"
#include "server/apply_call.h"
#include "server/call_answer.h"
#include "server/error_status.h"
#include "server/history_entry.h"
#include "server/request_validation.h"
#include "server/status_mapping.h"
#include "shard/message.h"

namespace ledger {
namespace {

// One call from its arrival to its answer: owns the parsed request (the shard's Message views its
// strings) for as long as the call lives. Created by the gRPC thread that admitted the call; once
// handed to a shard, used by one thread at a time: the thread deciding it calls CallerGone, and
// whoever answers it (that thread, or the commit pipeline's journal or completion thread) calls
// Complete exactly once. Finish and Complete delete it.
template <typename Request, typename Response>
class PendingCall final : public Completion {
 public:
  PendingCall(grpc::CallbackServerContext* context, grpc::ByteBuffer* response_bytes,
              LedgerMetrics* metrics, AdmissionControl* admission, ClientShares::Slot client,
              RpcMethod method)
      : context_(context),
        reactor_(context->DefaultReactor()),
        response_bytes_(response_bytes),
        metrics_(metrics),
        admission_(admission),
        client_(client),
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
      if constexpr (std::is_same_v<Response, v1::TransferResponse>) {
        response.set_from_balance(reply.balance);
        response.set_to_balance(reply.transfer().to_balance);
        response.set_replayed(reply.replayed);
      } else {
        response.set_balance(reply.balance);
        if constexpr (!std::is_same_v<Response, v1::BalanceResponse>) {
          response.set_replayed(reply.replayed);
        }
      }
      SerializeResponse(response, *response_bytes_);
    }
    Finish(ToGrpcStatus(reply, facts_));
  }

  void Finish(const grpc::Status& status) {
    FinishCall(*reactor_, *metrics_, *admission_, method_, handed_to_shard_ ? facts_.shard : -1,
               client_, status);
    delete this;
  }

 private:
  ~PendingCall() = default;

  grpc::CallbackServerContext* const context_;
  grpc::ServerUnaryReactor* const reactor_;
  grpc::ByteBuffer* const response_bytes_;
  LedgerMetrics* const metrics_;
  AdmissionControl* const admission_;
  const ClientShares::Slot client_;
  const RpcMethod method_;
  Request request_;
  CallFacts facts_;
  bool handed_to_shard_ = false;
};

v1::TransferState ToProto(TransferState state) {
  switch (state) {
    case TransferState::kPending:
      return v1::TRANSFER_STATE_PENDING;
    case TransferState::kCommitted:
      return v1::TRANSFER_STATE_COMMITTED;
    case TransferState::kRefused:
      return v1::TRANSFER_STATE_REFUSED;
  }
  return v1::TRANSFER_STATE_UNSPECIFIED;
}

// Answers a call its shard (or the transfer coordinator) did not take.
template <typename Call>
void AnswerUnsent(Call& call, SendOutcome sent, AdmissionControl& admission) {
  call.set_handed_to_shard(false);
  if (sent == SendOutcome::kFull) {
    admission.CountRefused(RefusalReason::kMailboxFull);
    CallFacts& facts = call.facts();
    facts.retry_delay = admission.PushbackAfterFullMailbox(facts.shard, facts.mailbox_capacity,
                                                           AdmissionControl::Clock::now());
    AddPushback(call.context(), *facts.retry_delay);
    call.Complete({Outcome::kMailboxFull, 0});
  } else {
    admission.CountRefused(RefusalReason::kShuttingDown);
    call.Complete({Outcome::kShuttingDown, 0});
  }
}

}  // namespace

LedgerService::LedgerService(Router* router, AdmissionControl* admission, LedgerMetrics* metrics,
                             storage::LedgerStorage* store, const ServiceOptions& options)
    : router_(router),
      admission_(admission),
      metrics_(metrics),
      store_(store),
      options_(options),
      over_limit_message_(absl::StrCat("ledgerd is at its limit of ", admission->max_in_flight(),
                                       " calls in flight (--max_in_flight); nothing was applied, "
                                       "retry after the ",
                                       kRetryPushbackKey, " delay")) {}

AdmissionControl::Admission LedgerService::Admit(const grpc::CallbackServerContext& context) {
  return admission_->TryAdmit(ClientKeyOf(context, options_.fair_share_by));
}

grpc::ServerUnaryReactor* LedgerService::RefuseUnlessLeading(grpc::CallbackServerContext* context,
                                                             RpcMethod method) {
  if (options_.leadership == nullptr || options_.leadership->serving()) return nullptr;
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  metrics_->RecordRequest(method, static_cast<int>(grpc::StatusCode::UNAVAILABLE));
  reactor->Finish(options_.leadership->Refusal());
  return reactor;
}

grpc::ServerUnaryReactor* LedgerService::RefuseUnadmitted(
    grpc::CallbackServerContext* context, RpcMethod method,
    const AdmissionControl::Admission& admission) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const AdmissionControl::Clock::time_point now = AdmissionControl::Clock::now();
  metrics_->RecordRequest(method, static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
  if (admission.refusal == RefusalReason::kFairShare) {
    const std::chrono::milliseconds pushback =
        admission_->PushbackAfterFairShare(admission.share, now);
    AddPushback(*context, pushback);
    reactor->Finish(
        ErrorStatus(grpc::StatusCode::RESOURCE_EXHAUSTED, v1::FAIR_SHARE,
                    absl::StrCat("this client already has ", admission.share.in_flight,
                                 " calls in flight, its fair share of --max_in_flight ",
                                 admission_->max_in_flight(), " among ", admission.share.clients,
                                 " clients; nothing was applied, retry after the ",
                                 kRetryPushbackKey, " delay"),
                    {{"in_flight", absl::StrCat(admission.share.in_flight)},
                     {"share", absl::StrCat(admission.share.share)},
                     {"clients", absl::StrCat(admission.share.clients)}},
                    pushback));
    return reactor;
  }
  const std::chrono::milliseconds pushback = admission_->PushbackAfterInFlightLimit(now);
  AddPushback(*context, pushback);
  reactor->Finish(
      ErrorStatus(grpc::StatusCode::RESOURCE_EXHAUSTED, v1::IN_FLIGHT_LIMIT, over_limit_message_,
                  {{"max_in_flight", absl::StrCat(admission_->max_in_flight())}}, pushback));
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
  if (grpc::ServerUnaryReactor* refused = RefuseUnlessLeading(context, RpcMethod::kHistory)) {
    return refused;
  }
  const AdmissionControl::Admission admission = Admit(*context);
  if (!admission.admitted) return RefuseUnadmitted(context, RpcMethod::kHistory, admission);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto serve = [this, request_bytes, response_bytes, reactor,
                slot = admission.slot](const absl::Status& confirmed) {
    v1::HistoryRequest request;
    grpc::Status status =
        confirmed.ok() ? ParseRequest(*request_bytes, request) : options_.leadership->Refusal();
    if (status.ok()) {
      v1::HistoryResponse response;
      status = ReadHistory(request, response);
      if (status.ok()) SerializeResponse(response, *response_bytes);
    }
    FinishCall(*reactor, *metrics_, *admission_, RpcMethod::kHistory, /*shard=*/-1, slot, status);
  };
  AfterReadBarrier(options_.read_barrier, std::move(serve));
  return reactor;
}

grpc::Status LedgerService::ReadHistory(const v1::HistoryRequest& request,
                                        v1::HistoryResponse& response) {
  HistoryQuery query;
  if (grpc::Status valid = ValidateHistoryRequest(request, query); !valid.ok()) return valid;
  if (store_ == nullptr) {
    return ErrorStatus(
        grpc::StatusCode::FAILED_PRECONDITION, v1::NOT_DURABLE,
        "this server keeps no history: it runs with --durability=none (memory only)");
  }
  absl::StatusOr<storage::HistoryPage> page =
      store_->ReadHistory(request.account_id(), query.start_sequence, query.page_size);
  if (!page.ok()) {
    return ErrorStatus(
        grpc::StatusCode::UNAVAILABLE, v1::STORAGE_READ_FAILED,
        absl::StrCat("storage failed reading the history: ", page.status().message()));
  }
  // An opened account has at least one entry, so only an empty page needs to ask whether the
  // account exists.
  if (page->entries.empty()) {
    absl::StatusOr<std::optional<AccountState>> account = store_->FindAccount(request.account_id());
    if (!account.ok()) {
      return ErrorStatus(
          grpc::StatusCode::UNAVAILABLE, v1::STORAGE_READ_FAILED,
          absl::StrCat("storage failed reading the history: ", account.status().message()));
    }
    if (!account->has_value()) {
      CallFacts facts;
      facts.account_id = request.account_id();
      return ToGrpcStatus(Outcome::kAccountNotFound, 0, facts);
    }
  }
  for (const JournalEntry& entry : page->entries) {
    ToHistoryEntry(entry, *response.add_entries());
  }
  if (page->next_sequence != 0) response.set_next_page_token(absl::StrCat(page->next_sequence));
  return grpc::Status::OK;
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* LedgerService::Submit(grpc::CallbackServerContext* context, Op op,
                                                const grpc::ByteBuffer& request_bytes,
                                                grpc::ByteBuffer* response_bytes) {
  if (grpc::ServerUnaryReactor* refused = RefuseUnlessLeading(context, MethodOf(op))) {
    return refused;
  }
  const AdmissionControl::Admission admission = Admit(*context);
  if (!admission.admitted) return RefuseUnadmitted(context, MethodOf(op), admission);
  auto* call = new PendingCall<Request, Response>(context, response_bytes, metrics_, admission_,
                                                  admission.slot, MethodOf(op));
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
  if (op == Op::kBalance && options_.read_barrier != nullptr) {
    options_.read_barrier->After([this, call, op](const absl::Status& confirmed) {
      if (!confirmed.ok()) {
        call->Finish(options_.leadership->Refusal());  // Nothing queued.
        return;
      }
      SendToShard(*call, op);
    });
    return reactor;
  }
  SendToShard(*call, op);
  return reactor;
}

template <typename Call>
void LedgerService::SendToShard(Call& call, Op op) {
  CallFacts& facts = call.facts();
  facts.shard = router_->ShardFor(facts.account_id);
  facts.mailbox_capacity = router_->shard(facts.shard).mailbox_capacity();
  Message message = MakeAccountCall(op, facts.account_id, facts.amount, facts.request_id, &call);
  call.set_handed_to_shard(true);
  const SendOutcome sent = router_->TrySend(facts.shard, std::move(message));
  // Accepted: the shard finishes the call, and `call` may already be gone.
  if (sent != SendOutcome::kAccepted) AnswerUnsent(call, sent, *admission_);
}

grpc::ServerUnaryReactor* LedgerService::Transfer(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request_bytes,
                                                  grpc::ByteBuffer* response_bytes) {
  if (grpc::ServerUnaryReactor* refused = RefuseUnlessLeading(context, RpcMethod::kTransfer)) {
    return refused;
  }
  const AdmissionControl::Admission admission = Admit(*context);
  if (!admission.admitted) return RefuseUnadmitted(context, RpcMethod::kTransfer, admission);
  auto* call = new PendingCall<v1::TransferRequest, v1::TransferResponse>(
      context, response_bytes, metrics_, admission_, admission.slot, RpcMethod::kTransfer);
  grpc::ServerUnaryReactor* reactor = call->reactor();
  CallFacts& facts = call->facts();
  facts.overdraft_limit = options_.overdraft_limit;
  grpc::Status valid = ParseRequest(*request_bytes, call->request());
  if (valid.ok()) valid = ValidateTransferRequest(call->request(), facts);
  if (!valid.ok()) {
    call->Finish(valid);  // Nothing queued.
    return reactor;
  }
  facts.shard = router_->ShardFor(facts.account_id);
  facts.mailbox_capacity = router_->shard(facts.shard).mailbox_capacity();
  call->set_handed_to_shard(true);
  const SendOutcome sent = router_->transfers().Submit(facts.request_id, facts.account_id,
                                                       facts.counterparty, facts.amount, call);
  if (sent != SendOutcome::kAccepted) AnswerUnsent(*call, sent, *admission_);
  return reactor;
}

grpc::ServerUnaryReactor* LedgerService::Apply(grpc::CallbackServerContext* context,
                                               const grpc::ByteBuffer* request_bytes,
                                               grpc::ByteBuffer* response_bytes) {
  if (grpc::ServerUnaryReactor* refused = RefuseUnlessLeading(context, RpcMethod::kApply)) {
    return refused;
  }
  const AdmissionControl::Admission admission = Admit(*context);
  if (!admission.admitted) return RefuseUnadmitted(context, RpcMethod::kApply, admission);
  return ApplyCall::Start(context, *request_bytes, response_bytes,
                          ApplyEnvironment{.router = router_,
                                           .admission = admission_,
                                           .client = admission.slot,
                                           .metrics = metrics_,
                                           .overdraft_limit = options_.overdraft_limit,
                                           .require_request_id = options_.require_request_id,
                                           .read_barrier = options_.read_barrier,
                                           .leadership = options_.leadership});
}

grpc::ServerUnaryReactor* LedgerService::GetTransfer(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request_bytes,
                                                     grpc::ByteBuffer* response_bytes) {
  if (grpc::ServerUnaryReactor* refused = RefuseUnlessLeading(context, RpcMethod::kGetTransfer)) {
    return refused;
  }
  const AdmissionControl::Admission admission = Admit(*context);
  if (!admission.admitted) return RefuseUnadmitted(context, RpcMethod::kGetTransfer, admission);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto serve = [this, request_bytes, response_bytes, reactor,
                slot = admission.slot](const absl::Status& confirmed) {
    v1::GetTransferRequest request;
    grpc::Status status =
        confirmed.ok() ? ParseRequest(*request_bytes, request) : options_.leadership->Refusal();
    if (status.ok()) {
      v1::GetTransferResponse response;
      status = ReadTransfer(request, response);
      if (status.ok()) SerializeResponse(response, *response_bytes);
    }
    FinishCall(*reactor, *metrics_, *admission_, RpcMethod::kGetTransfer, /*shard=*/-1, slot,
               status);
  };
  AfterReadBarrier(options_.read_barrier, std::move(serve));
  return reactor;
}

grpc::Status LedgerService::ReadTransfer(const v1::GetTransferRequest& request,
                                         v1::GetTransferResponse& response) {
  CallFacts facts;
  facts.op = Op::kTransfer;
  facts.request_id = request.transfer_id();
  if (ValidateTransferId(request.transfer_id()) != Outcome::kOk) {
    return ToGrpcStatus(Outcome::kInvalidTransferId, 0, facts);
  }
  if (store_ == nullptr) {
    return ErrorStatus(grpc::StatusCode::FAILED_PRECONDITION, v1::NOT_DURABLE,
                       "this server keeps no transfer records: it runs with --durability=none "
                       "(memory only)");
  }
  absl::StatusOr<std::optional<TransferRecord>> found = store_->ReadTransfer(request.transfer_id());
  if (!found.ok()) {
    return ErrorStatus(
        grpc::StatusCode::UNAVAILABLE, v1::STORAGE_READ_FAILED,
        absl::StrCat("storage failed reading the transfer: ", found.status().message()));
  }
  if (!found->has_value()) {
    return ErrorStatus(
        grpc::StatusCode::NOT_FOUND, v1::TRANSFER_NOT_FOUND,
        absl::StrCat("no transfer \"", request.transfer_id(),
                     "\" is recorded: it was never applied (a Transfer call still in flight may "
                     "yet record it; its answer, or a retry with the same transfer_id, says)"),
        {{"transfer_id", request.transfer_id()}});
  }
  const TransferRecord& record = **found;
  response.set_transfer_id(request.transfer_id());
  response.set_from_account_id(record.from);
  response.set_to_account_id(record.to);
  response.set_amount(record.amount);
  response.set_state(ToProto(record.state));
  response.set_from_balance(record.from_balance);
  if (record.state != TransferState::kPending) response.set_to_balance(record.to_balance);
  if (record.state == TransferState::kRefused) {
    facts.account_id = record.from;
    facts.counterparty = record.to;
    facts.amount = record.amount;
    facts.overdraft_limit = options_.overdraft_limit;
    const Reply refused{.outcome = record.outcome,
                        .balance = record.from_balance,
                        .detail = TransferReply{.to_balance = record.to_balance}};
    const grpc::Status refusal = ToPlainStatus(refused, facts);
    response.set_refusal_code(static_cast<int32_t>(refusal.error_code()));
    response.set_refusal_message(refusal.error_message());
    response.set_refusal_reason(ReasonFor(refused, facts));
  }
  *response.mutable_created_time() = ToTimestamp(record.created_at);
  if (record.credited_at != absl::InfinitePast()) {
    *response.mutable_credited_time() = ToTimestamp(record.credited_at);
  }
  if (record.finished_at != absl::InfinitePast()) {
    *response.mutable_finished_time() = ToTimestamp(record.finished_at);
  }
  return grpc::Status::OK;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* LedgerService::Watch(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return options_.watch_feed->Watch(context, *request);
}

}  // namespace ledger
