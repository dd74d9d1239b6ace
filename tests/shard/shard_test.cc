#include "shard/shard.h"

#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/shard/shard_test_util.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using testing_util::CountingObserver;
using testing_util::MakeMessage;
using testing_util::RecordingCompletion;

// A shard whose handler blocks on any message for the account "hold" until Release(), and
// throws for the account "boom".
class HeldShardTest : public testing::Test {
 protected:
  // With inline execution off, the hold blocks the shard thread; with it on, it blocks the
  // sending thread that applies the message, which HoldShard makes a thread of its own.
  void StartShard(size_t capacity, bool inline_execution = false) {
    ShardOptions options;
    options.mailbox_capacity = capacity;
    options.observer = &observer_;
    options.inline_execution = inline_execution;
    ShardTestHooks hooks;
    hooks.before_handle = [this](const Message& message) {
      if (message.account_id == "hold") {
        held_.Notify();
        release_.WaitForNotification();
      }
      if (message.account_id == "boom") throw std::runtime_error("injected fault");
    };
    shard_ = std::make_unique<Shard>(std::move(options), std::move(hooks));
    shard_->Start();
  }

  void TearDown() override {
    if (!release_.HasBeenNotified()) release_.Notify();
    if (holder_.joinable()) holder_.join();
    if (shard_ != nullptr) shard_->Stop();
  }

  // Sends a message for "hold" and waits until the thread applying it is blocked inside it.
  void HoldShard() {
    holder_ = std::thread([this] {
      EXPECT_EQ(shard_->TrySend(MakeMessage(Op::kDeposit, "hold", 1, &hold_completion_)),
                SendOutcome::kAccepted);
    });
    held_.WaitForNotification();
  }
  void Release() { release_.Notify(); }

  Reply Call(Op op, absl::string_view account_id, int64_t amount) {
    RecordingCompletion completion;
    EXPECT_EQ(shard_->TrySend(MakeMessage(op, account_id, amount, &completion)),
              SendOutcome::kAccepted);
    return completion.WaitForReply();
  }

  CountingObserver observer_;
  std::unique_ptr<Shard> shard_;
  RecordingCompletion hold_completion_;
  testing_util::Event held_;
  testing_util::Event release_;
  std::thread holder_;
};

TEST_F(HeldShardTest, AppliesDepositsWithdrawalsAndBalanceInOrder) {
  StartShard(16);
  EXPECT_EQ(Call(Op::kDeposit, "alice", 1500).balance, 1500);
  const Reply withdrawn = Call(Op::kWithdraw, "alice", 400);
  EXPECT_EQ(withdrawn.outcome, Outcome::kOk);
  EXPECT_EQ(withdrawn.balance, 1100);
  const Reply refused = Call(Op::kWithdraw, "alice", 5000);
  EXPECT_EQ(refused.outcome, Outcome::kInsufficientFunds);
  EXPECT_EQ(refused.balance, 1100);
  EXPECT_EQ(Call(Op::kBalance, "alice", 0).balance, 1100);
  EXPECT_EQ(Call(Op::kBalance, "nobody", 0).outcome, Outcome::kAccountNotFound);
  EXPECT_EQ(observer_.handled.load(), 5);
  EXPECT_EQ(observer_.accounts.load(), 1);
  EXPECT_EQ(observer_.negative_durations.load(), 0);
}

TEST_F(HeldShardTest, FullMailboxShedsAtOnceAndCountsIt) {
  StartShard(2);
  HoldShard();
  RecordingCompletion first, second, shed;
  ASSERT_EQ(shard_->TrySend(MakeMessage(Op::kDeposit, "a", 10, &first)), SendOutcome::kAccepted);
  ASSERT_EQ(shard_->TrySend(MakeMessage(Op::kDeposit, "a", 20, &second)), SendOutcome::kAccepted);
  EXPECT_EQ(shard_->MailboxDepth(), 2u);
  EXPECT_EQ(shard_->TrySend(MakeMessage(Op::kDeposit, "a", 40, &shed)), SendOutcome::kFull);
  EXPECT_EQ(observer_.shed.load(), 1);
  Release();
  EXPECT_EQ(first.WaitForReply().balance, 10);
  EXPECT_EQ(second.WaitForReply().balance, 30);
  EXPECT_EQ(Call(Op::kBalance, "a", 0).balance, 30);  // The shed deposit was never applied.
  EXPECT_FALSE(shed.HasReply());
}

