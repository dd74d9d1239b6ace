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
#include "sim/fault_store.h"
#include "sim/transfer_auditor.h"

namespace ledger::sim {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

TEST(SimulatorTest, TheSameSeedGivesTheSameRun) {
  const SimResult first = Simulate({.seed = 7, .steps = 400});
  const SimResult second = Simulate({.seed = 7, .steps = 400});
  const SimResult other = Simulate({.seed = 4, .steps = 400});
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
  EXPECT_GT(first.unapplied_answers, 0);
  EXPECT_EQ(first.unapplied_answers, second.unapplied_answers);
  EXPECT_GT(first.failed_lookup_batches, 0);
  EXPECT_EQ(first.failed_lookup_batches, second.failed_lookup_batches);
  EXPECT_GT(first.backups, 0);
  EXPECT_EQ(first.backups, second.backups);
  EXPECT_GT(first.checkpoints, 0);
  EXPECT_EQ(first.checkpoints, second.checkpoints);
  // Restarts find failed log entries both ways: torn (dropped) and whole (kept). A few a run at
  // this length, so the two seeds' together.
  EXPECT_GT(first.torn_tails + other.torn_tails, 0);
  EXPECT_GT(first.kept_failed_entries + other.kept_failed_entries, 0);
  EXPECT_EQ(first.torn_tails, second.torn_tails);
  EXPECT_EQ(first.kept_failed_entries, second.kept_failed_entries);
  EXPECT_NE(first.messages, other.messages);
  // The change stream's consumer rebuilt the accounts from the log, and caught up behind
  // checkpoints by resyncing.
  EXPECT_GT(first.watched_operations, 0);
  EXPECT_EQ(first.watched_operations, second.watched_operations);
  EXPECT_GT(first.watcher_resyncs + other.watcher_resyncs, 0);
}

TEST(SimulatorTest, CatchesAChangeStreamWithAGap) {
  const SimResult result = Simulate({.seed = 7, .steps = 2000, .watcher_skips_positions = true});
  EXPECT_FALSE(result.ok);
  EXPECT_THAT(result.failure, HasSubstr("the watcher"));
}

TEST(SimulatorTest, OneBatchInFlightIsLegalToo) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const SimResult result =
        Simulate({.seed = seed, .steps = 400, .max_in_flight = 1, .writes_in_flight = 1});
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
  // The Auditor sees the accounts differ, or the TransferAuditor an answer the store lacks (a
  // record it does not hold, or holds still pending, or a released transfer's journal entries).
  EXPECT_THAT(FirstFailure(CoreBugForTesting::kNone, StoreBugForTesting::kLoseAcknowledgedWrites),
              AnyOf(HasSubstr("differ from the model"), HasSubstr("is not durable"),
                    HasSubstr("are not durable"), HasSubstr("still pending in the store")));
}

// The store's applier lags behind its log; a store whose lookups that must not wait missed the
// records only the log holds would decide a retry as new (docs/architecture.md, "Durability").
TEST(SimulatorTest, CatchesAStoreWhoseLookupsMissRecordsNotYetApplied) {
  EXPECT_THAT(
      FirstFailure(CoreBugForTesting::kNone, StoreBugForTesting::kLookupsMissUnappliedRecords),
      AnyOf(HasSubstr("(replayed)"), HasSubstr("differ from the model")));
}

// A backup of the applied tables alone (without the log after them) loses what the applier had
// not reached when it was taken.
TEST(SimulatorTest, CatchesABackupWithoutTheLogAfterItsTables) {
  EXPECT_THAT(
      FirstFailure(CoreBugForTesting::kNone, StoreBugForTesting::kBackupMissesTheLogAfterTheTables),
      HasSubstr("a backup restores to a state the log never held: "));
}

// Idempotency records skip the applier and wait in memory for a checkpoint (storage::
// RecentRequests); a checkpoint that dropped them instead of writing them would let a retry after
// it be decided as new.
TEST(SimulatorTest, CatchesACheckpointThatDropsTheIdempotencyRecordsHeldInMemory) {
  EXPECT_THAT(
      FirstFailure(CoreBugForTesting::kNone, StoreBugForTesting::kCheckpointDropsRecentRequests),
      AnyOf(HasSubstr("(replayed)"), HasSubstr("differ from the model"),
            HasSubstr("request records")));
}

