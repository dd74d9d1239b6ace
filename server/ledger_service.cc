#include "server/ledger_service.h"

#include <utility>

#include "server/status_mapping.h"
#include "shard/message.h"

namespace ledger {
namespace {

// One call in flight at a shard. Created by the gRPC thread that admitted the call; from then on
// used only by the shard thread, which calls CallerGone and then Complete exactly once.
// Every call ends here, exactly once: counted by its final code, then finished.
void FinishCall(grpc::ServerUnaryReactor& reactor, LedgerMetrics& metrics, Op method,
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
    FinishCall(*reactor_, *metrics_, facts_.op, ToGrpcStatus(reply.outcome, reply.balance, facts_));
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

Outcome ValidateRequest(Op op, const std::string& account_id, int64_t amount) {
  if (Outcome outcome = ValidateAccountId(account_id); outcome != Outcome::kOk) return outcome;
  if (op == Op::kBalance) return Outcome::kOk;
  return ValidateAmount(amount);
}

}  // namespace

LedgerService::LedgerService(Router* router, LedgerMetrics* metrics, int64_t overdraft_limit)
    : router_(router), metrics_(metrics), overdraft_limit_(overdraft_limit) {}

grpc::ServerUnaryReactor* LedgerService::Deposit(grpc::CallbackServerContext* context,
                                                 const v1::DepositRequest* request,
                                                 v1::DepositResponse* response) {
  return Submit(context, Op::kDeposit, request->account_id(), request->amount(), response);
}

grpc::ServerUnaryReactor* LedgerService::Withdraw(grpc::CallbackServerContext* context,
                                                  const v1::WithdrawRequest* request,
                                                  v1::WithdrawResponse* response) {
  return Submit(context, Op::kWithdraw, request->account_id(), request->amount(), response);
}

grpc::ServerUnaryReactor* LedgerService::Balance(grpc::CallbackServerContext* context,
                                                 const v1::BalanceRequest* request,
                                                 v1::BalanceResponse* response) {
  return Submit(context, Op::kBalance, request->account_id(), 0, response);
}

template <typename Response>
grpc::ServerUnaryReactor* LedgerService::Submit(grpc::CallbackServerContext* context, Op op,
                                                const std::string& account_id, int64_t amount,
                                                Response* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  CallFacts facts{
      .op = op, .account_id = account_id, .amount = amount, .overdraft_limit = overdraft_limit_};
  if (Outcome invalid = ValidateRequest(op, account_id, amount); invalid != Outcome::kOk) {
    FinishCall(*reactor, *metrics_, op, ToGrpcStatus(invalid, 0, facts));  // Nothing queued.
    return reactor;
  }
  facts.shard = router_->ShardFor(account_id);
  facts.mailbox_capacity = router_->shard(facts.shard).mailbox_capacity();
  auto* call = new PendingCall<Response>(context, reactor, response, metrics_, facts);
  // The request (and so account_id) lives until the reactor finishes, which the view relies on.
  Message message{
      .op = op, .amount = amount, .account_id = account_id, .completion = call, .enqueued_at = {}};
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