TEST_F(HeldShardTest, SkipsAndCountsAMessageWhoseCallerLeftWhileItWaited) {
  StartShard(8);
  HoldShard();
  RecordingCompletion abandoned;
  ASSERT_EQ(shard_->TrySend(MakeMessage(Op::kDeposit, "bob", 500, &abandoned)),
            SendOutcome::kAccepted);
  abandoned.MarkCallerGone();
  Release();
  EXPECT_EQ(abandoned.WaitForReply().outcome, Outcome::kCallerGone);
  EXPECT_EQ(Call(Op::kBalance, "bob", 0).outcome, Outcome::kAccountNotFound);
  EXPECT_EQ(observer_.expired.load(), 1);
}

TEST_F(HeldShardTest, HandlerFaultAnswersInternalAndTheShardKeepsServing) {
  StartShard(8);
  EXPECT_EQ(Call(Op::kDeposit, "boom", 100).outcome, Outcome::kInternal);
  EXPECT_EQ(Call(Op::kDeposit, "carol", 100).balance, 100);
  EXPECT_EQ(observer_.internal_errors.load(), 1);
  EXPECT_EQ(observer_.accounts.load(), 1);  // "boom" was never opened.
}

TEST_F(HeldShardTest, StopAppliesAndAnswersEveryAcceptedMessageThenRefusesNewOnes) {
  constexpr int kQueued = 50;
  StartShard(64);
  HoldShard();
  std::vector<RecordingCompletion> completions(kQueued);
  for (int i = 0; i < kQueued; ++i) {
    ASSERT_EQ(shard_->TrySend(MakeMessage(Op::kDeposit, "dave", 2, &completions[i])),
              SendOutcome::kAccepted);
  }
  shard_->CloseMailbox();
  RecordingCompletion too_late;
  EXPECT_EQ(shard_->TrySend(MakeMessage(Op::kDeposit, "dave", 2, &too_late)), SendOutcome::kClosed);
  std::thread stopper([this] { shard_->Stop(); });
  Release();
  stopper.join();
  for (int i = 0; i < kQueued; ++i) {
    EXPECT_EQ(completions[i].completions(), 1) << i;
    EXPECT_EQ(completions[i].WaitForReply().balance, 2 * (i + 1)) << i;
  }
  EXPECT_EQ(hold_completion_.completions(), 1);
  EXPECT_FALSE(too_late.HasReply());
}

TEST_F(HeldShardTest, AfterAbandonUndecidedQueuedMessagesAreRefusedUnappliedAndAnswered) {
  constexpr int kQueued = 20;
  StartShard(64);
  HoldShard();
  std::vector<RecordingCompletion> completions(kQueued);
  for (int i = 0; i < kQueued; ++i) {
    ASSERT_EQ(shard_->TrySend(MakeMessage(Op::kDeposit, "frank", 3, &completions[i])),
              SendOutcome::kAccepted);
  }
  shard_->CloseMailbox();
  shard_->AbandonUndecided();
  std::thread stopper([this] { shard_->Stop(); });
  Release();
  stopper.join();
  // The held message was decided before the abandon; none of the queued ones were applied.
  EXPECT_EQ(hold_completion_.WaitForReply().outcome, Outcome::kOk);
  for (int i = 0; i < kQueued; ++i) {
    EXPECT_EQ(completions[i].completions(), 1) << i;
    EXPECT_EQ(completions[i].WaitForReply().outcome, Outcome::kShuttingDown) << i;
  }
}

TEST_F(HeldShardTest, InlineAnIdleShardsMessageIsAppliedBeforeTrySendReturns) {
  StartShard(8, /*inline_execution=*/true);
  // Idle means no thread holds the drain token. Just after Start the shard thread takes it once to
  // look at its mailbox, and a message sent in that moment is the shard thread's to apply (under
  // TSan the moment is long, and "not busy" can be seen before the thread has even begun). So a
  // message that found the shard busy is let through, and the next one sent: the property is
  // that a message sent to an idle shard is applied on the sender's thread, within a few tries.
  constexpr int kMaxTries = 100;
  std::vector<RecordingCompletion> completions(kMaxTries);
  int sent = 0;
  bool applied_inline = false;
  while (sent < kMaxTries && !applied_inline) {
    ASSERT_TRUE(testing_util::WaitUntil([&] { return !shard_->Busy(); }, "the shard is idle"));
    ASSERT_EQ(shard_->TrySend(MakeMessage(Op::kDeposit, "erin", 70, &completions[sent])),
              SendOutcome::kAccepted);
    applied_inline = completions[sent].HasReply();
    ++sent;
  }
  EXPECT_TRUE(applied_inline) << "none of " << sent << " messages was applied by its sender";
  EXPECT_EQ(completions[sent - 1].WaitForReply().balance, 70 * sent);
}

