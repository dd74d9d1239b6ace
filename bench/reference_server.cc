// ledger-reference-server: two reference implementations of ledger.v1.Ledger to measure ledgerd
// against, end to end, on the same gRPC callback API.
//   --mode=instant  answers every call at once with no state: the ceiling gRPC allows here.
//   --mode=mutex    applies the same ledger rules under one std::mutex on the gRPC thread: what
//                   a user might write instead of shards.
// Not a product: no shedding, no metrics, no graceful drain beyond gRPC's own.
#include <signal.h>

#include <cstdint>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "grpcpp/grpcpp.h"
#include "ledger/v1/ledger.grpc.pb.h"
#include "server/status_mapping.h"
#include "shard/ledger_rules.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50061", "host:port; port 0 picks a free one");
ABSL_FLAG(std::string, mode, "instant", "instant or mutex");
ABSL_FLAG(int64_t, overdraft_limit, 0, "mutex mode: as ledgerd's --overdraft_limit");

namespace ledger {
namespace {

class ReferenceService final : public v1::Ledger::CallbackService {
 public:
  ReferenceService(bool apply_rules, int64_t overdraft_limit)
      : apply_rules_(apply_rules), policy_{overdraft_limit} {}

  grpc::ServerUnaryReactor* Deposit(grpc::CallbackServerContext* context,
                                    const v1::DepositRequest* request,
                                    v1::DepositResponse* response) override {
    return Answer(context, Op::kDeposit, request->account_id(), request->amount(), response);
  }
  grpc::ServerUnaryReactor* Withdraw(grpc::CallbackServerContext* context,
                                     const v1::WithdrawRequest* request,
                                     v1::WithdrawResponse* response) override {
    return Answer(context, Op::kWithdraw, request->account_id(), request->amount(), response);
  }
  grpc::ServerUnaryReactor* Balance(grpc::CallbackServerContext* context,
                                    const v1::BalanceRequest* request,
                                    v1::BalanceResponse* response) override {
    return Answer(context, Op::kBalance, request->account_id(), 0, response);
  }

 private:
  template <typename Response>
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, Op op,
                                   const std::string& account_id, int64_t amount,
                                   Response* response) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (!apply_rules_) {
      response->set_balance(amount);
      reactor->Finish(grpc::Status::OK);
      return reactor;
    }
    Outcome outcome = ValidateAccountId(account_id);
    if (outcome == Outcome::kOk && op != Op::kBalance) outcome = ValidateAmount(amount);
    int64_t balance = 0;
    if (outcome == Outcome::kOk) {
      std::lock_guard<std::mutex> lock(mu_);
      auto account = balances_.find(account_id);
      const bool exists = account != balances_.end();
      const Decision decision = ApplyOperation(
          op, exists ? std::optional<int64_t>(account->second) : std::nullopt, amount, policy_);
      outcome = decision.outcome;
      balance = decision.balance;
      if (outcome == Outcome::kOk && op != Op::kBalance) balances_[account_id] = balance;
    }
    if (outcome == Outcome::kOk) response->set_balance(balance);
    reactor->Finish(ToGrpcStatus(outcome, balance,
                                 CallFacts{.op = op,
                                           .account_id = account_id,
                                           .amount = amount,
                                           .shard = 0,
                                           .mailbox_capacity = 0,
                                           .overdraft_limit = policy_.overdraft_limit,
                                           .request_id = {}}));
    return reactor;
  }

  const bool apply_rules_;
  const LedgerPolicy policy_;
  std::mutex mu_;
  absl::flat_hash_map<std::string, int64_t> balances_;
};

}  // namespace
}  // namespace ledger

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("a reference ledger.v1.Ledger server for benchmarks");
  absl::ParseCommandLine(argc, argv);
  // Blocked before gRPC starts its threads, so that only sigwait below sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode != "instant" && mode != "mutex") {
    std::cerr << "ledger-reference-server: --mode must be instant or mutex\n";
    return 2;
  }
  ledger::ReferenceService service(mode == "mutex", absl::GetFlag(FLAGS_overdraft_limit));
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen), grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::cerr << "ledger-reference-server: cannot listen on " << absl::GetFlag(FLAGS_listen)
              << "\n";
    return 1;
  }
  std::cout << "ledger-reference-server (" << mode << "): listening on port " << port << std::endl;
  int received = 0;
  sigwait(&signals, &received);
  server->Shutdown();
  return 0;
}
