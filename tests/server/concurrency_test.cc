// The race the actor design exists to remove, through the real gRPC server.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/server/test_server.h"

namespace ledger {
namespace {

using testing_util::Balance;
using testing_util::Deposit;
using testing_util::LoopbackOptions;
using testing_util::TestServer;

// Counts asynchronous replies and lets the test wait for all of them.
class ReplyCounter {
 public:
  void Add() {
    std::lock_guard<std::mutex> lock(mu_);
    ++replies_;
    cv_.notify_all();
  }
  void WaitFor(int expected) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return replies_ == expected; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int replies_ = 0;
};

TEST(ConcurrencyTest, TenThousandConcurrentDepositsOfOneAllLand) {
  constexpr int kCalls = 10'000;
  ServerOptions options = LoopbackOptions();
  options.router.shard.mailbox_capacity = 16384;  // Large enough that nothing is shed.
  TestServer server(options);
  auto stub = server.NewStub();
  v1::DepositRequest request;
  request.set_account_id("hot");
  request.set_amount(1);
  std::vector<grpc::ClientContext> contexts(kCalls);
  std::vector<v1::DepositResponse> responses(kCalls);
  std::atomic<int> ok{0};
  ReplyCounter replies;
  for (int i = 0; i < kCalls; ++i) {
    contexts[i].set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    stub->async()->Deposit(&contexts[i], &request, &responses[i], [&](const grpc::Status& status) {
      if (status.ok()) ok.fetch_add(1);
      replies.Add();
    });
  }
  replies.WaitFor(kCalls);
  EXPECT_EQ(ok.load(), kCalls);
  EXPECT_EQ(Balance(*stub, "hot").balance, kCalls);
}

TEST(ConcurrencyTest, EightClientThreadsOfFiveThousandDepositsLandExactly) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 5000;
  TestServer server;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      auto stub = server.NewStub();
      for (int i = 0; i < kPerThread; ++i) {
        if (!Deposit(*stub, "shared", 1).status.ok()) failures.fetch_add(1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  auto stub = server.NewStub();
  EXPECT_EQ(Balance(*stub, "shared").balance, kThreads * kPerThread);
}

TEST(ConcurrencyTest, OverloadShedsFastAndNothingShedIsApplied) {
  constexpr int kBurst = 200;
  constexpr auto kHandlerDelay = std::chrono::milliseconds(250);
  ServerOptions options = LoopbackOptions();
  options.router.shard.mailbox_capacity = 4;
  options.router.shard.inline_execution = false;
  options.router.shard.debug_handler_delay = absl::FromChrono(kHandlerDelay);
  TestServer server(options);
  std::shared_ptr<grpc::Channel> channel = server.NewChannel();
  // Connect first, so that no latency below includes the connection set-up.
  ASSERT_TRUE(
      channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10)));
  auto stub = v1::Ledger::NewStub(channel);
  std::vector<v1::DepositRequest> requests(kBurst);
  std::vector<v1::DepositResponse> responses(kBurst);
  std::vector<grpc::ClientContext> contexts(kBurst);
  std::vector<grpc::Status> statuses(kBurst);
  std::vector<std::chrono::steady_clock::duration> latencies(kBurst);
  ReplyCounter replies;
  for (int i = 0; i < kBurst; ++i) {
    requests[i].set_account_id("burst");
    requests[i].set_amount(i + 1);  // Distinct amounts: the final sum names what was applied.
    contexts[i].set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    const auto sent = std::chrono::steady_clock::now();
    stub->async()->Deposit(&contexts[i], &requests[i], &responses[i],
                           [&, i, sent](grpc::Status status) {
                             latencies[i] = std::chrono::steady_clock::now() - sent;
                             statuses[i] = std::move(status);
                             replies.Add();
                           });
  }
  replies.WaitFor(kBurst);
  int64_t acknowledged_sum = 0;
  int ok = 0;
  int shed = 0;
  for (int i = 0; i < kBurst; ++i) {
    if (statuses[i].ok()) {
      ++ok;
      acknowledged_sum += i + 1;
    } else {
      ASSERT_EQ(statuses[i].error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
          << statuses[i].error_message();
      ++shed;
      // Shed at admission: sooner than the first handler, which every accepted call waits
      // behind, could have finished.
      EXPECT_LT(latencies[i], kHandlerDelay) << "call " << i;
    }
  }
  EXPECT_GT(shed, 0);
  EXPECT_GT(ok, 0);
  EXPECT_EQ(ok + shed, kBurst);
  EXPECT_EQ(Balance(*stub, "burst").balance, acknowledged_sum);
}

}  // namespace
}  // namespace ledger
