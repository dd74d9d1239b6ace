// The simulator is deterministic, its auditor refuses illegal replies, and planted bugs in the
// core or the store are caught with the seed that reproduces them.
#include "sim/simulator.h"

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/auditor.h"

namespace ledger::sim {
namespace {

using ::testing::HasSubstr;

TEST(SimulatorTest, TheSameSeedGivesTheSameRun) {
  const SimResult first = Simulate({.seed = 7, .steps = 400});
  const SimResult second = Simulate({.seed = 7, .steps = 400});
  const SimResult other = Simulate({.seed = 8, .steps = 400});
  ASSERT_TRUE(first.ok) << first.failure;
  EXPECT_EQ(first.messages, second.messages);
  EXPECT_EQ(first.write_faults, second.write_faults);
  EXPECT_EQ(first.lookup_faults, second.lookup_faults);
  EXPECT_EQ(first.restarts, second.restarts);
  EXPECT_EQ(first.groups, second.groups);
  EXPECT_EQ(first.outcomes, second.outcomes);
  // A run exercises what it claims to: faults and restarts happen, and the pipeline holds several
  // batches in flight, writes them in groups (also while a batch is being decided), rolls back
  // batches decided on top of a failed one, and retries prefetches that needed the disk.
  EXPECT_GT(first.write_faults, 0);
  EXPECT_GT(first.lookup_faults, 0);
  EXPECT_GT(first.restarts, 0);
  EXPECT_GT(first.max_in_flight, 2);
  EXPECT_GT(first.grouped_batches, first.groups);
  EXPECT_GT(first.rolled_back_batches, first.rollbacks);
  EXPECT_GT(first.writes_while_deciding, 0);
  EXPECT_GT(first.prefetch_retries, 0);
  EXPECT_GT(first.undurable_reads, 0);
  EXPECT_GT(first.in_flight_record_answers, 0);
  EXPECT_GT(first.crashes, 0);
  EXPECT_NE(first.messages, other.messages);
}

TEST(SimulatorTest, OneBatchInFlightIsLegalToo) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const SimResult result = Simulate({.seed = seed, .steps = 400, .max_in_flight = 1});
    ASSERT_TRUE(result.ok) << result.failure;
    EXPECT_EQ(result.max_in_flight, 1);
  }
}

// The first of seeds 1 to 20 (500 steps each) on which the simulation fails, or "".
std::string FirstFailure(CoreBugForTesting core_bug, StoreBugForTesting store_bug,
                         PipelineBugForTesting pipeline_bug = PipelineBugForTesting::kNone) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const SimResult result = Simulate({.seed = seed,
                                       .steps = 500,
                                       .core_bug = core_bug,
                                       .store_bug = store_bug,
                                       .pipeline_bug = pipeline_bug});
    if (!result.ok) return result.failure;
  }
  return "";
}

TEST(SimulatorTest, CatchesACoreThatSkipsTheRollbackOfAFailedWrite) {
  const std::string failure =
      FirstFailure(CoreBugForTesting::kSkipRollback, StoreBugForTesting::kNone);
  EXPECT_THAT(failure, HasSubstr("seed "));
  EXPECT_THAT(failure, HasSubstr(" step "));
  EXPECT_THAT(failure, HasSubstr("last events:"));
}

TEST(SimulatorTest, CatchesACoreThatAppliesAReplayedRequestAgain) {
  EXPECT_THAT(FirstFailure(CoreBugForTesting::kReapplyReplays, StoreBugForTesting::kNone),
              HasSubstr("(replayed)"));
}

TEST(SimulatorTest, CatchesAStoreThatLosesAcknowledgedWrites) {
  EXPECT_THAT(FirstFailure(CoreBugForTesting::kNone, StoreBugForTesting::kLoseAcknowledgedWrites),
              HasSubstr("differ from the model"));
}

TEST(SimulatorTest, CatchesAPipelineThatAnswersBeforeTheWriteIsDurable) {
  EXPECT_THAT(FirstFailure(CoreBugForTesting::kNone, StoreBugForTesting::kNone,
                           PipelineBugForTesting::kReleaseBeforeWrite),
              HasSubstr("released before its batch's write was durable"));
}

TEST(SimulatorTest, CatchesAPipelineThatAnswersBatchesOutOfOrder) {
  EXPECT_THAT(FirstFailure(CoreBugForTesting::kNone, StoreBugForTesting::kNone,
                           PipelineBugForTesting::kReleaseOutOfOrder),
              HasSubstr("released out of order"));
}

