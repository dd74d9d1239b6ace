// A shard with a store: group commit, rollback on a failed write, idempotency by request_id,
// the journal, and recovery. The store is in memory (tests/shard/memory_store.h) so that these
// run under ThreadSanitizer; storage/ has its own tests against RocksDB.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "shard/shard.h"
#include "tests/shard/memory_store.h"
#include "tests/shard/shard_test_util.h"

namespace ledger {
namespace {

using testing_util::CountingObserver;
using testing_util::Event;
using testing_util::MakeMessage;
using testing_util::MemoryStore;
using testing_util::RecordingCompletion;

class DurableShardTest : public testing::Test {
 protected:
  void StartShard(std::vector<std::pair<std::string, AccountState>> recovered = {}) {
    ShardOptions options;
    options.observer = &observer_;
    options.store = &store_;
    options.inline_execution = false;
    options.idempotency_ttl = absl::Hours(24);
    options.clock = [this] { return absl::FromUnixSeconds(now_seconds_.load()); };
    // Messages for "hold" block the shard thread until Release, so that a test can queue a batch.
    ShardTestHooks hooks;
    hooks.before_handle = [this](const Message& message) {
      if (message.account_id == "hold") {
        held_.Notify();
        release_.WaitForNotification();
      }
    };
    shard_ = std::make_unique<Shard>(std::move(options), std::move(hooks));
    for (auto& [id, state] : recovered) shard_->LoadAccount(id, state);
    shard_->Start();
  }

  void TearDown() override {
    if (!release_.HasBeenNotified()) release_.Notify();
    if (shard_ != nullptr) shard_->Stop();
  }

  Reply Call(Op op, absl::string_view account, int64_t amount, absl::string_view request_id = {}) {
    RecordingCompletion completion;
    EXPECT_EQ(shard_->TrySend(MakeMessage(op, account, amount, &completion, request_id)),
              SendOutcome::kAccepted);
    return completion.WaitForReply();
  }

  // Blocks the shard thread on a message of its own, so that what is sent next forms one batch.
  void HoldShard() {
    ASSERT_EQ(shard_->TrySend(MakeMessage(Op::kDeposit, "hold", 1, &hold_completion_)),
              SendOutcome::kAccepted);
    held_.WaitForNotification();
  }
  void Release() {
    release_.Notify();
    hold_completion_.WaitForReply();
  }

  void Send(Op op, absl::string_view account, int64_t amount, absl::string_view request_id,
            RecordingCompletion* completion) {
    ASSERT_EQ(shard_->TrySend(MakeMessage(op, account, amount, completion, request_id)),
              SendOutcome::kAccepted);
  }

