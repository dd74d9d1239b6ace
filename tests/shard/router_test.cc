#include "shard/router.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/stable_hash.h"
#include "gtest/gtest.h"
#include "tests/shard/shard_test_util.h"

namespace ledger {
namespace {

using testing_util::CallShard;
using testing_util::CountingObserver;
using testing_util::RecordingCompletion;

std::unique_ptr<Router> StartRouter(int32_t shards, bool inline_execution,
                                    std::vector<ShardObserver*> observers = {}) {
  RouterOptions options;
  options.num_shards = shards;
  options.shard.inline_execution = inline_execution;
  options.shard.mailbox_capacity = 1024;
  options.observers = std::move(observers);
  absl::StatusOr<std::unique_ptr<Router>> router = Router::Create(options);
  EXPECT_TRUE(router.ok()) << router.status();
  (*router)->Start();
  return *std::move(router);
}

// Every behaviour holds whichever thread applies the messages: the shard thread only (false) or
// an idle shard's sender (true).
class RouterTest : public testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(ExecutionModes, RouterTest, testing::Values(false, true),
                         [](const testing::TestParamInfo<bool>& info) {
                           return info.param ? "InlineWhenIdle" : "ShardThreadOnly";
                         });

TEST_P(RouterTest, SendsEachAccountToTheShardItsStableHashNames) {
  std::vector<CountingObserver> observers(4);
  auto router =
      StartRouter(4, GetParam(), {&observers[0], &observers[1], &observers[2], &observers[3]});
  std::vector<int> expected(4, 0);
  for (int i = 0; i < 200; ++i) {
    const std::string id = absl::StrCat("acct-", i);
    ASSERT_EQ(CallShard(*router, Op::kDeposit, id, 1).outcome, Outcome::kOk);
    ++expected[ShardOf(id, 4)];
  }
  router->Stop();
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(observers[s].handled.load(), expected[s]) << "shard " << s;
    EXPECT_EQ(observers[s].accounts.load(), expected[s]) << "shard " << s;
  }
}

// The race the actor design removes: with a lock-free read-modify-write both would succeed.
TEST_P(RouterTest, OfTwoConcurrentWithdrawalsOf700From1000ExactlyOneSucceeds) {
  constexpr int kRounds = 1000;
  auto router = StartRouter(2, GetParam());
  int rounds_with_one_success = 0;
  for (int round = 0; round < kRounds; ++round) {
    const std::string id = absl::StrCat("race-", round);
    ASSERT_EQ(CallShard(*router, Op::kDeposit, id, 1000).balance, 1000);
    std::atomic<int> ready{0};
    Reply replies[2];
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < 2) {
        }
        replies[t] = CallShard(*router, Op::kWithdraw, id, 700);
      });
    }
    for (std::thread& thread : threads) thread.join();
    const int successes =
        (replies[0].outcome == Outcome::kOk) + (replies[1].outcome == Outcome::kOk);
    const int refusals = (replies[0].outcome == Outcome::kInsufficientFunds) +
                         (replies[1].outcome == Outcome::kInsufficientFunds);
    if (successes == 1 && refusals == 1) ++rounds_with_one_success;
    ASSERT_EQ(CallShard(*router, Op::kBalance, id, 0).balance, 300) << "round " << round;
  }
  router->Stop();
  EXPECT_EQ(rounds_with_one_success, kRounds);
}

TEST_P(RouterTest, ConcurrentDepositsFromManyThreadsAreAllApplied) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 5000;
  auto router = StartRouter(3, GetParam());
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) CallShard(*router, Op::kDeposit, "shared", 1);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(CallShard(*router, Op::kBalance, "shared", 0).balance, kThreads * kPerThread);
  router->Stop();
}

TEST_P(RouterTest, AfterStopEveryShardRefusesNewMessages) {
  auto router = StartRouter(2, GetParam());
  router->Stop();
  RecordingCompletion completion;
  for (int32_t s = 0; s < 2; ++s) {
    Message message = MakeAccountCall(Op::kBalance, "x", 0, "", &completion);
    EXPECT_EQ(router->TrySend(s, std::move(message)), SendOutcome::kClosed);
  }
  EXPECT_FALSE(completion.HasReply());
}

TEST(RouterOptionsTest, CreateRefusesOptionsOutOfRange) {
  RouterOptions options;
  options.num_shards = 1;
  EXPECT_EQ(Router::Create(options).status().message(), "--shards must be 2 to 1024; got 1");
  options.num_shards = kMaxShards + 1;
  EXPECT_FALSE(Router::Create(options).ok());
  options.num_shards = 2;
  CountingObserver one;
  options.observers = {&one};
  EXPECT_EQ(Router::Create(options).status().message(),
            "need one observer per shard; got 1 for 2 shards");
  options.observers.clear();
  options.shard.max_batch = 0;
  EXPECT_EQ(Router::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ledger