class AuditorTest : public testing::Test {
 protected:
  static AuditedCall Call(Op op, const char* account, int64_t amount, Reply decided,
                          const char* request_id = "") {
    return AuditedCall{.op = op,
                       .amount = amount,
                       .account_id = account,
                       .request_id = request_id,
                       .decided = decided,
                       .completions = 0,
                       .reply = {}};
  }
  // Decides and seals one batch as the core would; returns its id, or 0 after a violation
  // (kept in violation_).
  uint64_t Seal(const std::vector<AuditedCall>& calls, absl::Time time, bool wrote) {
    const uint64_t id = auditor_->BeginBatch();
    violation_ = auditor_->Decide(id, calls, time, /*lookup_failures=*/0, /*sealed=*/true, wrote);
    return violation_.empty() ? id : 0;
  }
  // Writes the oldest `count` sealed batches as one group.
  std::string Write(size_t count, bool write_called, WriteFault result = WriteFault::kNone) {
    return auditor_->GroupWritten(count, {.write_called = write_called, .write_result = result});
  }
  // Releases batch `id` with `replies`; returns the first violation.
  std::string Release(uint64_t id, const std::vector<Reply>& replies) {
    for (size_t i = 0; i < replies.size(); ++i) auditor_->Released(id, i, replies[i]);
    return auditor_->TakeViolation();
  }
  // One batch decided, written alone (it writes when `write` is set) and released.
  std::string Batch(const std::vector<AuditedCall>& calls, absl::Time time,
                    std::optional<WriteFault> write) {
    const uint64_t id = Seal(calls, time, write.has_value());
    if (id == 0) return violation_;
    std::string failure = Write(1, write.has_value(), write.value_or(WriteFault::kNone));
    if (!failure.empty()) return failure;
    std::vector<Reply> replies;
    for (const AuditedCall& call : calls) replies.push_back(call.decided);
    return Release(id, replies);
  }

  void SetUp() override { Reset(); }
  void Reset() { auditor_.emplace(LedgerPolicy{.overdraft_limit = 10}, absl::Seconds(60)); }

  std::optional<Auditor> auditor_;
  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::string violation_;
};

TEST_F(AuditorTest, AcceptsTheRulesAnswersAndRefusesAWrongBalance) {
  EXPECT_EQ(Batch({Call(Op::kDeposit, "a", 100, {.balance = 100}),
                   Call(Op::kWithdraw, "a", 105, {.balance = -5})},
                  now_, WriteFault::kNone),
            "");
  EXPECT_THAT(Batch({Call(Op::kDeposit, "a", 1, {.balance = -3})}, now_, WriteFault::kNone),
              HasSubstr("legal: ok balance -4"));
}

TEST_F(AuditorTest, RefusesAWithdrawalBelowTheOverdraftFloor) {
  EXPECT_THAT(Batch({Call(Op::kDeposit, "a", 5, {.balance = 5}),
                     Call(Op::kWithdraw, "a", 16, {.balance = -11})},
                    now_, WriteFault::kNone),
              HasSubstr("legal: insufficient_funds balance 5"));
}

TEST_F(AuditorTest, AReplayMustRepeatTheRecordAndAReusedIdMustSaySo) {
  ASSERT_EQ(Batch({Call(Op::kDeposit, "a", 10, {.balance = 10}, "r1")}, now_, WriteFault::kNone),
            "");
  // Applied twice is illegal: the second must be the recorded reply.
  EXPECT_THAT(Batch({Call(Op::kDeposit, "a", 10, {.balance = 20}, "r1")}, now_ + absl::Seconds(1),
                    std::nullopt),
              HasSubstr("legal: ok balance 10 (replayed)"));
  auditor_.emplace(LedgerPolicy{}, absl::Seconds(60));
  ASSERT_EQ(Batch({Call(Op::kDeposit, "a", 10, {.balance = 10}, "r1")}, now_, WriteFault::kNone),
            "");
  EXPECT_THAT(Batch({Call(Op::kDeposit, "a", 11, {.balance = 21}, "r1")}, now_, std::nullopt),
              HasSubstr("legal: request_id_reused"));
  // After the TTL the id is new again: applying it is the legal answer.
  auditor_.emplace(LedgerPolicy{}, absl::Seconds(60));
  ASSERT_EQ(Batch({Call(Op::kDeposit, "a", 10, {.balance = 10}, "r1")}, now_, WriteFault::kNone),
            "");
  EXPECT_EQ(Batch({Call(Op::kDeposit, "a", 11, {.balance = 21}, "r1")}, now_ + absl::Seconds(60),
                  WriteFault::kNone),
            "");
}

TEST_F(AuditorTest, ARetryWhileTheFirstCallIsInFlightIsAnsweredFromItsRecord) {
  const uint64_t first = Seal({Call(Op::kDeposit, "a", 10, {.balance = 10}, "r1")}, now_, true);
  ASSERT_NE(first, 0u) << violation_;
  // Decided before the first write returned: the record is in the shard's memory only.
  EXPECT_THAT(Batch({Call(Op::kDeposit, "a", 10, {.balance = 20}, "r1")}, now_, std::nullopt),
              HasSubstr("legal: ok balance 10 (replayed)"));
}

