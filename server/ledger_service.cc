#include "server/ledger_service.h"

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"
#include "server/status_mapping.h"
#include "shard/message.h"

namespace ledger {
namespace {

// One call in flight at a shard. Created by the gRPC thread that admitted the call; from then on
// used only by the shard thread, which calls CallerGone and then Complete exactly once.
// Every call ends here, exactly once: counted by its final code, then finished.
void FinishCall(grpc::ServerUnaryReactor& reactor, LedgerMetrics& metrics, RpcMethod method,
                const grpc::Status& status) {
  metrics.RecordRequest(method, static_cast<int>(status.error_code()));
  reactor.Finish(status);
}

template <typename Response>
class PendingCall final : public Completion {
 public:
  PendingCall(grpc::CallbackServerContext* context, grpc::ServerUnaryReactor* reactor,
              Response* response, LedgerMetrics* metrics, const CallFacts& facts)
      : context_(context),
        reactor_(reactor),
        response_(response),
        metrics_(metrics),
        facts_(facts) {}

  bool CallerGone() const override { return context_->IsCancelled(); }

  void Complete(const Reply& reply) override {
    if (reply.outcome == Outcome::kOk) response_->set_balance(reply.balance);
    FinishCall(*reactor_, *metrics_, MethodOf(facts_.op), ToGrpcStatus(reply, facts_));
    delete this;
  }

 private:
  ~PendingCall() = default;

  grpc::CallbackServerContext* const context_;
  grpc::ServerUnaryReactor* const reactor_;
  Response* const response_;
  LedgerMetrics* const metrics_;
  const CallFacts facts_;
};

Outcome ValidateRequest(Op op, const std::string& account_id, int64_t amount,
                        const std::string& request_id) {
  if (Outcome outcome = ValidateAccountId(account_id); outcome != Outcome::kOk) return outcome;
  if (op == Op::kBalance) return Outcome::kOk;
  if (Outcome outcome = ValidateAmount(amount); outcome != Outcome::kOk) return outcome;
  return ValidateRequestId(request_id);
}

constexpr int32_t kDefaultHistoryPageSize = 50;
constexpr int32_t kMaxHistoryPageSize = 1000;

v1::Operation ToProto(Op op) {
  return op == Op::kWithdraw ? v1::OPERATION_WITHDRAW : v1::OPERATION_DEPOSIT;
}

}  // namespace

LedgerService::LedgerService(Router* router, LedgerMetrics* metrics, int64_t overdraft_limit,
                             storage::RocksDbStore* store)
    : router_(router), metrics_(metrics), overdraft_limit_(overdraft_limit), store_(store) {}

grpc::ServerUnaryReactor* LedgerService::Deposit(grpc::CallbackServerContext* context,
                                                 const v1::DepositRequest* request,
                                                 v1::DepositResponse* response) {
  return Submit(context, Op::kDeposit, request->account_id(), request->amount(),
                request->request_id(), response);
}

grpc::ServerUnaryReactor* LedgerService::Withdraw(grpc::CallbackServerContext* context,
                                                  const v1::WithdrawRequest* request,
                                                  v1::WithdrawResponse* response) {
  return Submit(context, Op::kWithdraw, request->account_id(), request->amount(),
                request->request_id(), response);
}

grpc::ServerUnaryReactor* LedgerService::Balance(grpc::CallbackServerContext* context,
                                                 const v1::BalanceRequest* request,
                                                 v1::BalanceResponse* response) {
  static const std::string kNoRequestId;
  return Submit(context, Op::kBalance, request->account_id(), 0, kNoRequestId, response);
}

grpc::ServerUnaryReactor* LedgerService::History(grpc::CallbackServerContext* context,
                                                 const v1::HistoryRequest* request,
                                                 v1::HistoryResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  FinishCall(*reactor, *metrics_, RpcMethod::kHistory, ReadHistory(*request, *response));
  return reactor;
}

grpc::Status LedgerService::ReadHistory(const v1::HistoryRequest& request,
                                        v1::HistoryResponse& response) {
  CallFacts facts;
  facts.account_id = request.account_id();
  if (ValidateAccountId(request.account_id()) != Outcome::kOk) {
    return ToGrpcStatus(Outcome::kInvalidAccountId, 0, facts);
  }
  if (request.page_size() < 0 || request.page_size() > kMaxHistoryPageSize) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("page_size must be 1 to ", kMaxHistoryPageSize, ", or 0 for ",
                         kDefaultHistoryPageSize, "; got ", request.page_size())};
  }
  uint64_t start = 0;
  if (!request.page_token().empty() &&
      (!absl::SimpleAtoi(request.page_token(), &start) || start == 0)) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("page_token \"", request.page_token(),
                         "\" is not one this server issued: pass a next_page_token from an "
                         "earlier History response, or leave it empty for the newest entries")};
  }
  if (store_ == nullptr) {
    return {grpc::StatusCode::FAILED_PRECONDITION,
            "this server keeps no history: it runs with --durability=none (memory only)"};
  }
  const int32_t page_size =
      request.page_size() == 0 ? kDefaultHistoryPageSize : request.page_size();
  absl::StatusOr<storage::HistoryPage> page =
      store_->ReadHistory(request.account_id(), start, page_size);
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
    if (!account->has_value()) return ToGrpcStatus(Outcome::kAccountNotFound, 0, facts);
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

template <typename Response>
grpc::ServerUnaryReactor* LedgerService::Submit(grpc::CallbackServerContext* context, Op op,
                                                const std::string& account_id, int64_t amount,
                                                const std::string& request_id, Response* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  CallFacts facts{.op = op,
                  .account_id = account_id,
                  .amount = amount,
                  .overdraft_limit = overdraft_limit_,
                  .request_id = request_id};
  if (Outcome invalid = ValidateRequest(op, account_id, amount, request_id);
      invalid != Outcome::kOk) {
    // Nothing queued.
    FinishCall(*reactor, *metrics_, MethodOf(op), ToGrpcStatus(invalid, 0, facts));
    return reactor;
  }
  facts.shard = router_->ShardFor(account_id);
  facts.mailbox_capacity = router_->shard(facts.shard).mailbox_capacity();
  auto* call = new PendingCall<Response>(context, reactor, response, metrics_, facts);
  // The request (and so account_id) lives until the reactor finishes, which the view relies on.
  Message message{.op = op,
                  .amount = amount,
                  .account_id = account_id,
                  .completion = call,
                  .enqueued_at = {},
                  .request_id = request_id};
  switch (router_->TrySend(facts.shard, std::move(message))) {
    case SendOutcome::kAccepted:
      break;  // The shard finishes the call; `call` may already be gone.
    case SendOutcome::kFull:
      call->Complete({Outcome::kMailboxFull, 0});
      break;
    case SendOutcome::kClosed:
      call->Complete({Outcome::kShuttingDown, 0});
      break;
  }
  return reactor;
}

}  // namespace ledger
