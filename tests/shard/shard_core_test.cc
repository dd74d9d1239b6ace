// ShardCore driven step by step, without threads: the API the simulator (sim/) builds on.
#include "shard/shard_core.h"

#include <memory>
#include <string>
#include <vector>

#include "base/check.h"
#include "gtest/gtest.h"
#include "tests/shard/memory_store.h"
#include "tests/shard/shard_test_util.h"

namespace ledger {
namespace {

using testing_util::MakeMessage;
using testing_util::MemoryStore;
using testing_util::RecordingCompletion;

ShardCoreOptions Options(LedgerStore* store) {
  ShardCoreOptions options;
  options.store = store;
  options.clock = [] { return absl::FromUnixSeconds(1000); };
  options.log_errors = false;
  return options;
}

TEST(ShardCoreTest, DecidesStepByStepAndAnswersOnlyAfterTheWrite) {
  MemoryStore store;
  ShardCore core(Options(&store));
  RecordingCompletion deposit, withdraw;
  core.batch().push_back(MakeMessage(Op::kDeposit, "a", 100, &deposit));
  core.batch().push_back(MakeMessage(Op::kWithdraw, "a", 30, &withdraw));
  ASSERT_TRUE(core.Prefetch(/*may_block=*/false, core.last_sealed()));
  core.BeginBatch();
  core.DecideNext(/*abandoning=*/false);
  EXPECT_FALSE(core.AllDecided());
  core.DecideNext(/*abandoning=*/false);
  EXPECT_TRUE(core.AllDecided());
  EXPECT_FALSE(deposit.HasReply());  // Decided, not yet durable: nobody hears OK.
  EXPECT_TRUE(store.batches().empty());
  core.CommitAndComplete();
  EXPECT_EQ(deposit.WaitForReply().balance, 100);
  EXPECT_EQ(withdraw.WaitForReply().balance, 70);
  ASSERT_EQ(store.batches().size(), 1u);
  EXPECT_EQ(store.account("a"), (AccountState{.balance = 70, .sequence = 2}));
  EXPECT_TRUE(core.batch().empty());
}

TEST(ShardCoreTest, AbandoningFromTheMiddleOfABatchRefusesOnlyTheRest) {
  ShardCore core(Options(nullptr));
  RecordingCompletion first, second;
  core.batch().push_back(MakeMessage(Op::kDeposit, "a", 5, &first));
  core.batch().push_back(MakeMessage(Op::kDeposit, "a", 7, &second));
  ASSERT_TRUE(core.Prefetch(/*may_block=*/false, core.last_sealed()));
  core.BeginBatch();
  core.DecideNext(/*abandoning=*/false);
  core.DecideNext(/*abandoning=*/true);
  core.CommitAndComplete();
  EXPECT_EQ(first.WaitForReply().balance, 5);
  EXPECT_EQ(second.WaitForReply().outcome, Outcome::kShuttingDown);
  EXPECT_EQ(core.FindAccountForTesting("a"), (AccountState{.balance = 5, .sequence = 1}));
}

TEST(ShardCoreTest, AFailedWriteRestoresEveryAccountAndAnswersStorageFailed) {
  MemoryStore store;
  ShardCore core(Options(&store));
  core.LoadAccount("a", {.balance = 50, .sequence = 4});
  store.FailWrites(true);
  RecordingCompletion deposit, opened, read;
  core.batch().push_back(MakeMessage(Op::kDeposit, "a", 10, &deposit));
  core.batch().push_back(MakeMessage(Op::kDeposit, "new", 3, &opened));
  core.batch().push_back(MakeMessage(Op::kBalance, "a", 0, &read));
  core.ProcessBatch(/*abandoning=*/false);
  EXPECT_EQ(deposit.WaitForReply().outcome, Outcome::kStorageFailed);
  EXPECT_EQ(opened.WaitForReply().outcome, Outcome::kStorageFailed);
  EXPECT_EQ(read.WaitForReply().balance, 50);  // As if read before the failed deposit.
  EXPECT_EQ(core.FindAccountForTesting("a"), (AccountState{.balance = 50, .sequence = 4}));
  EXPECT_EQ(core.FindAccountForTesting("new"), std::nullopt);
}

TEST(ShardCoreTest, MessagesAbandonedInABatchWhoseWriteFailsKeepTheirDefiniteAnswer) {
  MemoryStore store;
  ShardCore core(Options(&store));
  store.FailWrites(true);
  RecordingCompletion decided, abandoned;
  core.batch().push_back(MakeMessage(Op::kDeposit, "a", 10, &decided));
  core.batch().push_back(MakeMessage(Op::kDeposit, "a", 20, &abandoned));
  ASSERT_TRUE(core.Prefetch(/*may_block=*/false, core.last_sealed()));
  core.BeginBatch();
  core.DecideNext(/*abandoning=*/false);
  core.DecideNext(/*abandoning=*/true);
  core.CommitAndComplete();
  // The decided deposit may or may not be on disk: outcome unknown. The abandoned one was never
  // decided, so the caller still hears "shutting down, nothing applied".
  EXPECT_EQ(decided.WaitForReply().outcome, Outcome::kStorageFailed);
  EXPECT_EQ(abandoned.WaitForReply().outcome, Outcome::kShuttingDown);
  EXPECT_EQ(core.FindAccountForTesting("a"), std::nullopt);
}

// Drives one batch up to Seal, as a shard does with a pipeline; the caller owns what is in flight.
std::unique_ptr<SealedBatch> DecideAndSeal(ShardCore& core, uint64_t finished_through) {
  EXPECT_TRUE(core.Prefetch(/*may_block=*/false, finished_through));
  core.BeginBatch();
  while (!core.AllDecided()) core.DecideNext(/*abandoning=*/false);
  return core.Seal(finished_through).to_write;
}

TEST(ShardCoreTest, ARetryWhileTheFirstWriteIsInFlightIsAnsweredFromMemoryAndNotAppliedTwice) {
  MemoryStore store;
  ShardCore core(Options(&store));
  RecordingCompletion first, retry;
  core.batch().push_back(MakeMessage(Op::kDeposit, "a", 40, &first, "r1"));
  std::unique_ptr<SealedBatch> in_flight = DecideAndSeal(core, /*finished_through=*/0);
  ASSERT_NE(in_flight, nullptr);
  EXPECT_EQ(in_flight->sequence, 1u);

  core.batch().push_back(MakeMessage(Op::kDeposit, "a", 40, &retry, "r1"));
  std::unique_ptr<SealedBatch> second = DecideAndSeal(core, /*finished_through=*/0);
  ASSERT_NE(second, nullptr);  // It read an undurable change: it waits for batch 1.
  EXPECT_EQ(second->replies[0].outcome, Outcome::kOk);
  EXPECT_TRUE(second->replies[0].replayed);
  EXPECT_EQ(second->replies[0].balance, 40);
  EXPECT_TRUE(second->write.empty());
  EXPECT_EQ(core.FindAccountForTesting("a"), (AccountState{.balance = 40, .sequence = 1}));
  in_flight->CompleteAll();
  second->CompleteAll();
  EXPECT_TRUE(retry.HasReply());
}

// Found by the pipelined simulator: a record whose write was still in flight used to be replayed
// after its TTL, while the same retry once the write was durable was decided anew.
TEST(ShardCoreTest, ARecordInFlightExpiresLikeAStoredOne) {
  MemoryStore store;
  absl::Time now = absl::FromUnixSeconds(1000);
  ShardCoreOptions options = Options(&store);
  options.idempotency_ttl = absl::Seconds(60);
  options.clock = [&now] { return now; };
  ShardCore core(options);
  RecordingCompletion first, retry;
  core.batch().push_back(MakeMessage(Op::kDeposit, "a", 40, &first, "r1"));
  std::unique_ptr<SealedBatch> in_flight = DecideAndSeal(core, /*finished_through=*/0);
  ASSERT_NE(in_flight, nullptr);

  now += absl::Seconds(60);  // The record is exactly as old as the TTL: it no longer counts.
  core.batch().push_back(MakeMessage(Op::kDeposit, "a", 40, &retry, "r1"));
  std::unique_ptr<SealedBatch> second = DecideAndSeal(core, /*finished_through=*/0);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->replies[0].outcome, Outcome::kOk);
  EXPECT_FALSE(second->replies[0].replayed);
  EXPECT_EQ(second->replies[0].balance, 80);
  EXPECT_EQ(second->write.journal.size(), 1u);
  in_flight->CompleteAll();
  second->CompleteAll();
}

TEST(CheckDeathTest, AComparisonThatFailsPrintsBothValuesAndAborts) {
  const int64_t balance = -7;
  EXPECT_DEATH(LEDGER_CHECK_GE(balance, -5), "check failed at .*balance >= -5 \\(-7 vs -5\\)");
  const uint64_t sequence = 3;
  EXPECT_DEATH(LEDGER_CHECK_EQ(sequence, uint64_t{2} + 2), "\\(3 vs 4\\)");
}

}  // namespace
}  // namespace ledger
