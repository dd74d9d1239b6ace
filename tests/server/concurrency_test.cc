// The race the actor design exists to remove, through the real gRPC server.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "gtest/gtest.h"
#include "tests/server/test_server.h"
#include "tests/shard/shard_test_util.h"
#include "tests/wait_until.h"

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

// Shedding is an answer at admission, not a wait in line: every shed call is answered while
// the shard is still held (an ordering, not a wall-clock bound, so a slow ASan build cannot
// fail it), and none of them is applied.
TEST(ConcurrencyTest, OverloadIsShedBeforeTheHeldShardMovesAndNothingShedIsApplied) {
  constexpr int kBurst = 200;
  constexpr int kCapacity = 4;
  testing_util::Event held;
  testing_util::Event release;
  ServerOptions options = LoopbackOptions();
  options.router.shard.mailbox_capacity = kCapacity;
  options.router.shard.max_batch = 1;             // So that the queued calls stay in the mailbox.
  options.router.shard.inline_execution = false;  // The hold must block a shard, not gRPC.
  ServerTestHooks hooks;
  hooks.router.shard.before_handle = [&](const Message& message) {
    if (testing_util::DepositAmount(message) == kBurst + 1) {  // The holder, sent before the burst.
      held.Notify();
      release.WaitForNotification();
    }
  };
  // The calls' state outlives the server, whose Shutdown answers them on every path.
  std::vector<v1::DepositRequest> requests(kBurst + 1);
  std::vector<v1::DepositResponse> responses(kBurst + 1);
  std::vector<grpc::ClientContext> contexts(kBurst + 1);
  std::vector<grpc::Status> statuses(kBurst + 1);
  std::vector<char> answered_while_held(kBurst + 1, 0);
  std::atomic<int> replies{0};
  std::atomic<int> shed_replies{0};
  TestServer server(options, hooks);
  absl::Cleanup always_release = [&] { release.Notify(); };
  auto stub = server.NewStub();
  const auto send = [&](int i) {
    requests[i].set_account_id("burst");
    requests[i].set_amount(i + 1);  // Distinct amounts: the final sum names what was applied.
    contexts[i].set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    stub->async()->Deposit(&contexts[i], &requests[i], &responses[i], [&, i](grpc::Status status) {
      answered_while_held[i] = release.HasBeenNotified() ? 0 : 1;
      if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) shed_replies.fetch_add(1);
      statuses[i] = std::move(status);
      replies.fetch_add(1);
    });
  };
  send(kBurst);  // The holder.
  ASSERT_TRUE(testing_util::WaitUntil([&] { return held.HasBeenNotified(); },
                                      "the first deposit is held in its handler"));
  for (int i = 0; i < kBurst; ++i) send(i);
  const Shard& shard = server.server().router().shard(server.server().router().ShardFor("burst"));
  // The mailbox fills and every other call of the burst is answered, all while the shard is
  // held. If refused calls waited in line instead, this would time out.
  ASSERT_TRUE(testing_util::WaitUntil(
      [&] { return shard.MailboxDepth() == kCapacity && replies.load() == kBurst - kCapacity; },
      "the mailbox is full and the rest of the burst is answered"))
      << "depth " << shard.MailboxDepth() << ", replies " << replies.load();
  // Each callback counts a shed before it counts a reply: those answers were all sheds.
  EXPECT_EQ(shed_replies.load(), kBurst - kCapacity);
  release.Notify();
  ASSERT_TRUE(testing_util::WaitUntil([&] { return replies.load() == kBurst + 1; },
                                      "every call of the burst is answered"));
  int64_t acknowledged_sum = 0;
  int ok = 0;
  for (int i = 0; i <= kBurst; ++i) {
    if (statuses[i].ok()) {
      ++ok;
      acknowledged_sum += i + 1;
      EXPECT_FALSE(answered_while_held[i]) << "call " << i << " was applied before the release";
    } else {
      EXPECT_EQ(statuses[i].error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
          << "call " << i << ": " << statuses[i].error_message();
      EXPECT_TRUE(answered_while_held[i]) << "call " << i << " was shed after the shard moved";
    }
  }
  EXPECT_EQ(ok, kCapacity + 1);  // The holder and the calls that fit in the mailbox.
  EXPECT_EQ(Balance(*stub, "burst").balance, acknowledged_sum);
  EXPECT_EQ(server.server().metrics().shard(shard.index()).shed(),
            static_cast<uint64_t>(kBurst - kCapacity));
}

}  // namespace
}  // namespace ledger
