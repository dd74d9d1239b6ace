// Test helper: a LedgerServer started in-process on an ephemeral loopback port, with a real gRPC
// channel and stub to it.
#ifndef LEDGER_TESTS_SERVER_TEST_SERVER_H_
#define LEDGER_TESTS_SERVER_TEST_SERVER_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ledger/v1/ledger.grpc.pb.h"
#include "server/ledger_server.h"

namespace ledger::testing_util {

inline ServerOptions LoopbackOptions() {
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.router.num_shards = 2;
  options.shutdown_grace = absl::Seconds(5);
  // Memory only, as most in-process tests are about the RPCs, not the disk; the durability tests
  // set a data directory of their own.
  options.storage.durability = storage::Durability::kNone;
  return options;
}

// Owns a started server; shuts it down (if the test did not) when destroyed.
class TestServer {
 public:
  explicit TestServer(const ServerOptions& options = LoopbackOptions(),
                      const ServerTestHooks& hooks = {}) {
    absl::StatusOr<std::unique_ptr<LedgerServer>> server = LedgerServer::Start(options, hooks);
    EXPECT_TRUE(server.ok()) << server.status();
    if (server.ok()) server_ = *std::move(server);
  }
  ~TestServer() {
    if (server_ != nullptr) server_->Shutdown();
  }

  LedgerServer& server() { return *server_; }
  std::string target() const { return absl::StrCat("127.0.0.1:", server_->port()); }

  std::shared_ptr<grpc::Channel> NewChannel() const {
    // A channel argument that differs per channel keeps gRPC from sharing one connection.
    grpc::ChannelArguments arguments;
    arguments.SetInt("ledger.test.channel_id", next_channel_id_++);
    return grpc::CreateCustomChannel(target(), grpc::InsecureChannelCredentials(), arguments);
  }
  std::unique_ptr<v1::Ledger::Stub> NewStub() const { return v1::Ledger::NewStub(NewChannel()); }

 private:
  std::unique_ptr<LedgerServer> server_;
  mutable int next_channel_id_ = 0;
};

// A context with a deadline, so that a broken server fails a test instead of hanging it.
inline std::unique_ptr<grpc::ClientContext> ContextWithDeadline(
    std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + timeout);
  return context;
}

struct CallResult {
  grpc::Status status;
  int64_t balance = 0;
};

inline CallResult Deposit(v1::Ledger::Stub& stub, const std::string& account_id, int64_t amount,
                          const std::string& request_id = "") {
  v1::DepositRequest request;
  request.set_account_id(account_id);
  request.set_amount(amount);
  request.set_request_id(request_id);
  v1::DepositResponse response;
  grpc::Status status = stub.Deposit(ContextWithDeadline().get(), request, &response);
  return {status, response.balance()};
}

inline CallResult Withdraw(v1::Ledger::Stub& stub, const std::string& account_id, int64_t amount,
                           const std::string& request_id = "") {
  v1::WithdrawRequest request;
  request.set_account_id(account_id);
  request.set_amount(amount);
  request.set_request_id(request_id);
  v1::WithdrawResponse response;
  grpc::Status status = stub.Withdraw(ContextWithDeadline().get(), request, &response);
  return {status, response.balance()};
}

inline CallResult Balance(v1::Ledger::Stub& stub, const std::string& account_id) {
  v1::BalanceRequest request;
  request.set_account_id(account_id);
  v1::BalanceResponse response;
  grpc::Status status = stub.Balance(ContextWithDeadline().get(), request, &response);
  return {status, response.balance()};
}

// The balance of `account_id`; a failed call fails the test (and reads as 0).
inline int64_t BalanceOf(v1::Ledger::Stub& stub, const std::string& account_id) {
  const CallResult result = Balance(stub, account_id);
  EXPECT_TRUE(result.status.ok()) << account_id << ": " << result.status.error_message();
  return result.balance;
}

// Options for a server on loopback with `shards` shards that syncs every write to `data_dir`.
inline ServerOptions DurableOptions(const std::string& data_dir, int32_t shards = 2) {
  ServerOptions options = LoopbackOptions();
  options.router.num_shards = shards;
  options.storage.durability = storage::Durability::kSync;
  options.storage.data_dir = data_dir;
  return options;
}

struct HistoryResult {
  grpc::Status status;
  v1::HistoryResponse response;
};

inline HistoryResult History(v1::Ledger::Stub& stub, const std::string& account_id,
                             int32_t page_size = 0, const std::string& page_token = "") {
  v1::HistoryRequest request;
  request.set_account_id(account_id);
  request.set_page_size(page_size);
  request.set_page_token(page_token);
  HistoryResult result;
  result.status = stub.History(ContextWithDeadline().get(), request, &result.response);
  return result;
}

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_SERVER_TEST_SERVER_H_
