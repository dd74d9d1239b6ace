// The simulator is deterministic, its auditor refuses illegal replies, and planted bugs in the
// core or the store are caught with the seed that reproduces them.
#include "sim/simulator.h"

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
  // A run exercises what it claims to: faults and restarts happen.
  EXPECT_GT(first.write_faults, 0);
  EXPECT_GT(first.lookup_faults, 0);
  EXPECT_GT(first.restarts, 0);
  EXPECT_NE(first.messages, other.messages);
}

// The first of seeds 1 to 20 (500 steps each) on which the simulation fails, or "".
std::string FirstFailure(CoreBugForTesting core_bug, StoreBugForTesting store_bug) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const SimResult result =
        Simulate({.seed = seed, .steps = 500, .core_bug = core_bug, .store_bug = store_bug});
    if (!result.ok) return result.failure;
  }
  return "";
}

TEST(SimulatorTest, CatchesACoreThatSkipsTheRollbackOfAFailedWrite) {
  const std::string failure =
      FirstFailure(CoreBugForTesting::kSkipRollback, StoreBugForTesting::kNone);
  EXPECT_THAT(failure, HasSubstr("seed "));
  EXPECT_THAT(failure, HasSubstr(" step "));
  EXPECT_THAT(failure, HasSubstr("last steps:"));
}

TEST(SimulatorTest, CatchesACoreThatAppliesAReplayedRequestAgain) {
  EXPECT_THAT(FirstFailure(CoreBugForTesting::kReapplyReplays, StoreBugForTesting::kNone),
              HasSubstr("(replayed)"));
}

TEST(SimulatorTest, CatchesAStoreThatLosesAcknowledgedWrites) {
  EXPECT_THAT(FirstFailure(CoreBugForTesting::kNone, StoreBugForTesting::kLoseAcknowledgedWrites),
              HasSubstr("differ from the model"));
}

class AuditorTest : public testing::Test {
 protected:
  static AuditedCall Call(Op op, const char* account, int64_t amount, Reply reply,
                          const char* request_id = "") {
    return AuditedCall{.op = op,
                       .amount = amount,
                       .account_id = account,
                       .request_id = request_id,
                       .completions = 1,
                       .reply = reply};
  }
  static BatchFacts Wrote(WriteFault result = WriteFault::kNone) {
    return {.write_called = true, .write_result = result};
  }

  Auditor auditor_{LedgerPolicy{.overdraft_limit = 10}, absl::Seconds(60)};
  absl::Time now_ = absl::FromUnixSeconds(1000);
};

TEST_F(AuditorTest, AcceptsTheRulesAnswersAndRefusesAWrongBalance) {
  EXPECT_EQ(auditor_.CheckBatch({Call(Op::kDeposit, "a", 100, {.balance = 100}),
                                 Call(Op::kWithdraw, "a", 105, {.balance = -5})},
                                now_, Wrote()),
            "");
  EXPECT_THAT(auditor_.CheckBatch({Call(Op::kDeposit, "a", 1, {.balance = -3})}, now_, Wrote()),
              HasSubstr("legal: ok balance -4"));
}

TEST_F(AuditorTest, RefusesAWithdrawalBelowTheOverdraftFloor) {
  EXPECT_THAT(auditor_.CheckBatch({Call(Op::kDeposit, "a", 5, {.balance = 5}),
                                   Call(Op::kWithdraw, "a", 16, {.balance = -11})},
                                  now_, Wrote()),
              HasSubstr("legal: insufficient_funds balance 5"));
}

TEST_F(AuditorTest, AReplayMustRepeatTheRecordAndAReusedIdMustSaySo) {
  ASSERT_EQ(
      auditor_.CheckBatch({Call(Op::kDeposit, "a", 10, {.balance = 10}, "r1")}, now_, Wrote()), "");
  // Applied twice is illegal: the second must be the recorded reply.
  EXPECT_THAT(auditor_.CheckBatch({Call(Op::kDeposit, "a", 10, {.balance = 20}, "r1")},
                                  now_ + absl::Seconds(1), {}),
              HasSubstr("legal: ok balance 10 (replayed)"));
  Auditor fresh{LedgerPolicy{}, absl::Seconds(60)};
  ASSERT_EQ(fresh.CheckBatch({Call(Op::kDeposit, "a", 10, {.balance = 10}, "r1")}, now_, Wrote()),
            "");
  EXPECT_THAT(fresh.CheckBatch({Call(Op::kDeposit, "a", 11, {.balance = 21}, "r1")}, now_, {}),
              HasSubstr("legal: request_id_reused"));
  // After the TTL the id is new again: applying it is the legal answer.
  EXPECT_EQ(fresh.CheckBatch({Call(Op::kDeposit, "a", 11, {.balance = 21}, "r1")},
                             now_ + absl::Seconds(60), Wrote()),
            "");
}

TEST_F(AuditorTest, AFailedWriteAnswersStorageFailedAndConservationCountsWhatLanded) {
  absl::Time clock = now_;
  std::mt19937_64 rng(1);
  FaultStore store(&clock, &rng, StoreBugForTesting::kNone);
  // Nothing written: a claim that the failed deposit applied is illegal.
  EXPECT_THAT(auditor_.CheckBatch({Call(Op::kDeposit, "a", 10, {.balance = 10})}, now_,
                                  Wrote(WriteFault::kFail)),
              HasSubstr("legal: storage_failed"));
  EXPECT_EQ(
      auditor_.CheckBatch({Call(Op::kDeposit, "a", 10, {.outcome = Outcome::kStorageFailed}),
                           Call(Op::kBalance, "a", 0, {.outcome = Outcome::kAccountNotFound})},
                          now_, Wrote(WriteFault::kFail)),
      "");
  EXPECT_EQ(auditor_.CheckStore(store), "");
  // The store holds money nobody deposited: conservation (and the model) says so.
  store.BeginBatch({});
  BatchWrite invented;
  invented.accounts.push_back({.account_id = "a", .state = {.balance = 7, .sequence = 1}});
  JournalEntry entry;
  entry.account_id = "a";
  entry.sequence = 1;
  entry.amount = 7;
  entry.balance_after = 7;
  invented.journal.push_back(entry);
  ASSERT_TRUE(store.Write(invented).ok());
  EXPECT_THAT(auditor_.CheckStore(store), HasSubstr("differ from the model"));
}

TEST_F(AuditorTest, ACallerWhoLeftIsNeverAppliedAndEveryCallIsCompletedOnce) {
  AuditedCall gone = Call(Op::kDeposit, "a", 10, {.balance = 10});
  gone.caller_gone = true;
  EXPECT_THAT(auditor_.CheckBatch({gone}, now_, Wrote()), HasSubstr("legal: caller_gone"));
  AuditedCall twice = Call(Op::kBalance, "a", 0, {.outcome = Outcome::kAccountNotFound});
  twice.completions = 2;
  EXPECT_THAT(auditor_.CheckBatch({twice}, now_, {}), HasSubstr("completed 2 times"));
}

}  // namespace
}  // namespace ledger::sim