TEST_F(AuditorTest, AFailedWriteAnswersStorageFailedAndConservationCountsWhatLanded) {
  absl::Time clock = now_;
  std::mt19937_64 rng(1);
  FaultStore store(&clock, &rng, StoreBugForTesting::kNone);
  // Nothing written: the failed deposit must be answered storage_failed after the rollback.
  uint64_t id = Seal({Call(Op::kDeposit, "a", 10, {.balance = 10})}, now_, true);
  ASSERT_EQ(Write(1, true, WriteFault::kFail), "");
  EXPECT_THAT(auditor_->RolledBack({{Reply{.balance = 10}}}), HasSubstr("legal: storage_failed"));
  Reset();
  id = Seal(
      {Call(Op::kDeposit, "a", 10, {.balance = 10}), Call(Op::kBalance, "a", 0, {.balance = 10})},
      now_, true);
  ASSERT_EQ(Write(1, true, WriteFault::kFail), "");
  const std::vector<Reply> rewritten = {{.outcome = Outcome::kStorageFailed},
                                        {.outcome = Outcome::kAccountNotFound}};
  ASSERT_EQ(auditor_->RolledBack({rewritten}), "");
  EXPECT_EQ(Release(id, rewritten), "");
  EXPECT_EQ(auditor_->CheckStore(store), "");
  // The store holds money nobody deposited: conservation (and the model) says so.
  store.PlanWrite({});
  BatchWrite invented;
  invented.accounts.push_back({.account_id = "a", .state = {.balance = 7, .sequence = 1}});
  JournalEntry entry;
  entry.account_id = "a";
  entry.sequence = 1;
  entry.amount = 7;
  entry.balance_after = 7;
  invented.journal.push_back(entry);
  ASSERT_TRUE(store.Write(invented).ok());
  EXPECT_THAT(auditor_->CheckStore(store), HasSubstr("differ from the model"));
}

TEST_F(AuditorTest, AFailedWriteTakesBackEveryBatchDecidedOnTopOfIt) {
  const uint64_t first = Seal({Call(Op::kDeposit, "a", 10, {.balance = 10})}, now_, true);
  const uint64_t second = Seal(
      {Call(Op::kWithdraw, "a", 4, {.balance = 6}), Call(Op::kBalance, "a", 0, {.balance = 6})},
      now_, true);
  ASSERT_NE(second, 0u) << violation_;
  ASSERT_EQ(Write(1, true, WriteFault::kFail), "");
  // The second read the first's undurable deposit: both are taken back, and its read is answered
  // from the state before both.
  EXPECT_THAT(auditor_->RolledBack({{{.outcome = Outcome::kStorageFailed}},
                                    {{.outcome = Outcome::kStorageFailed}, {.balance = 6}}}),
              HasSubstr("legal: account_not_found"));
  Reset();
  ASSERT_NE(Seal({Call(Op::kDeposit, "a", 10, {.balance = 10})}, now_, true), 0u);
  ASSERT_NE(Seal({Call(Op::kBalance, "a", 0, {.balance = 10})}, now_, false), 0u);
  ASSERT_EQ(Write(1, true, WriteFault::kFail), "");
  EXPECT_THAT(auditor_->RolledBack({{{.outcome = Outcome::kStorageFailed}}}),
              HasSubstr("the core rolled back 1 batches; the model has 2"));
  (void)first;
}

TEST_F(AuditorTest, RepliesWaitForTheirWriteAndGoOutInOrder) {
  const uint64_t first = Seal({Call(Op::kDeposit, "a", 10, {.balance = 10})}, now_, true);
  const uint64_t second = Seal({Call(Op::kDeposit, "a", 5, {.balance = 15})}, now_, true);
  ASSERT_NE(second, 0u) << violation_;
  EXPECT_THAT(Release(first, {{.balance = 10}}),
              HasSubstr("released before its batch's write was durable"));
  Reset();
  const uint64_t one = Seal({Call(Op::kDeposit, "a", 10, {.balance = 10})}, now_, true);
  const uint64_t two = Seal({Call(Op::kDeposit, "a", 5, {.balance = 15})}, now_, true);
  ASSERT_EQ(Write(2, true), "");
  EXPECT_THAT(Release(two, {{.balance = 15}}), HasSubstr("released out of order"));
  Reset();
  const uint64_t again = Seal({Call(Op::kDeposit, "a", 10, {.balance = 10})}, now_, true);
  ASSERT_EQ(Write(1, true), "");
  EXPECT_EQ(Release(again, {{.balance = 10}}), "");
  EXPECT_EQ(auditor_->CheckAllReleased(), "");
  (void)one;
}

TEST_F(AuditorTest, ACallerWhoLeftIsNeverAppliedAndEveryCallIsCompletedOnce) {
  EXPECT_THAT(Batch({[] {
                      AuditedCall gone = Call(Op::kDeposit, "a", 10, {.balance = 10});
                      gone.caller_gone = true;
                      return gone;
                    }()},
                    now_, WriteFault::kNone),
              HasSubstr("legal: caller_gone"));
  Reset();
  const uint64_t id =
      Seal({Call(Op::kBalance, "a", 0, {.outcome = Outcome::kAccountNotFound})}, now_, false);
  ASSERT_EQ(Write(1, false), "");
  const Reply not_found{.outcome = Outcome::kAccountNotFound};
  EXPECT_EQ(Release(id, {not_found}), "");
  auditor_->Released(id, 0, not_found);
  EXPECT_THAT(auditor_->TakeViolation(), HasSubstr("completed again"));
}

}  // namespace
}  // namespace ledger::sim