// A failed append's entry must be gone once the log is repaired: a repair that left it would bring
// back, at the next restart, a write the shards rolled back and decided on without.
TEST(SimulatorTest, CatchesALogRepairThatKeepsTheFailedEntry) {
  EXPECT_THAT(
      FirstFailure(CoreBugForTesting::kNone, StoreBugForTesting::kRepairKeepsTheFailedEntry),
      AnyOf(HasSubstr("differ from the model"), HasSubstr("conservation")));
}

// A cluster replica that lost its leadership with an entry in flight must start again as a
// follower before it writes: the next leader may commit that entry, and writes decided without
// it would precede it.
TEST(SimulatorTest, CatchesAReplicaThatWritesOnAfterALostLeadership) {
  EXPECT_THAT(FirstFailure(CoreBugForTesting::kNone, StoreBugForTesting::kRepairsALostLeadership),
              AnyOf(HasSubstr("repaired away"), HasSubstr("differ from the model"),
                    HasSubstr("conservation")));
}

// A replica with writes in flight (seeds give it 1 to 3): a write started behind one that
// failed must fail with it, never repair the log and land, since the shards roll it back.
TEST(SimulatorTest, CatchesAStoreThatRepairsTheLogUnderWritesInFlight) {
  EXPECT_THAT(
      FirstFailure(CoreBugForTesting::kNone, StoreBugForTesting::kRepairsUnderWritesInFlight),
      AnyOf(HasSubstr("differ from the model"), HasSubstr("conservation")));
}

// Watch with_balances: a snapshot's states are those the applier reached, so the position it
// names must be the applier's. Naming the newest acknowledged one instead loses the entries in
// between from the watcher's rebuilt accounts.
TEST(SimulatorTest, CatchesABalancesSnapshotNamingTheWrongPosition) {
  EXPECT_THAT(FirstFailure(CoreBugForTesting::kNone,
                           StoreBugForTesting::kSnapshotNamesTheAcknowledgedPosition),
              HasSubstr("the watcher"));
}

// Several writes in flight: later ones fail behind a failed one, and restarts after a lost
// leadership keep a prefix of the entries that were in flight, more than one at times.
TEST(SimulatorTest, WritesInFlightEndInOrderAndFailBehindAFailedOne) {
  int64_t behind = 0;
  int64_t several_kept = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    const SimResult result = Simulate({.seed = seed, .steps = 1500, .writes_in_flight = 3});
    ASSERT_TRUE(result.ok) << result.failure;
    EXPECT_EQ(result.writes_in_flight, 3);
    EXPECT_EQ(result.max_writes_in_flight, 3);
    behind += result.groups_behind_a_failure;
    several_kept += result.several_kept;
  }
  EXPECT_GT(behind, 0);
  EXPECT_GT(several_kept, 0);
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

// Transfers (docs/architecture.md, "Transfers"): same-shard and across the two pretend shards,
// the simulator carrying the cross-shard steps as the coordinator does, through failed writes,
// restarts and crashes; every run ends with no transfer left pending.
TEST(SimulatorTest, TransfersEndExactlyOnceThroughFaultsAndRestarts) {
  SimResult total;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    const SimResult result = Simulate({.seed = seed, .steps = 500});
    ASSERT_TRUE(result.ok) << result.failure;
    total.transfers_local += result.transfers_local;
    total.transfers_cross += result.transfers_cross;
    total.credits_sent += result.credits_sent;
    total.settles_sent += result.settles_sent;
    total.resume_only_sent += result.resume_only_sent;
    total.step_retries += result.step_retries;
    total.transfers_resumed += result.transfers_resumed;
    total.transfers_committed += result.transfers_committed;
    total.transfers_refunded += result.transfers_refunded;
    total.journal_refunds += result.journal_refunds;
    for (size_t i = 0; i < total.outcomes.size(); ++i) total.outcomes[i] += result.outcomes[i];
  }
  // The runs exercise what they claim to.
  EXPECT_GT(total.transfers_local, 0);
  EXPECT_GT(total.transfers_cross, 0);
  EXPECT_GT(total.credits_sent, 0);
  EXPECT_GT(total.settles_sent, 0);
  EXPECT_GT(total.resume_only_sent, 0);
  EXPECT_GT(total.step_retries, 0);
  EXPECT_GT(total.transfers_resumed, 0);
  EXPECT_GT(total.transfers_committed, 0);
  EXPECT_GT(total.transfers_refunded, 0);
  EXPECT_GT(total.journal_refunds, 0);
  EXPECT_GT(total.outcomes[static_cast<size_t>(Outcome::kTransferIdReused)], 0);
  EXPECT_GT(total.outcomes[static_cast<size_t>(Outcome::kTransferPending)], 0);
  EXPECT_GT(total.outcomes[static_cast<size_t>(Outcome::kCounterpartyNotFound)], 0);
}

