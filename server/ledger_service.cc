#include "server/ledger_service.h"

#include <utility>

#include "server/status_mapping.h"
#include "shard/message.h"

namespace ledger {
namespace {

// One call in flight at a shard. Created by the gRPC thread that admitted the call; from then on
// used only by the shard thread, which calls CallerGone and then Complete exactly once.
template <typename Response>
class PendingCall final : public Completion {
 public:
  PendingCall(grpc::CallbackServerContext* context, grpc::ServerUnaryReactor* reactor,
              Response* response, const CallFacts& facts)
      : context_(context), reactor_(reactor), response_(response), facts_(facts) {}

  bool CallerGone() const override { return context_->IsCancelled(); }

  void Complete(const Reply& reply) override {
    if (reply.outcome == Outcome::kOk) response_->set_balance(reply.balance);
    reactor_->Finish(ToGrpcStatus(reply.outcome, reply.balance, facts_));
    delete this;
  }

 private:
  ~PendingCall() = default;

  grpc::CallbackServerContext* const context_;
  grpc::ServerUnaryReactor* const reactor_;
  Response* const response_;
  const CallFacts facts_;
};

Outcome ValidateRequest(Op op, const std::string& account_id, int64_t amount) {
  if (Outcome outcome = ValidateAccountId(account_id); outcome != Outcome::kOk) return outcome;
  if (op == Op::kBalance) return Outcome::kOk;
  return ValidateAmount(amount);
}

}  // namespace

LedgerService::LedgerService(Router* router, int64_t overdraft_limit)
    : router_(router), overdraft_limit_(overdraft_limit) {}

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
    reactor->Finish(ToGrpcStatus(invalid, 0, facts));  // Nothing was queued.
    return reactor;
  }
  facts.shard = router_->ShardFor(account_id);
  facts.mailbox_capacity = router_->shard(facts.shard).mailbox_capacity();
  auto* call = new PendingCall<Response>(context, reactor, response, facts);
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