TEST_F(HeldShardTest, InlineWhileOneSenderAppliesOthersQueueAndAreAllAnsweredAfter) {
  constexpr int kQueued = 300;  // More than one sender's inline budget: the rest is handed off.
  StartShard(512, /*inline_execution=*/true);
  HoldShard();
  std::vector<RecordingCompletion> completions(kQueued);
  for (int i = 0; i < kQueued; ++i) {
    ASSERT_EQ(shard_->TrySend(MakeMessage(Op::kDeposit, "frank", 1, &completions[i])),
              SendOutcome::kAccepted);
    EXPECT_FALSE(completions[i].HasReply()) << i;  // Queued behind the holder, not applied here.
  }
  EXPECT_EQ(shard_->MailboxDepth(), static_cast<size_t>(kQueued));
  Release();
  for (int i = 0; i < kQueued; ++i) EXPECT_EQ(completions[i].WaitForReply().balance, i + 1);
  EXPECT_EQ(hold_completion_.WaitForReply().balance, 1);
}

TEST_F(HeldShardTest, InlineFullMailboxShedsWhileASenderHoldsTheShard) {
  StartShard(2, /*inline_execution=*/true);
  HoldShard();
  RecordingCompletion first, second, shed;
  ASSERT_EQ(shard_->TrySend(MakeMessage(Op::kDeposit, "g", 10, &first)), SendOutcome::kAccepted);
  ASSERT_EQ(shard_->TrySend(MakeMessage(Op::kDeposit, "g", 20, &second)), SendOutcome::kAccepted);
  EXPECT_EQ(shard_->TrySend(MakeMessage(Op::kDeposit, "g", 40, &shed)), SendOutcome::kFull);
  EXPECT_EQ(observer_.shed.load(), 1);
  Release();
  EXPECT_EQ(second.WaitForReply().balance, 30);
  EXPECT_FALSE(shed.HasReply());
}

TEST_F(HeldShardTest, InlineStopAnswersEverythingAcceptedWhileASenderHeldTheShard) {
  StartShard(64, /*inline_execution=*/true);
  HoldShard();
  std::vector<RecordingCompletion> completions(20);
  for (RecordingCompletion& completion : completions) {
    ASSERT_EQ(shard_->TrySend(MakeMessage(Op::kDeposit, "hank", 3, &completion)),
              SendOutcome::kAccepted);
  }
  std::thread stopper([&] { shard_->Stop(); });
  Release();
  stopper.join();
  for (size_t i = 0; i < completions.size(); ++i) {
    EXPECT_EQ(completions[i].completions(), 1) << i;
    EXPECT_EQ(completions[i].WaitForReply().balance, static_cast<int64_t>(3 * (i + 1))) << i;
  }
}

TEST(ShardOptionsTest, RefusesEachBoundOutOfRange) {
  EXPECT_TRUE(ValidateShardOptions(ShardOptions{}).ok());
  ShardOptions options;
  options.mailbox_capacity = 0;
  EXPECT_FALSE(ValidateShardOptions(options).ok());
  options.mailbox_capacity = kMailboxCapacityMax + 1;
  EXPECT_FALSE(ValidateShardOptions(options).ok());
  options = ShardOptions{};
  options.max_batch = 0;
  EXPECT_FALSE(ValidateShardOptions(options).ok());
  options = ShardOptions{};
  options.policy.overdraft_limit = -1;
  EXPECT_EQ(ValidateShardOptions(options).message(),
            "--overdraft_limit must be at least 0; got -1");
  options = ShardOptions{};
  options.debug_handler_delay = absl::Milliseconds(1);
  EXPECT_FALSE(ValidateShardOptions(options).ok());  // Inline execution is on by default.
  options.inline_execution = false;
  EXPECT_TRUE(ValidateShardOptions(options).ok());
}

}  // namespace
}  // namespace ledger