  MemoryStore store_;
  CountingObserver observer_;
  std::atomic<int64_t> now_seconds_{1'800'000'000};
  Event held_;
  Event release_;
  RecordingCompletion hold_completion_;
  std::unique_ptr<Shard> shard_;
};

TEST_F(DurableShardTest, ABatchIsWrittenOnceAndAnsweredOnlyAfterTheWrite) {
  StartShard();
  RecordingCompletion first, second, third;
  std::atomic<int> answered_before_write{-1};
  store_.OnWrite([&](const BatchWrite& batch) {
    if (batch.journal.size() == 3) {
      answered_before_write = first.HasReply() + second.HasReply() + third.HasReply();
    }
  });
  HoldShard();
  Send(Op::kDeposit, "a", 10, "r1", &first);
  Send(Op::kDeposit, "a", 20, {}, &second);
  Send(Op::kWithdraw, "a", 5, "r3", &third);
  Release();

  EXPECT_EQ(first.WaitForReply().balance, 10);
  EXPECT_EQ(second.WaitForReply().balance, 30);
  EXPECT_EQ(third.WaitForReply().balance, 25);
  EXPECT_EQ(answered_before_write.load(), 0);
  const std::vector<BatchWrite> batches = store_.batches();
  ASSERT_EQ(batches.size(), 2u);  // The "hold" batch, then the three calls in one write.
  const BatchWrite& batch = batches[1];
  ASSERT_EQ(batch.journal.size(), 3u);
  EXPECT_EQ(batch.journal[0], (JournalEntry{.account_id = "a",
                                            .sequence = 1,
                                            .kind = EntryKind::kDeposit,
                                            .amount = 10,
                                            .balance_after = 10,
                                            .request_id = "r1",
                                            .time = absl::FromUnixSeconds(now_seconds_.load())}));
  EXPECT_EQ(batch.journal[2].sequence, 3u);
  EXPECT_EQ(batch.journal[2].kind, EntryKind::kWithdraw);
  EXPECT_EQ(batch.journal[2].balance_after, 25);
  EXPECT_EQ(batch.requests.size(), 2u);  // Only the calls that carried a request_id.
  EXPECT_EQ(store_.account("a"), (AccountState{.balance = 25, .sequence = 3}));
}

TEST_F(DurableShardTest, AFailedWriteAnswersUnavailableAndLeavesNoTrace) {
  StartShard();
  ASSERT_EQ(Call(Op::kDeposit, "a", 100).balance, 100);
  store_.FailWrites(true);
  RecordingCompletion deposit, withdraw, read, open_b;
  HoldShard();
  Send(Op::kDeposit, "a", 50, "retry-me", &deposit);
  Send(Op::kWithdraw, "a", 30, {}, &withdraw);
  Send(Op::kBalance, "a", 0, {}, &read);
  Send(Op::kDeposit, "b", 5, {}, &open_b);
  Release();

  EXPECT_EQ(deposit.WaitForReply().outcome, Outcome::kStorageFailed);
  EXPECT_EQ(withdraw.WaitForReply().outcome, Outcome::kStorageFailed);
  EXPECT_EQ(open_b.WaitForReply().outcome, Outcome::kStorageFailed);
  // The read ran after the failed deposit in the batch, but reports the state on disk.
  EXPECT_EQ(read.WaitForReply().outcome, Outcome::kOk);
  EXPECT_EQ(read.WaitForReply().balance, 100);
  // The "hold" batch failed too. The calls' batch was decided on top of it: it either joined it
  // in one failed write or was refused without a write of its own; or it was decided after the
  // rollback and its own write failed. Each failed write is one storage error.
  const int failed_writes = store_.failed_writes();
  EXPECT_TRUE(failed_writes == 1 || failed_writes == 2) << failed_writes;
  EXPECT_EQ(observer_.storage_errors.load(), failed_writes);
  // Reads are still served while writes fail.
  EXPECT_EQ(Call(Op::kBalance, "a", 0).balance, 100);
  EXPECT_EQ(Call(Op::kBalance, "b", 0).outcome, Outcome::kAccountNotFound);

  store_.FailWrites(false);
  // The failed call was not recorded, so its retry applies it now, once.
  EXPECT_EQ(Call(Op::kDeposit, "a", 50, "retry-me").balance, 150);
  EXPECT_EQ(Call(Op::kDeposit, "a", 50, "retry-me").balance, 150);
  EXPECT_EQ(store_.account("a"), (AccountState{.balance = 150, .sequence = 2}));
  EXPECT_EQ(store_.failed_writes(), failed_writes);
}

TEST_F(DurableShardTest, AFailedWriteThatReachedTheDiskAnywayIsReloadedBeforeTheNextUse) {
  StartShard();
  ASSERT_EQ(Call(Op::kDeposit, "a", 100).balance, 100);
  store_.FailWrites(true);
  store_.LandFailedWrites(true);
  EXPECT_EQ(Call(Op::kDeposit, "a", 50, "landed").outcome, Outcome::kStorageFailed);
  store_.FailWrites(false);
  // The shard answered UNAVAILABLE, yet the store holds the deposit: the store is the truth.
  EXPECT_EQ(Call(Op::kBalance, "a", 0).balance, 150);
  const Reply retried = Call(Op::kDeposit, "a", 50, "landed");
  EXPECT_EQ(retried.outcome, Outcome::kOk);
  EXPECT_EQ(retried.balance, 150);  // Replayed from the record, not applied again.
  EXPECT_EQ(Call(Op::kDeposit, "a", 1).balance, 151);
  EXPECT_EQ(store_.account("a"), (AccountState{.balance = 151, .sequence = 3}));
}

TEST_F(DurableShardTest, AnAccountThatCannotBeReloadedRefusesWritesButServesReads) {
  StartShard();
  ASSERT_EQ(Call(Op::kDeposit, "a", 100).balance, 100);
  store_.FailWrites(true);
  EXPECT_EQ(Call(Op::kDeposit, "a", 50).outcome, Outcome::kStorageFailed);
  store_.FailLookups(true);
  EXPECT_EQ(Call(Op::kBalance, "a", 0).balance, 100);
  EXPECT_EQ(Call(Op::kWithdraw, "a", 1).outcome, Outcome::kStorageFailed);
  store_.FailLookups(false);
  store_.FailWrites(false);
  EXPECT_EQ(Call(Op::kWithdraw, "a", 1).balance, 99);
}

TEST_F(DurableShardTest, ARetriedRequestIdIsAppliedOnceAndGetsTheSameReply) {
  StartShard();
  const Reply first = Call(Op::kDeposit, "a", 100, "dep-1");
  const Reply again = Call(Op::kDeposit, "a", 100, "dep-1");
  EXPECT_EQ(first.outcome, Outcome::kOk);
  EXPECT_FALSE(first.replayed);
  EXPECT_EQ(again.outcome, Outcome::kOk);
  EXPECT_EQ(again.balance, 100);
  EXPECT_TRUE(again.replayed);  // The front end tells the caller it is the recorded result.
  EXPECT_EQ(Call(Op::kBalance, "a", 0).balance, 100);
  EXPECT_EQ(store_.journal().size(), 1u);
  // The same id on another account is another request.
  EXPECT_EQ(Call(Op::kDeposit, "b", 100, "dep-1").balance, 100);
}

TEST_F(DurableShardTest, ARequestIdReusedForAnotherOperationOrAmountIsRefused) {
  StartShard();
  ASSERT_EQ(Call(Op::kDeposit, "a", 100, "id-1").outcome, Outcome::kOk);
  const Reply other_amount = Call(Op::kDeposit, "a", 999, "id-1");
  EXPECT_EQ(other_amount.outcome, Outcome::kRequestIdReused);
  EXPECT_EQ(std::get<ReusedRequestId>(other_amount.detail).op, Op::kDeposit);
  EXPECT_EQ(std::get<ReusedRequestId>(other_amount.detail).amount, 100);
  const Reply other_op = Call(Op::kWithdraw, "a", 100, "id-1");
  EXPECT_EQ(other_op.outcome, Outcome::kRequestIdReused);
  EXPECT_EQ(Call(Op::kBalance, "a", 0).balance, 100);
}

TEST_F(DurableShardTest, ARecordedRejectionIsReplayedEvenWhenTheRetryCouldSucceed) {
  StartShard();
  ASSERT_EQ(Call(Op::kDeposit, "a", 100).outcome, Outcome::kOk);
  const Reply refused = Call(Op::kWithdraw, "a", 500, "w-1");
  EXPECT_EQ(refused.outcome, Outcome::kInsufficientFunds);
  ASSERT_EQ(Call(Op::kDeposit, "a", 1000).balance, 1100);
  const Reply replayed = Call(Op::kWithdraw, "a", 500, "w-1");
  EXPECT_EQ(replayed.outcome, Outcome::kInsufficientFunds);
  EXPECT_EQ(replayed.balance, 100);  // The balance that refused it, as first answered.
  EXPECT_EQ(Call(Op::kBalance, "a", 0).balance, 1100);
}

TEST_F(DurableShardTest, TheSameRequestIdTwiceInOneBatchIsAppliedOnce) {
  StartShard();
  RecordingCompletion first, second;
  HoldShard();
  Send(Op::kDeposit, "a", 40, "twice", &first);
  Send(Op::kDeposit, "a", 40, "twice", &second);
  Release();
  EXPECT_EQ(first.WaitForReply().balance, 40);
  EXPECT_EQ(second.WaitForReply().outcome, Outcome::kOk);
  EXPECT_EQ(second.WaitForReply().balance, 40);
  EXPECT_EQ(Call(Op::kBalance, "a", 0).balance, 40);
}

TEST_F(DurableShardTest, ARequestIdIsNewAgainAfterTheTtl) {
  StartShard();
  ASSERT_EQ(Call(Op::kDeposit, "a", 100, "ttl").balance, 100);
  now_seconds_ += 24 * 3600 - 1;
  EXPECT_EQ(Call(Op::kDeposit, "a", 100, "ttl").balance, 100);  // Still remembered.
  now_seconds_ += 1;
  EXPECT_EQ(Call(Op::kDeposit, "a", 100, "ttl").balance, 200);  // Expired: a new request.
  EXPECT_EQ(Call(Op::kDeposit, "a", 100, "ttl").balance, 200);  // And remembered again.
}

TEST_F(DurableShardTest, AFailedLookupAnswersUnavailableAndAppliesNothing) {
  StartShard();
  ASSERT_EQ(Call(Op::kDeposit, "a", 100).outcome, Outcome::kOk);
  store_.FailLookups(true);
  EXPECT_EQ(Call(Op::kDeposit, "a", 5, "lookup").outcome, Outcome::kStorageFailed);
  EXPECT_EQ(Call(Op::kDeposit, "a", 5).balance, 105);  // Without a request_id: no lookup.
  store_.FailLookups(false);
  EXPECT_EQ(Call(Op::kDeposit, "a", 5, "lookup").balance, 110);
  EXPECT_EQ(observer_.storage_errors.load(), 1);
}

TEST_F(DurableShardTest, RecoveredAccountsContinueTheirBalanceAndSequence) {
  StartShard({{"a", AccountState{.balance = 70, .sequence = 9}}});
  EXPECT_EQ(Call(Op::kBalance, "a", 0).balance, 70);
  EXPECT_EQ(Call(Op::kWithdraw, "a", 20).balance, 50);
  const std::vector<JournalEntry> journal = store_.journal();
  ASSERT_EQ(journal.size(), 1u);
  EXPECT_EQ(journal[0].sequence, 10u);
  EXPECT_EQ(journal[0].balance_after, 50);
}

TEST(ShardWithoutStoreTest, DoesNotDeduplicateRequestIds) {
  ShardOptions options;
  options.inline_execution = false;
  Shard shard(std::move(options));
  shard.Start();
  for (int i = 0; i < 2; ++i) {
    RecordingCompletion completion;
    ASSERT_EQ(shard.TrySend(MakeMessage(Op::kDeposit, "a", 10, &completion, "same")),
              SendOutcome::kAccepted);
    EXPECT_EQ(completion.WaitForReply().balance, 10 * (i + 1));
  }
  shard.Stop();
}

TEST(ShardOptionsTest, AStoreDecidesInlineButAPipelineNeedsAStore) {
  MemoryStore store;
  ShardOptions options;
  options.store = &store;
  options.inline_execution = true;  // Deciding is in memory; the pipeline writes.
  EXPECT_TRUE(ValidateShardOptions(options).ok());
  options.idempotency_ttl = absl::ZeroDuration();
  EXPECT_EQ(ValidateShardOptions(options).message(), "idempotency TTL must be greater than zero");

  CommitPipeline pipeline({.store = &store, .observer = nullptr, .num_shards = 1});
  ShardOptions without_store;
  without_store.pipeline = &pipeline;
  EXPECT_EQ(ValidateShardOptions(without_store).message(), "a commit pipeline needs a store");
}

}  // namespace
}  // namespace ledger
