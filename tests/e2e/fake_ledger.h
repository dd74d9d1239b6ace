// Defines `FakeLedger`, a small in-process ledger.v1.Ledger for client tests: a correct
// in-memory ledger (balances, request_id replay, no overdraft) that sheds the first attempts of
// each call with RESOURCE_EXHAUSTED and a chosen grpc-retry-pushback-ms, so that a client's
// retries are tested without depending on the real server's overload behaviour.
#ifndef LEDGER_TESTS_E2E_FAKE_LEDGER_H_
#define LEDGER_TESTS_E2E_FAKE_LEDGER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "ledger/v1/ledger.grpc.pb.h"

namespace ledger::testing_util {

// Thread-safe (a sync service: gRPC calls it from its own threads).
class FakeLedger final : public v1::Ledger::Service {
 public:
  struct Shedding {
    // Attempts shed per call: a deposit or withdraw is the same call while its request_id is;
    // a balance read, while its account is. 0 sheds nothing.
    int attempts_shed = 0;
    // The grpc-retry-pushback-ms value sent with each shed; nullopt sends none.
    std::optional<std::string> pushback_ms = "1";
  };

  explicit FakeLedger(Shedding shedding) : shedding_(std::move(shedding)) {}

  // Listens on 127.0.0.1, a free port; returns "127.0.0.1:PORT".
  std::string Start() {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    return "127.0.0.1:" + std::to_string(port);
  }
  ~FakeLedger() override {
    if (server_ == nullptr) return;
    server_->Shutdown(std::chrono::system_clock::now());  // Cancels what is still in flight...
    server_->Wait();  // ... and returns once no handler runs, before the members go.
  }

  // The request_id of every deposit and withdraw attempt, in arrival order.
  std::vector<std::string> request_ids() const {
    absl::MutexLock lock(&mu_);
    return request_ids_;
  }
  // Every attempt of every method, shed ones included.
  int attempts() const {
    absl::MutexLock lock(&mu_);
    return attempts_;
  }

  grpc::Status Deposit(grpc::ServerContext* context, const v1::DepositRequest* request,
                       v1::DepositResponse* response) override {
    return Write(context, request->account_id(), request->amount(), request->request_id(),
                 response);
  }
  grpc::Status Withdraw(grpc::ServerContext* context, const v1::WithdrawRequest* request,
                        v1::WithdrawResponse* response) override {
    return Write(context, request->account_id(), -request->amount(), request->request_id(),
                 response);
  }
  grpc::Status Balance(grpc::ServerContext* context, const v1::BalanceRequest* request,
                       v1::BalanceResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++attempts_;
    if (Shed(context, "balance:" + request->account_id())) return ShedStatus();
    const auto found = balances_.find(request->account_id());
    if (found == balances_.end()) return {grpc::StatusCode::NOT_FOUND, "no such account"};
    response->set_balance(found->second);
    return grpc::Status::OK;
  }

 private:
  struct Recorded {
    grpc::StatusCode code;
    int64_t balance;
  };

  static grpc::Status ShedStatus() {
    return {grpc::StatusCode::RESOURCE_EXHAUSTED, "shed by the fake ledger; nothing was applied"};
  }

  bool Shed(grpc::ServerContext* context, const std::string& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (++attempts_of_[key] > shedding_.attempts_shed) return false;
    if (shedding_.pushback_ms.has_value()) {
      context->AddTrailingMetadata("grpc-retry-pushback-ms", *shedding_.pushback_ms);
    }
    return true;
  }

  // `delta` > 0 deposits, < 0 withdraws.
  template <typename Response>
  grpc::Status Write(grpc::ServerContext* context, const std::string& account, int64_t delta,
                     const std::string& request_id, Response* response) {
    absl::MutexLock lock(&mu_);
    ++attempts_;
    request_ids_.push_back(request_id);
    if (Shed(context, "write:" + request_id)) return ShedStatus();
    if (const auto done = recorded_.find(request_id); done != recorded_.end()) {
      response->set_balance(done->second.balance);
      response->set_replayed(true);
      return {done->second.code, done->second.code == grpc::StatusCode::OK ? "" : "replayed"};
    }
    int64_t& balance = balances_[account];
    if (balance + delta < 0) {
      recorded_[request_id] = {grpc::StatusCode::FAILED_PRECONDITION, balance};
      return {grpc::StatusCode::FAILED_PRECONDITION, "insufficient funds"};
    }
    balance += delta;
    recorded_[request_id] = {grpc::StatusCode::OK, balance};
    response->set_balance(balance);
    return grpc::Status::OK;
  }

  const Shedding shedding_;
  std::unique_ptr<grpc::Server> server_;
  mutable absl::Mutex mu_;
  std::map<std::string, int> attempts_of_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> balances_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Recorded> recorded_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> request_ids_ ABSL_GUARDED_BY(mu_);
  int attempts_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_E2E_FAKE_LEDGER_H_