TEST(SimulatorTest, WithoutTransfersTheRunStillPasses) {
  const SimResult result = Simulate({.seed = 3, .steps = 300, .transfers = false});
  ASSERT_TRUE(result.ok) << result.failure;
  EXPECT_EQ(result.transfers_local + result.transfers_cross, 0);
}

TEST(SimulatorTest, CatchesACoordinatorThatSettlesARefusedCreditAsCommitted) {
  std::string failure;
  for (uint64_t seed = 1; seed <= 20 && failure.empty(); ++seed) {
    const SimResult result =
        Simulate({.seed = seed,
                  .steps = 500,
                  .coordinator_bug = CoordinatorBugForTesting::kSettleRefusedAsCommitted});
    failure = result.failure;
  }
  // The TransferAuditor sees the settled transfer's answer, or the money it left in flight with
  // no pending record to resume it, whichever the seed reaches first.
  EXPECT_THAT(failure, AnyOf(HasSubstr("transfers: "), HasSubstr("nobody would resume it")));
}

// The three seeds with which the simulator found transfer faults in shard/ (fixed since), replayed
// as regressions: two messages of one transfer_id in a batch after a failed write (an abort on a
// message left without a lookup); a transfer_id reused by another source of the same shard while
// the first is pending and unsettled (its pending record dropped); an adopted orphan whose
// adopting batch failed (stranded until a restart).
TEST(SimulatorTest, TransferFaultsTheSimulatorFoundStayFixed) {
  for (const auto& [seed, steps] :
       {std::pair<uint64_t, int64_t>{3, 900}, {6, 714}, {2, 1830}, {27, 300}}) {
    const SimResult result = Simulate({.seed = seed, .steps = steps});
    EXPECT_TRUE(result.ok) << "seed " << seed << ": " << result.failure;
    EXPECT_EQ(result.transfers_stuck, 0) << "seed " << seed;
    EXPECT_GT(result.transfers_cross, 0) << "seed " << seed;
  }
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

// The TransferAuditor's store checks on a store written by hand: a credit applied twice (what a
// core that applies a kTransferCredit again would leave) and money that vanished are caught.
class TransferAuditorTest : public testing::Test {
 protected:
  TransferAuditorTest() : store_(&clock_, &rng_, StoreBugForTesting::kNone) {
    world_.policy.overdraft_limit = 10;
    world_.accounts = {"s", "d"};
    world_.initial_total = 100;
    Write({{"s", 1, EntryKind::kDeposit, 100, 100}}, {{"s", 100, 1}});
  }

  struct Line {
    const char* account;
    uint64_t sequence;
    EntryKind kind;
    int64_t amount;
    int64_t balance_after;
  };
  struct State {
    const char* account;
    int64_t balance;
    uint64_t sequence;
  };
  void Write(const std::vector<Line>& lines, const std::vector<State>& states,
             std::optional<TransferRecord> pending = std::nullopt,
             std::optional<CreditReceipt> receipt = std::nullopt) {
    BatchWrite write;
    for (const Line& line : lines) {
      write.journal.push_back({.account_id = line.account,
                               .sequence = line.sequence,
                               .kind = line.kind,
                               .amount = line.amount,
                               .balance_after = line.balance_after,
                               .request_id = line.kind == EntryKind::kDeposit ? "" : "t1",
                               .time = clock_,
                               .counterparty = std::string(line.account) == "s" ? "d" : "s"});
    }
    for (const State& state : states) {
      write.accounts.push_back({.account_id = state.account,
                                .state = {.balance = state.balance, .sequence = state.sequence}});
    }
    if (pending.has_value()) {
      write.transfers.push_back({.transfer_id = "t1",
                                 .record = *pending,
                                 .ends_pending = pending->state != TransferState::kPending});
    }
    if (receipt.has_value()) write.credits.push_back({.transfer_id = "t1", .receipt = *receipt});
    store_.PlanWrite({});
    ASSERT_TRUE(store_.Write(write).ok());
  }
  static TransferRecord Record(TransferState state) {
    return {.from = "s", .to = "d", .amount = 30, .state = state};
  }

  absl::Time clock_ = absl::FromUnixSeconds(1000);
  std::mt19937_64 rng_{1};
  FaultStore store_;
  TransferWorld world_;
};

TEST_F(TransferAuditorTest, AcceptsADebitInFlightThenItsCreditAndCommit) {
  TransferAuditor auditor(world_);
  EXPECT_EQ(auditor.CheckStore(store_), "");
  Write({{"s", 2, EntryKind::kTransferOut, 30, 70}}, {{"s", 70, 2}},
        Record(TransferState::kPending));
  EXPECT_EQ(auditor.CheckStore(store_), "");
  EXPECT_EQ(auditor.in_flight_count(), 1);
  EXPECT_THAT(auditor.CheckQuiescent(store_), HasSubstr("nobody carrying"));
  Write({{"d", 1, EntryKind::kTransferIn, 30, 30}}, {{"d", 30, 1}}, std::nullopt,
        CreditReceipt{.from = "s", .outcome = Outcome::kOk, .to_balance = 30, .amount = 30});
  EXPECT_EQ(auditor.CheckStore(store_), "");
  Write({}, {}, Record(TransferState::kCommitted));
  EXPECT_EQ(auditor.CheckQuiescent(store_), "");
}

TEST_F(TransferAuditorTest, CatchesACreditAppliedTwice) {
  TransferAuditor auditor(world_);
  Write({{"s", 2, EntryKind::kTransferOut, 30, 70}}, {{"s", 70, 2}},
        Record(TransferState::kPending));
  Write({{"d", 1, EntryKind::kTransferIn, 30, 30}, {"d", 2, EntryKind::kTransferIn, 30, 60}},
        {{"d", 60, 2}});
  EXPECT_THAT(auditor.CheckStore(store_), HasSubstr("a second TRANSFER_IN"));
}

TEST_F(TransferAuditorTest, CatchesARefundOfACreditedTransfer) {
  TransferAuditor auditor(world_);
  Write({{"s", 2, EntryKind::kTransferOut, 30, 70}}, {{"s", 70, 2}},
        Record(TransferState::kPending));
  Write({{"d", 1, EntryKind::kTransferIn, 30, 30}, {"s", 3, EntryKind::kTransferRefund, 30, 100}},
        {{"d", 30, 1}, {"s", 100, 3}}, Record(TransferState::kRefused));
  EXPECT_THAT(auditor.CheckStore(store_), HasSubstr("a TRANSFER_REFUND of a transfer"));
}

TEST_F(TransferAuditorTest, CatchesMoneyInFlightThatNobodyWouldResume) {
  // The debit's record is final, yet neither its credit nor its refund was written.
  TransferAuditor auditor(world_);
  Write({{"s", 2, EntryKind::kTransferOut, 30, 70}}, {{"s", 70, 2}},
        Record(TransferState::kCommitted));
  EXPECT_THAT(auditor.CheckStore(store_), HasSubstr("not pending in the store"));
}

TEST_F(TransferAuditorTest, CatchesACreditWithoutItsDebit) {
  TransferAuditor auditor(world_);
  Write({{"d", 1, EntryKind::kTransferIn, 30, 30}}, {{"d", 30, 1}});
  EXPECT_THAT(auditor.CheckStore(store_), HasSubstr("without the matching TRANSFER_OUT"));
}

TEST_F(TransferAuditorTest, ATransferReplyMustBeLegal) {
  TransferAuditor auditor(world_);
  AuditedCall call;
  call.op = Op::kTransfer;
  call.amount = 30;
  call.account_id = "s";
  call.request_id = "t1";
  call.counterparty = "d";
  call.local_transfer = true;
  auditor.Sent(call);
  call.decided = {
      .outcome = Outcome::kOk, .balance = 70, .detail = TransferReply{.to_balance = 30}};
  EXPECT_EQ(auditor.CheckDecided(call), "");
  call.decided = {.outcome = Outcome::kInsufficientFunds, .balance = 70};
  EXPECT_THAT(auditor.CheckDecided(call), HasSubstr("covers the amount"));
  call.decided = {.outcome = Outcome::kTransferPending, .balance = 70};
  EXPECT_THAT(auditor.CheckDecided(call), HasSubstr("never pending"));
  call.local_transfer = false;
  EXPECT_THAT(auditor.CheckDecided(call), HasSubstr("never sent before"));
  auditor.Sent(call);  // A retry: the first call's debit may be pending.
  EXPECT_EQ(auditor.CheckDecided(call), "");
  call.local_transfer = true;
  call.decided = {.outcome = Outcome::kTransferIdReused};
  EXPECT_THAT(auditor.CheckDecided(call), HasSubstr("names no recorded transfer"));
}

}  // namespace
}  // namespace ledger::sim
