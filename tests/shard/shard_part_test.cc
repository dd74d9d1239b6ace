// Batch calls' parts: a mailbox whose bound counts weight, and a shard that takes a part of many
// operations as one message, accepts or refuses it whole, and decides its operations in order.
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "shard/mailbox.h"
#include "shard/shard.h"
#include "tests/shard/memory_store.h"
#include "tests/shard/shard_test_util.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using testing_util::CountingObserver;
using testing_util::Event;
using testing_util::MakeMessage;
using testing_util::MemoryStore;
using testing_util::RecordingCompletion;
using testing_util::WaitUntil;

TEST(WeightedMailboxTest, TheBoundCountsWeightNotMessages) {
  Mailbox<int> mailbox(10);
  EXPECT_EQ(mailbox.TrySend(1, 4), SendOutcome::kAccepted);
  EXPECT_EQ(mailbox.TrySend(2, 4), SendOutcome::kAccepted);
  EXPECT_EQ(mailbox.TrySend(3, 3), SendOutcome::kFull);  // 4 + 4 + 3 > 10.
  EXPECT_EQ(mailbox.WeightHeld(), 8u);
  EXPECT_EQ(mailbox.TrySend(4, 2), SendOutcome::kAccepted);
  EXPECT_EQ(mailbox.WeightHeld(), 10u);
  EXPECT_EQ(mailbox.Depth(), 3u);
  EXPECT_EQ(mailbox.TrySend(5), SendOutcome::kFull);

  // TryTake keeps the weight held until FreeTaken; a weight limit stops before the message that
  // would exceed it, but always takes one.
  std::vector<int> taken;
  EXPECT_EQ(mailbox.TryTake(taken, 10, /*max_weight=*/5), 1u);
  EXPECT_EQ(mailbox.TryTake(taken, 10, /*max_weight=*/6), 2u);
  EXPECT_EQ(taken, (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(mailbox.WeightHeld(), 10u);
  mailbox.FreeTaken(2);
  EXPECT_EQ(mailbox.WeightHeld(), 2u);
  EXPECT_EQ(mailbox.TrySend(6, 8), SendOutcome::kAccepted);
  EXPECT_EQ(mailbox.TrySend(7, 11), SendOutcome::kFull);  // Never fits.
  mailbox.FreeTaken(1);
  EXPECT_EQ(mailbox.WeightHeld(), 8u);

  // TryDrain frees as it takes.
  taken.clear();
  EXPECT_EQ(mailbox.TryDrain(taken, 10), 1u);
  EXPECT_EQ(taken, (std::vector<int>{6}));
  EXPECT_EQ(mailbox.WeightHeld(), 0u);
  mailbox.Close();
  EXPECT_EQ(mailbox.TrySend(8, 1), SendOutcome::kClosed);
  EXPECT_EQ(mailbox.WeightHeld(), 0u);
}

// One part: its operations' messages and their completions.
struct Part {
  explicit Part(size_t size) : completions(size) {}
  void Add(Op op, absl::string_view account, int64_t amount, absl::string_view request_id = {}) {
    messages.push_back(MakeMessage(op, account, amount, &completions[messages.size()], request_id));
  }
  void WaitForAll() {
    for (size_t i = 0; i < messages.size(); ++i) completions[i].WaitForReply();
  }
  std::vector<RecordingCompletion> completions;
  std::vector<Message> messages;
};

struct Mode {
  bool durable = false;
  bool inline_execution = false;
  const char* name = "";
};

class ShardPartTest : public testing::TestWithParam<Mode> {
 protected:
  void StartShard(size_t capacity) {
    ShardOptions options;
    options.mailbox_capacity = capacity;
    options.observer = &observer_;
    options.inline_execution = GetParam().inline_execution;
    if (GetParam().durable) options.store = &store_;
    ShardTestHooks hooks;
    if (!GetParam().inline_execution) {
      // Messages for "hold" block the shard thread until released, so that a test can fill it.
      hooks.before_handle = [this](const Message& message) {
        if (message.account_id == "hold") {
          held_.Notify();
          release_.WaitForNotification();
        }
      };
    }
    shard_ = std::make_unique<Shard>(std::move(options), std::move(hooks));
    shard_->Start();
  }

  void TearDown() override {
    if (!release_.HasBeenNotified()) release_.Notify();
    if (shard_ != nullptr) shard_->Stop();
  }

  int64_t Balance(absl::string_view account) {
    RecordingCompletion completion;
    EXPECT_EQ(shard_->TrySend(MakeMessage(Op::kBalance, account, 0, &completion)),
              SendOutcome::kAccepted);
    return completion.WaitForReply().balance;
  }

  ::testing::AssertionResult HoldsNothing() {
    return WaitUntil([this] { return shard_->OperationsHeld() == 0; },
                     "the shard holds no operation");
  }

  MemoryStore store_;
  CountingObserver observer_;
  Event held_;
  Event release_;
  std::unique_ptr<Shard> shard_;
};

TEST_P(ShardPartTest, DecidesAPartsOperationsInOrderEachWithItsOwnReply) {
  StartShard(64);
  Part part(7);
  part.Add(Op::kDeposit, "a", 10, "r1");
  part.Add(Op::kWithdraw, "a", 15, "r2");  // 10 - 15 < 0: refused.
  part.Add(Op::kDeposit, "a", 10, "r3");
  part.Add(Op::kWithdraw, "a", 15, "r4");  // 20 - 15 = 5.
  part.Add(Op::kDeposit, "b", 7, "r5");
  part.Add(Op::kBalance, "a", 0);
  part.Add(Op::kDeposit, "a", 10, "r1");  // The same request_id and amount: replayed.
  ASSERT_EQ(shard_->TrySendPart(part.messages.data(), part.messages.size()),
            SendOutcome::kAccepted);
  part.WaitForAll();
  const auto reply = [&](size_t i) { return part.completions[i].WaitForReply(); };
  EXPECT_EQ(reply(0).outcome, Outcome::kOk);
  EXPECT_EQ(reply(0).balance, 10);
  EXPECT_EQ(reply(1).outcome, Outcome::kInsufficientFunds);
  EXPECT_EQ(reply(2).balance, 20);
  EXPECT_EQ(reply(3).outcome, Outcome::kOk);
  EXPECT_EQ(reply(3).balance, 5);
  EXPECT_EQ(reply(4).balance, 7);
  EXPECT_EQ(reply(5).balance, 5);
  if (GetParam().durable) {
    EXPECT_TRUE(reply(6).replayed);
    EXPECT_EQ(reply(6).balance, 10);
  } else {
    EXPECT_EQ(reply(6).balance, 15);  // Without a store request_ids are not deduplicated.
  }
  for (const RecordingCompletion& completion : part.completions) {
    EXPECT_EQ(completion.completions(), 1);
  }
  EXPECT_EQ(Balance("a"), GetParam().durable ? 5 : 15);
  EXPECT_EQ(Balance("b"), 7);
  EXPECT_TRUE(HoldsNothing());
  if (GetParam().durable) {
    EXPECT_EQ(store_.journal().size(), 4u);  // r1, r3, r4 and r5, each applied once.
  }
}

TEST_P(ShardPartTest, APartLargerThanTheCapacityIsRefusedWholeAndOneThatFitsIsNot) {
  StartShard(4);
  for (int round = 0; round < 50; ++round) {
    Part too_big(5);
    for (int i = 0; i < 5; ++i) too_big.Add(Op::kDeposit, "a", 1);
    EXPECT_EQ(shard_->TrySendPart(too_big.messages.data(), too_big.messages.size()),
              SendOutcome::kFull);
    for (const RecordingCompletion& completion : too_big.completions) {
      EXPECT_FALSE(completion.HasReply());
    }
    Part fits(4);
    for (int i = 0; i < 4; ++i) fits.Add(Op::kDeposit, "a", 1);
    ASSERT_EQ(shard_->TrySendPart(fits.messages.data(), fits.messages.size()),
              SendOutcome::kAccepted);
    fits.WaitForAll();
    EXPECT_EQ(fits.completions[3].WaitForReply().balance, 4 * (round + 1));
    // Its weight is given back once answered, so the next round fits again.
    ASSERT_TRUE(HoldsNothing());
  }
  EXPECT_EQ(observer_.shed.load(), 50);
  EXPECT_EQ(Balance("a"), 200);
}

// Needs a shard thread to hold: the dedicated modes only.
class ShardPartHeldTest : public ShardPartTest {};

TEST_P(ShardPartHeldTest, APartThatDoesNotFitBesideWhatTheShardHoldsIsRefusedWhole) {
  // With a store the message being decided still counts until it is answered; without one only
  // queued messages do.
  const size_t held_before = GetParam().durable ? 1 : 0;
  StartShard(held_before + 5 + 2);
  RecordingCompletion hold;
  ASSERT_EQ(shard_->TrySend(MakeMessage(Op::kDeposit, "hold", 1, &hold)), SendOutcome::kAccepted);
  held_.WaitForNotification();
  Part first(5);
  for (int i = 0; i < 5; ++i) first.Add(Op::kDeposit, "a", 1);
  ASSERT_EQ(shard_->TrySendPart(first.messages.data(), first.messages.size()),
            SendOutcome::kAccepted);
  EXPECT_EQ(shard_->OperationsHeld(), held_before + 5);
  Part second(3);
  for (int i = 0; i < 3; ++i) second.Add(Op::kDeposit, "a", 100);
  EXPECT_EQ(shard_->TrySendPart(second.messages.data(), second.messages.size()),
            SendOutcome::kFull);  // 3 more do not fit; 1 more does.
  RecordingCompletion single;
  ASSERT_EQ(shard_->TrySend(MakeMessage(Op::kDeposit, "a", 1000, &single)), SendOutcome::kAccepted);
  release_.Notify();
  first.WaitForAll();
  EXPECT_EQ(single.WaitForReply().balance, 1005);
  for (const RecordingCompletion& completion : second.completions) {
    EXPECT_FALSE(completion.HasReply());
  }
  EXPECT_TRUE(HoldsNothing());
  EXPECT_EQ(Balance("a"), 1005);
}

INSTANTIATE_TEST_SUITE_P(Modes, ShardPartTest,
                         testing::Values(Mode{false, false, "MemoryDedicated"},
                                         Mode{false, true, "MemoryInline"},
                                         Mode{true, false, "DurableDedicated"},
                                         Mode{true, true, "DurableInline"}),
                         [](const testing::TestParamInfo<Mode>& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(DedicatedModes, ShardPartHeldTest,
                         testing::Values(Mode{false, false, "MemoryDedicated"},
                                         Mode{true, false, "DurableDedicated"}),
                         [](const testing::TestParamInfo<Mode>& info) { return info.param.name; });

}  // namespace
}  // namespace ledger
