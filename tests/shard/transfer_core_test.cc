// Transfers at the shards: the contract's rules in order (proto/ledger/v1/ledger.proto), same-shard
// and across shards, with and without a store; replays by transfer_id; a failed write at each
// step; the room a pending transfer's refund keeps in its source's balance; and resuming a
// transfer left pending by a crash.
#include <atomic>
#include <cstdint>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "shard/router.h"
#include "shard/shard_core.h"
#include "tests/shard/memory_store.h"
#include "tests/shard/shard_test_util.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using testing_util::AwaitReply;
using testing_util::CallShard;
using testing_util::MakeMessage;
using testing_util::MemoryStore;
using testing_util::RecordingCompletion;
using testing_util::WaitUntil;

constexpr int32_t kShards = 2;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
const absl::Time kNow = absl::FromUnixSeconds(1000);

// An account id that a router of `shards` places on `shard`.
std::string IdOn(int32_t shard, absl::string_view prefix, int32_t shards = kShards) {
  return testing_util::AccountOnShard(std::string(prefix), shard, shards);
}

std::unique_ptr<Router> MakeRouter(LedgerStore* store, size_t mailbox_capacity = 64,
                                   int32_t shards = kShards) {
  RouterOptions options;
  options.num_shards = shards;
  options.shard.store = store;
  options.shard.mailbox_capacity = mailbox_capacity;
  options.shard.clock = [] { return kNow; };
  options.transfers.retry_delay = absl::Microseconds(200);
  options.transfers.max_retry_delay = absl::Milliseconds(5);
  absl::StatusOr<std::unique_ptr<Router>> router = Router::Create(options);
  EXPECT_TRUE(router.ok()) << router.status();
  return *std::move(router);
}

// The balance, or nullopt when the account does not exist.
std::optional<int64_t> BalanceOf(Router& router, absl::string_view account_id) {
  const Reply reply = CallShard(router, Op::kBalance, account_id, 0);
  if (reply.outcome == Outcome::kAccountNotFound) return std::nullopt;
  EXPECT_EQ(reply.outcome, Outcome::kOk);
  return reply.balance;
}

Reply Transfer(Router& router, absl::string_view transfer_id, absl::string_view from,
               absl::string_view to, int64_t amount) {
  RecordingCompletion completion;
  EXPECT_EQ(router.transfers().Submit(transfer_id, from, to, amount, &completion),
            SendOutcome::kAccepted);
  return AwaitReply(completion);
}

// The journal entries a transfer wrote, in the order they were written.
std::vector<JournalEntry> EntriesOf(const MemoryStore& store, absl::string_view transfer_id) {
  std::vector<JournalEntry> entries;
  for (const JournalEntry& entry : store.journal()) {
    if (entry.request_id == transfer_id) entries.push_back(entry);
  }
  return entries;
}

std::optional<TransferRecord> RecordOf(const MemoryStore& store, const std::string& transfer_id) {
  std::map<std::string, TransferRecord> records = store.transfers();
  auto found = records.find(transfer_id);
  if (found == records.end()) return std::nullopt;
  return found->second;
}

// ---------------------------------------------------------------------------------------------
// The rules table.

struct TransferRuleCase {
  const char* name;
  std::optional<int64_t> from_opening;  // Deposited before; nullopt: never opened.
  std::optional<int64_t> to_opening;
  int64_t amount;
  Outcome outcome;
  // The destination refused it (across shards: the source was debited, then refunded).
  bool refused_by_destination;
  // Across shards, when it differs: the destination's checks run after the source's there.
  std::optional<Outcome> cross_outcome = std::nullopt;
};

const TransferRuleCase kTransferRuleCases[] = {
    {"Ok", 100, 50, 30, Outcome::kOk, false},
    {"OkWholeBalance", 100, 50, 100, Outcome::kOk, false},
    {"SourceNotFound", std::nullopt, 50, 30, Outcome::kAccountNotFound, false},
    // The source is checked before the destination.
    {"NeitherExists", std::nullopt, std::nullopt, 30, Outcome::kAccountNotFound, false},
    {"DestinationNotFound", 100, std::nullopt, 30, Outcome::kCounterpartyNotFound, true},
    {"InsufficientFunds", 100, 50, 101, Outcome::kInsufficientFunds, false},
    {"DestinationOverflows", 100, kInt64Max - 10, 11, Outcome::kOverflow, true},
    {"DestinationFillsToTheMax", 100, kInt64Max - 10, 10, Outcome::kOk, false},
    // Funds are checked before the destination's overflow.
    {"InsufficientFundsAndOverflow", 100, kInt64Max - 10, 101, Outcome::kInsufficientFunds, false},
    // Both opened comes before funds; across shards the source cannot know the destination.
    {"InsufficientFundsAndDestinationNotFound", 100, std::nullopt, 101,
     Outcome::kCounterpartyNotFound, false, Outcome::kInsufficientFunds},
};

// (across shards, with a store)
class TransferRulesTest : public testing::TestWithParam<std::tuple<bool, bool>> {};
INSTANTIATE_TEST_SUITE_P(Placements, TransferRulesTest,
                         testing::Combine(testing::Bool(), testing::Bool()),
                         [](const testing::TestParamInfo<std::tuple<bool, bool>>& info) {
                           return absl::StrCat(
                               std::get<0>(info.param) ? "CrossShard" : "SameShard",
                               std::get<1>(info.param) ? "WithStore" : "WithoutStore");
                         });

TEST_P(TransferRulesTest, EachRuleGivesItsOutcomeBalancesEntriesAndRecord) {
  const auto [cross, durable] = GetParam();
  std::unique_ptr<MemoryStore> store = durable ? std::make_unique<MemoryStore>() : nullptr;
  auto router = MakeRouter(store.get());
  router->Start();
  for (const TransferRuleCase& rule : kTransferRuleCases) {
    SCOPED_TRACE(rule.name);
    const std::string from = IdOn(0, absl::StrCat(rule.name, "-from"));
    const std::string to = IdOn(cross ? 1 : 0, absl::StrCat(rule.name, "-to"));
    const std::string id = absl::StrCat("t-", rule.name);
    if (rule.from_opening) {
      ASSERT_EQ(CallShard(*router, Op::kDeposit, from, *rule.from_opening).outcome, Outcome::kOk);
    }
    if (rule.to_opening) {
      ASSERT_EQ(CallShard(*router, Op::kDeposit, to, *rule.to_opening).outcome, Outcome::kOk);
    }
    const Outcome outcome = cross && rule.cross_outcome ? *rule.cross_outcome : rule.outcome;
    const Reply reply = Transfer(*router, id, from, to, rule.amount);
    EXPECT_EQ(reply.outcome, outcome) << OutcomeName(reply.outcome);
    EXPECT_FALSE(reply.replayed);
    const bool ok = outcome == Outcome::kOk;
    const std::optional<int64_t> from_after =
        rule.from_opening ? std::optional<int64_t>(*rule.from_opening - (ok ? rule.amount : 0))
                          : std::nullopt;
    const std::optional<int64_t> to_after =
        rule.to_opening ? std::optional<int64_t>(*rule.to_opening + (ok ? rule.amount : 0))
                        : std::nullopt;
    EXPECT_EQ(BalanceOf(*router, from), from_after);
    EXPECT_EQ(BalanceOf(*router, to), to_after);
    if (ok) {
      EXPECT_EQ(reply.balance, *from_after);
      EXPECT_EQ(reply.transfer().to_balance, *to_after);
    }
    EXPECT_EQ(router->transfers().in_flight_count(), 0);
    EXPECT_EQ(router->transfers().in_flight_amount(), 0);
    if (!durable) continue;

    // The journal: out and in when it moved; out and refund when the destination across shards
    // refused it after the debit; nothing when refused before any change.
    std::vector<JournalEntry> entries = EntriesOf(*store, id);
    std::vector<std::tuple<std::string, EntryKind, int64_t, std::string>> expected;
    if (ok) {
      expected = {{from, EntryKind::kTransferOut, *from_after, to},
                  {to, EntryKind::kTransferIn, *to_after, from}};
    } else if (cross && rule.refused_by_destination) {
      expected = {{from, EntryKind::kTransferOut, *rule.from_opening - rule.amount, to},
                  {from, EntryKind::kTransferRefund, *rule.from_opening, to}};
    }
    ASSERT_EQ(entries.size(), expected.size());
    for (size_t i = 0; i < entries.size(); ++i) {
      SCOPED_TRACE(i);
      EXPECT_EQ(entries[i].account_id, std::get<0>(expected[i]));
      EXPECT_EQ(entries[i].kind, std::get<1>(expected[i]));
      EXPECT_EQ(entries[i].amount, rule.amount);
      EXPECT_EQ(entries[i].balance_after, std::get<2>(expected[i]));
      EXPECT_EQ(entries[i].counterparty, std::get<3>(expected[i]));
      EXPECT_EQ(entries[i].request_id, id);
      EXPECT_EQ(entries[i].time, kNow);
    }
    // The stored record is final, with the outcome.
    std::optional<TransferRecord> record = RecordOf(*store, id);
    ASSERT_TRUE(record.has_value());
    EXPECT_EQ(record->from, from);
    EXPECT_EQ(record->to, to);
    EXPECT_EQ(record->amount, rule.amount);
    EXPECT_EQ(record->state, ok ? TransferState::kCommitted : TransferState::kRefused);
    EXPECT_EQ(record->outcome, outcome);
    EXPECT_EQ(record->created_at, kNow);
    EXPECT_EQ(record->finished_at, kNow);
    if (ok) {
      EXPECT_EQ(record->from_balance, *from_after);
      EXPECT_EQ(record->to_balance, *to_after);
      EXPECT_EQ(record->credited_at, kNow);
    }

    // A retry with the same fields: the recorded result, nothing applied again.
    const size_t journal_before = store->journal().size();
    const Reply replay = Transfer(*router, id, from, to, rule.amount);
    EXPECT_EQ(replay.outcome, outcome) << OutcomeName(replay.outcome);
    EXPECT_TRUE(replay.replayed);
    EXPECT_EQ(replay.balance, reply.balance);
    EXPECT_EQ(replay.transfer().to_balance, reply.transfer().to_balance);
    // Other fields: refused, the first transfer named.
    const Reply reused = Transfer(*router, id, from, to, rule.amount + 1);
    EXPECT_EQ(reused.outcome, Outcome::kTransferIdReused) << OutcomeName(reused.outcome);
    ASSERT_TRUE(std::holds_alternative<ReusedTransferId>(reused.detail));
    const std::shared_ptr<const TransferRecord> first =
        std::get<ReusedTransferId>(reused.detail).record;
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(first->from, from);
    EXPECT_EQ(first->to, to);
    EXPECT_EQ(first->amount, rule.amount);
    EXPECT_EQ(first->state, record->state);
    const std::string other = IdOn(cross ? 1 : 0, absl::StrCat(rule.name, "-other"));
    EXPECT_EQ(Transfer(*router, id, from, other, rule.amount).outcome, Outcome::kTransferIdReused);
    EXPECT_EQ(store->journal().size(), journal_before);
    EXPECT_EQ(BalanceOf(*router, from), from_after);
    EXPECT_EQ(BalanceOf(*router, to), to_after);
    EXPECT_EQ(RecordOf(*store, id), record);
  }
  router->Stop();
}

// Under a reused transfer_id that names the same accounts the other way round, too.
TEST(TransferReplayTest, TheSameIdWithSwappedAccountsIsReused) {
  MemoryStore store;
  auto router = MakeRouter(&store);
  router->Start();
  const std::string a = IdOn(0, "swap-a");
  const std::string b = IdOn(1, "swap-b");
  ASSERT_EQ(CallShard(*router, Op::kDeposit, a, 100).outcome, Outcome::kOk);
  ASSERT_EQ(CallShard(*router, Op::kDeposit, b, 100).outcome, Outcome::kOk);
  ASSERT_EQ(Transfer(*router, "swap", a, b, 10).outcome, Outcome::kOk);
  // The reversed transfer goes to b's shard, which never saw the id: its record lives with a's.
  const Reply reversed = Transfer(*router, "swap", b, a, 10);
  EXPECT_EQ(reversed.outcome, Outcome::kTransferIdReused) << OutcomeName(reversed.outcome);
  EXPECT_EQ(BalanceOf(*router, a), 90);
  EXPECT_EQ(BalanceOf(*router, b), 110);
  router->Stop();
}

// One transfer_id used at once for two transfers whose sources live on different shards, to the
// same destination on a third. Each source shard looks the id up in the store, finds nothing
// (the other's debit is not yet durable) and debits; the destination then sees the same id's
// credit twice. The contract: at most once per transfer_id (ledger-wide, not per account), so
// one is applied and the other answered kTransferIdReused, and no money is created or lost.
TEST(TransferIdRaceTest, TheSameIdFromTwoSourceShardsAtOnceMovesMoneyOnce) {
  constexpr int32_t kThree = 3;
  MemoryStore store;
  testing_util::Event first_write_held, release_first_write, second_decided;
  const std::string a = IdOn(0, "race-a", kThree);
  const std::string b = IdOn(1, "race-b", kThree);
  const std::string c = IdOn(2, "race-c", kThree);
  RouterOptions options;
  options.num_shards = kThree;
  options.shard.store = &store;
  options.shard.clock = [] { return kNow; };
  options.shard.inline_execution = false;
  RouterTestHooks hooks;
  hooks.shard.before_handle = [&](const Message& message) {
    if (message.op() == Op::kTransfer && message.account_id == b) second_decided.Notify();
  };
  options.transfers.retry_delay = absl::Microseconds(200);
  auto router = *Router::Create(options, hooks);
  router->Start();
  for (const std::string& account : {a, b, c}) {
    ASSERT_EQ(CallShard(*router, Op::kDeposit, account, 100).outcome, Outcome::kOk);
  }
  // Holds a's debit in the journal thread, so that b's shard cannot find it in the store.
  std::atomic<bool> armed{true};
  store.OnWrite([&](const BatchWrite& batch) {
    for (const TransferWrite& transfer : batch.transfers) {
      if (transfer.transfer_id == "dup" && transfer.record.from == a && armed.exchange(false)) {
        first_write_held.Notify();
        release_first_write.WaitForNotification();
      }
    }
  });
  RecordingCompletion from_a, from_b;
  ASSERT_EQ(router->transfers().Submit("dup", a, c, 30, &from_a), SendOutcome::kAccepted);
  first_write_held.WaitForNotification();
  ASSERT_EQ(router->transfers().Submit("dup", b, c, 30, &from_b), SendOutcome::kAccepted);
  second_decided.WaitForNotification();
  release_first_write.Notify();
  const Reply reply_a = AwaitReply(from_a);
  const Reply reply_b = AwaitReply(from_b);
  store.OnWrite(nullptr);
  const int oks = (reply_a.outcome == Outcome::kOk) + (reply_b.outcome == Outcome::kOk);
  EXPECT_EQ(oks, 1) << "a: " << OutcomeName(reply_a.outcome)
                    << ", b: " << OutcomeName(reply_b.outcome);
  const int64_t balance_a = BalanceOf(*router, a).value_or(0);
  const int64_t balance_b = BalanceOf(*router, b).value_or(0);
  const int64_t balance_c = BalanceOf(*router, c).value_or(0);
  EXPECT_EQ(balance_a + balance_b + balance_c, 300)
      << "a " << balance_a << ", b " << balance_b << ", c " << balance_c;
  EXPECT_EQ(balance_c, 100 + 30 * oks);
  router->Stop();
}

// ---------------------------------------------------------------------------------------------
// A failed write at each step.

enum class Step { kDebit, kCredit, kSettle };

struct FailCase {
  bool cross;
  Step step;
  bool lands;  // The failed write reached the store anyway.
};

std::string FailCaseName(const testing::TestParamInfo<FailCase>& info) {
  const char* step = info.param.step == Step::kDebit    ? "FirstStep"
                     : info.param.step == Step::kCredit ? "Credit"
                                                        : "Settle";
  return absl::StrCat(info.param.cross ? "CrossShard" : "SameShard", step,
                      info.param.lands ? "Landed" : "Lost");
}

class TransferFailedWriteTest : public testing::TestWithParam<FailCase> {};
INSTANTIATE_TEST_SUITE_P(
    Steps, TransferFailedWriteTest,
    testing::Values(FailCase{false, Step::kDebit, false}, FailCase{false, Step::kDebit, true},
                    FailCase{true, Step::kDebit, false}, FailCase{true, Step::kDebit, true},
                    FailCase{true, Step::kCredit, false}, FailCase{true, Step::kCredit, true},
                    FailCase{true, Step::kSettle, false}, FailCase{true, Step::kSettle, true}),
    FailCaseName);

// Whether `batch` is the write of `step` of transfer `id`.
bool IsStep(const BatchWrite& batch, Step step, const std::string& id) {
  if (step == Step::kCredit) {
    for (const CreditWrite& credit : batch.credits) {
      if (credit.transfer_id == id) return true;
    }
    return false;
  }
  for (const TransferWrite& transfer : batch.transfers) {
    if (transfer.transfer_id != id) continue;
    // The first step writes the pending record (the final one on one shard); the settle the
    // final one after a pending one.
    return step == Step::kDebit ? true : transfer.record.state != TransferState::kPending;
  }
  return false;
}

// The destination refuses (it does not exist) or accepts: both the commit and the refund path.
TEST_P(TransferFailedWriteTest, TheTransferEndsExactlyOnceWithExactBalances) {
  const FailCase param = GetParam();
  for (const bool destination_exists : {true, false}) {
    SCOPED_TRACE(destination_exists ? "destination exists" : "destination missing");
    MemoryStore store;
    auto router = MakeRouter(&store);
    router->Start();
    const std::string from = IdOn(0, "fail-from");
    const std::string to = IdOn(param.cross ? 1 : 0, "fail-to");
    const std::string id = "fail-t";
    ASSERT_EQ(CallShard(*router, Op::kDeposit, from, 100).outcome, Outcome::kOk);
    if (destination_exists) {
      ASSERT_EQ(CallShard(*router, Op::kDeposit, to, 50).outcome, Outcome::kOk);
    }
    std::atomic<bool> armed{true};
    store.LandFailedWrites(param.lands);
    store.OnWrite([&](const BatchWrite& batch) {
      if (IsStep(batch, param.step, id) && armed.exchange(false)) store.FailNextWrites(1);
    });
    Reply reply = Transfer(*router, id, from, to, 30);
    EXPECT_FALSE(armed.load()) << "the step's write was never attempted";
    const Outcome expected = destination_exists ? Outcome::kOk : Outcome::kCounterpartyNotFound;
    if (param.step == Step::kDebit) {
      // The client's own step failed: it learns the outcome is unknown and retries.
      EXPECT_EQ(reply.outcome, Outcome::kStorageFailed) << OutcomeName(reply.outcome);
      ASSERT_TRUE(WaitUntil(
          [&] {
            reply = Transfer(*router, id, from, to, 30);
            return reply.outcome != Outcome::kTransferPending &&
                   reply.outcome != Outcome::kStorageFailed;
          },
          "a retry of the transfer is answered with its final outcome", std::chrono::seconds(5),
          std::chrono::milliseconds(10)))
          << "last retry answered " << OutcomeName(reply.outcome) << "; stored record "
          << (RecordOf(store, id) ? static_cast<int>(RecordOf(store, id)->state) : -1)
          << " (0 pending); from's balance " << BalanceOf(*router, from).value_or(-1);
    }
    // Later steps are retried by the coordinator: the client hears the final outcome.
    EXPECT_EQ(reply.outcome, expected) << OutcomeName(reply.outcome);
    const bool ok = expected == Outcome::kOk;
    EXPECT_EQ(BalanceOf(*router, from), ok ? 70 : 100);
    EXPECT_EQ(BalanceOf(*router, to),
              destination_exists ? std::optional<int64_t>(ok ? 80 : 50) : std::nullopt);
    // Each side's entries once: out and in, or (across shards) out and refund.
    std::vector<EntryKind> kinds;
    for (const JournalEntry& entry : EntriesOf(store, id)) kinds.push_back(entry.kind);
    std::vector<EntryKind> expected_kinds;
    if (ok) {
      expected_kinds = {EntryKind::kTransferOut, EntryKind::kTransferIn};
    } else if (param.cross) {
      expected_kinds = {EntryKind::kTransferOut, EntryKind::kTransferRefund};
    }
    EXPECT_EQ(kinds, expected_kinds);
    std::optional<TransferRecord> record = RecordOf(store, id);
    ASSERT_TRUE(record.has_value());
    EXPECT_EQ(record->state, ok ? TransferState::kCommitted : TransferState::kRefused);
    EXPECT_EQ(record->outcome, expected);
    // The stored accounts agree with memory.
    EXPECT_EQ(store.account(from)->balance, ok ? 70 : 100);
    if (param.step != Step::kDebit) {
      EXPECT_GT(router->transfers().step_retries(), 0);
    }
    EXPECT_EQ(router->transfers().in_flight_count(), 0);
    EXPECT_EQ(router->transfers().in_flight_amount(), 0);
    EXPECT_EQ(router->transfers().active(), 0);
    router->Stop();
  }
}

// The narrow case of the parameterised test above, by itself: the debit's write fails but lands
// (a sync that fails after the data reached the log). The client hears kStorageFailed, "outcome
// unknown", and the store holds the transfer pending with the source debited. The contract says
// PENDING "ends COMMITTED or REFUSED on its own": the coordinator asks the source again after the
// failed debit (resume_only) and carries the transfer on, with no retry and no restart; a retry
// then replays its outcome.
TEST(TransferFailedDebitTest, ADebitWhoseFailedWriteLandedStillEndsWithoutARestart) {
  MemoryStore store;
  auto router = MakeRouter(&store);
  router->Start();
  const std::string from = IdOn(0, "landed-from");
  const std::string to = IdOn(1, "landed-to");
  ASSERT_EQ(CallShard(*router, Op::kDeposit, from, 100).outcome, Outcome::kOk);
  ASSERT_EQ(CallShard(*router, Op::kDeposit, to, 50).outcome, Outcome::kOk);
  store.LandFailedWrites(true);
  store.FailNextWrites(1);
  EXPECT_EQ(Transfer(*router, "landed", from, to, 30).outcome, Outcome::kStorageFailed);
  ASSERT_TRUE(RecordOf(store, "landed").has_value());
  // Debited, durably: still pending, or already carried on by the coordinator's asking again.
  EXPECT_NE(RecordOf(store, "landed")->state, TransferState::kRefused);
  const bool finished = WaitUntil(
      [&] {
        std::optional<TransferRecord> record = RecordOf(store, "landed");
        return record && record->state != TransferState::kPending;
      },
      "the landed transfer is final in the store", std::chrono::seconds(3));
  EXPECT_TRUE(finished);
  const Reply retry = Transfer(*router, "landed", from, to, 30);
  EXPECT_EQ(retry.outcome, Outcome::kOk) << OutcomeName(retry.outcome);
  EXPECT_EQ(BalanceOf(*router, from), 70);
  EXPECT_EQ(BalanceOf(*router, to), 80) << "the debited 30 never reached the destination";
  router->Stop();
}

// A retry while the transfer is between shards hears kTransferPending ("still pending") and
// changes nothing; the transfer then ends once.
TEST(TransferPendingRetryTest, ARetryWhileTheCreditIsHeldIsAnsweredPending) {
  MemoryStore store;
  testing_util::Event release;
  RouterOptions options;
  options.num_shards = kShards;
  options.shard.store = &store;
  options.shard.inline_execution = false;  // The hook blocks: only on a shard thread.
  options.shard.clock = [] { return kNow; };
  RouterTestHooks hooks;
  hooks.shard.before_handle = [&](const Message& message) {
    if (message.op() == Op::kTransferCredit) release.WaitForNotification();
  };
  auto router = *Router::Create(options, hooks);
  router->Start();
  const std::string from = IdOn(0, "held-from");
  const std::string to = IdOn(1, "held-to");
  ASSERT_EQ(CallShard(*router, Op::kDeposit, from, 100).outcome, Outcome::kOk);
  ASSERT_EQ(CallShard(*router, Op::kDeposit, to, 50).outcome, Outcome::kOk);
  RecordingCompletion first;
  ASSERT_EQ(router->transfers().Submit("held", from, to, 30, &first), SendOutcome::kAccepted);
  ASSERT_TRUE(WaitUntil([&] { return router->transfers().in_flight_count() == 1; },
                        "the debit is durable"));
  EXPECT_EQ(router->transfers().in_flight_amount(), 30);
  const Reply retry = Transfer(*router, "held", from, to, 30);
  EXPECT_EQ(retry.outcome, Outcome::kTransferPending) << OutcomeName(retry.outcome);
  EXPECT_EQ(retry.balance, 70);
  EXPECT_FALSE(first.HasReply());
  EXPECT_EQ(BalanceOf(*router, from), 70);
  release.Notify();
  const Reply reply = AwaitReply(first);
  EXPECT_EQ(reply.outcome, Outcome::kOk);
  EXPECT_EQ(reply.balance, 70);
  EXPECT_EQ(reply.transfer().to_balance, 80);
  EXPECT_EQ(BalanceOf(*router, to), 80);
  EXPECT_EQ(router->transfers().in_flight_count(), 0);
  EXPECT_EQ(EntriesOf(store, "held").size(), 2u);
  router->Stop();
}

// The destination cannot look up the credit's receipt (a failing disk): the credit is answered
// kStorageFailed and sent again until the store answers, then applied once.
TEST(TransferFailedLookupTest, TheCreditIsRetriedUntilTheStoreAnswers) {
  MemoryStore store;
  auto router = MakeRouter(&store);
  router->Start();
  const std::string from = IdOn(0, "lookup-from");
  const std::string to = IdOn(1, "lookup-to");
  ASSERT_EQ(CallShard(*router, Op::kDeposit, from, 100).outcome, Outcome::kOk);
  ASSERT_EQ(CallShard(*router, Op::kDeposit, to, 50).outcome, Outcome::kOk);
  // From the debit's write on, every lookup fails: the credit's receipt lookup first of all.
  store.OnWrite([&](const BatchWrite& batch) {
    if (!batch.transfers.empty()) store.FailLookups(true);
  });
  RecordingCompletion completion;
  ASSERT_EQ(router->transfers().Submit("lookup", from, to, 30, &completion),
            SendOutcome::kAccepted);
  ASSERT_TRUE(
      WaitUntil([&] { return router->transfers().step_retries() >= 3; }, "the credit is retried"));
  EXPECT_FALSE(completion.HasReply());
  EXPECT_EQ(router->transfers().in_flight_count(), 1);
  store.OnWrite(nullptr);
  store.FailLookups(false);
  const Reply reply = AwaitReply(completion);
  EXPECT_EQ(reply.outcome, Outcome::kOk) << OutcomeName(reply.outcome);
  EXPECT_EQ(reply.transfer().to_balance, 80);
  EXPECT_EQ(BalanceOf(*router, from), 70);
  EXPECT_EQ(BalanceOf(*router, to), 80);
  EXPECT_EQ(EntriesOf(store, "lookup").size(), 2u);
  EXPECT_EQ(RecordOf(store, "lookup")->state, TransferState::kCommitted);
  EXPECT_EQ(router->transfers().in_flight_count(), 0);
  router->Stop();
}

// ---------------------------------------------------------------------------------------------
// The room a pending transfer's refund keeps, decided on one ShardCore by hand.

ShardCoreOptions CoreOptions(LedgerStore* store) {
  ShardCoreOptions options;
  options.store = store;
  options.clock = [] { return kNow; };
  options.log_errors = false;
  return options;
}

Reply Decide(ShardCore& core, Message message) {
  RecordingCompletion completion;
  message.completion = &completion;
  core.batch().push_back(message);
  core.ProcessBatch(/*abandoning=*/false);
  EXPECT_TRUE(completion.HasReply());
  return completion.HasReply() ? completion.WaitForReply() : Reply{.outcome = Outcome::kInternal};
}

// Transfer "room" from `source` to `destination`: the client's Transfer, on the source's shard.
Message TransferCallMessage(absl::string_view source, absl::string_view destination,
                            int64_t amount) {
  return {.account_id = source,
          .kind = TransferCall{.transfer_id = "room", .to = destination, .amount = amount}};
}

// Transfer "room"'s settle on `source`'s shard, with the credit's result.
Message SettleMessage(absl::string_view source, absl::string_view destination, int64_t amount,
                      Outcome credit_outcome, int64_t credit_balance = 0) {
  return {.account_id = source,
          .kind = SettleStep{.transfer_id = "room",
                             .to = destination,
                             .amount = amount,
                             .credit_outcome = credit_outcome,
                             .credit_balance = credit_balance}};
}

class RefundRoomTest : public testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Stores, RefundRoomTest, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& info) {
                           return info.param ? "WithStore" : "WithoutStore";
                         });

TEST_P(RefundRoomTest, ADepositMayNotTakeTheRoomAPendingRefundNeeds) {
  std::unique_ptr<MemoryStore> store = GetParam() ? std::make_unique<MemoryStore>() : nullptr;
  ShardCore core(CoreOptions(store.get()));
  core.LoadAccount("src", {.balance = kInt64Max - 100, .sequence = 1});
  // Debited across shards: pending, 50 may come back.
  const Reply debit = Decide(core, TransferCallMessage("src", "elsewhere", 50));
  ASSERT_EQ(debit.outcome, Outcome::kOk);
  EXPECT_TRUE(debit.transfer().debited);
  EXPECT_EQ(debit.balance, kInt64Max - 150);
  EXPECT_EQ(core.pending_transfer_count(), 1u);
  // 101 would leave kInt64Max - 49: no room for the refund of 50.
  const Reply refused = Decide(core, MakeMessage(Op::kDeposit, "src", 101, nullptr));
  EXPECT_EQ(refused.outcome, Outcome::kOverflow);
  EXPECT_EQ(refused.balance, kInt64Max - 150);
  // A credit of another transfer to the same account is refused the same way.
  const Message credit{
      .account_id = "src",
      .kind = CreditStep{.transfer_id = "other", .from = "someone", .amount = 101}};
  EXPECT_EQ(Decide(core, credit).outcome, Outcome::kOverflow);
  // 100 leaves exactly the room.
  EXPECT_EQ(Decide(core, MakeMessage(Op::kDeposit, "src", 100, nullptr)).balance, kInt64Max - 50);
  // The destination refused: the refund fits to the last unit.
  const Reply settled =
      Decide(core, SettleMessage("src", "elsewhere", 50, Outcome::kCounterpartyNotFound));
  EXPECT_EQ(settled.outcome, Outcome::kCounterpartyNotFound);
  EXPECT_EQ(core.FindAccountForTesting("src")->balance, kInt64Max);
  EXPECT_EQ(core.pending_transfer_count(), 0u);
  // Settled: no room is kept any more, so a deposit may fill the balance to the last unit.
  EXPECT_EQ(Decide(core, MakeMessage(Op::kWithdraw, "src", 10, nullptr)).outcome, Outcome::kOk);
  EXPECT_EQ(Decide(core, MakeMessage(Op::kDeposit, "src", 10, nullptr)).outcome, Outcome::kOk);
  if (store != nullptr) {
    EXPECT_EQ(store->account("src")->balance, kInt64Max);
    EXPECT_EQ(RecordOf(*store, "room")->state, TransferState::kRefused);
    EXPECT_EQ(RecordOf(*store, "room")->outcome, Outcome::kCounterpartyNotFound);
  }
}

TEST_P(RefundRoomTest, ACommittedTransferReleasesItsRoom) {
  std::unique_ptr<MemoryStore> store = GetParam() ? std::make_unique<MemoryStore>() : nullptr;
  ShardCore core(CoreOptions(store.get()));
  core.LoadAccount("src", {.balance = kInt64Max - 100, .sequence = 1});
  ASSERT_EQ(Decide(core, TransferCallMessage("src", "elsewhere", 50)).outcome, Outcome::kOk);
  EXPECT_EQ(Decide(core, MakeMessage(Op::kDeposit, "src", 101, nullptr)).outcome,
            Outcome::kOverflow);
  EXPECT_EQ(Decide(core, SettleMessage("src", "elsewhere", 50, Outcome::kOk, /*credit_balance=*/50))
                .outcome,
            Outcome::kOk);
  // The money left for good: the whole remaining room is the account's.
  EXPECT_EQ(Decide(core, MakeMessage(Op::kDeposit, "src", 150, nullptr)).balance, kInt64Max);
}

// ---------------------------------------------------------------------------------------------
// Recovery: the process stopped right after the debit was durable.

class TransferRecoveryTest : public testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(CreditReceipt, TransferRecoveryTest, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& info) {
                           return info.param ? "CreditAlreadyDecided" : "CreditNotYetSent";
                         });

TEST_P(TransferRecoveryTest, APendingTransferLoadedAtStartEndsCommittedOnce) {
  const bool credited = GetParam();
  const std::string from = IdOn(0, "rec-from");
  const std::string to = IdOn(1, "rec-to");
  const std::string id = "rec-t";
  MemoryStore store;
  // As the first run left it: both accounts opened with 100, `from` debited 30 with its pending
  // record; in the variant, `to` credited too with its receipt (the crash came before the settle).
  const TransferRecord pending{.from = from,
                               .to = to,
                               .amount = 30,
                               .state = TransferState::kPending,
                               .outcome = Outcome::kOk,
                               .from_balance = 70,
                               .to_balance = 0,
                               .created_at = kNow,
                               .credited_at = absl::InfinitePast(),
                               .finished_at = absl::InfinitePast()};
  BatchWrite first;
  first.accounts = {{from, {.balance = 70, .sequence = 2}}, {to, {.balance = 100, .sequence = 1}}};
  first.journal = {{from, 1, EntryKind::kDeposit, 100, 100, "", kNow, ""},
                   {to, 1, EntryKind::kDeposit, 100, 100, "", kNow, ""},
                   {from, 2, EntryKind::kTransferOut, 30, 70, id, kNow, to}};
  first.transfers = {{id, pending}};
  if (credited) {
    first.accounts.push_back({to, {.balance = 130, .sequence = 2}});
    first.journal.push_back({to, 2, EntryKind::kTransferIn, 30, 130, id, kNow, from});
    first.credits = {{id,
                      {.from = from,
                       .outcome = Outcome::kOk,
                       .to_balance = 130,
                       .amount = 30,
                       .credited_at = kNow}}};
  }
  ASSERT_TRUE(store.Write(first).ok());
  const size_t journal_before = store.journal().size();

  auto router = MakeRouter(&store);
  router->LoadAccount(from, *store.account(from));
  router->LoadAccount(to, *store.account(to));
  router->LoadPendingTransfer(id, pending);
  EXPECT_EQ(router->transfers().in_flight_count(), 1);
  EXPECT_EQ(router->transfers().in_flight_amount(), 30);
  router->Start();
  ASSERT_TRUE(WaitUntil(
      [&] {
        std::optional<TransferRecord> record = RecordOf(store, id);
        return record && record->state != TransferState::kPending;
      },
      "the resumed transfer is final in the store"));
  ASSERT_TRUE(WaitUntil([&] { return router->transfers().active() == 0; },
                        "the coordinator finished the resumed transfer"));
  const TransferRecord record = *RecordOf(store, id);
  EXPECT_EQ(record.state, TransferState::kCommitted);
  EXPECT_EQ(record.from_balance, 70);
  EXPECT_EQ(record.to_balance, 130);
  EXPECT_EQ(BalanceOf(*router, from), 70);
  EXPECT_EQ(BalanceOf(*router, to), 130);
  EXPECT_EQ(store.account(to)->balance, 130);
  // One kTransferIn for it in all; none added when the receipt was already there.
  int ins = 0;
  for (const JournalEntry& entry : EntriesOf(store, id)) {
    ins += entry.kind == EntryKind::kTransferIn;
  }
  EXPECT_EQ(ins, 1);
  EXPECT_EQ(store.journal().size(), journal_before + (credited ? 0 : 1));
  EXPECT_EQ(router->transfers().in_flight_count(), 0);
  EXPECT_EQ(router->transfers().in_flight_amount(), 0);
  // A client's retry now hears the committed result.
  const Reply replay = Transfer(*router, id, from, to, 30);
  EXPECT_EQ(replay.outcome, Outcome::kOk);
  EXPECT_TRUE(replay.replayed);
  EXPECT_EQ(replay.transfer().to_balance, 130);
  router->Stop();
}

// The destination does not exist: the resumed credit (or, in the variant, the refusal already in
// its receipt) comes back as one refund to the source.
TEST_P(TransferRecoveryTest, APendingTransferToAMissingAccountIsRefundedOnce) {
  const bool refused_before_crash = GetParam();
  const std::string from = IdOn(0, "rec-from");
  const std::string to = IdOn(1, "rec-missing");
  const std::string id = "rec-r";
  MemoryStore store;
  const TransferRecord pending{.from = from,
                               .to = to,
                               .amount = 30,
                               .state = TransferState::kPending,
                               .outcome = Outcome::kOk,
                               .from_balance = 70,
                               .to_balance = 0,
                               .created_at = kNow,
                               .credited_at = absl::InfinitePast(),
                               .finished_at = absl::InfinitePast()};
  BatchWrite first;
  first.accounts = {{from, {.balance = 70, .sequence = 2}}};
  first.journal = {{from, 1, EntryKind::kDeposit, 100, 100, "", kNow, ""},
                   {from, 2, EntryKind::kTransferOut, 30, 70, id, kNow, to}};
  first.transfers = {{id, pending}};
  if (refused_before_crash) {
    first.credits = {{id,
                      {.from = from,
                       .outcome = Outcome::kCounterpartyNotFound,
                       .to_balance = 0,
                       .amount = 30,
                       .credited_at = kNow}}};
  }
  ASSERT_TRUE(store.Write(first).ok());

  auto router = MakeRouter(&store);
  router->LoadAccount(from, *store.account(from));
  router->LoadPendingTransfer(id, pending);
  router->Start();
  ASSERT_TRUE(WaitUntil([&] { return router->transfers().active() == 0; },
                        "the coordinator finished the resumed transfer"));
  const TransferRecord record = *RecordOf(store, id);
  EXPECT_EQ(record.state, TransferState::kRefused);
  EXPECT_EQ(record.outcome, Outcome::kCounterpartyNotFound);
  EXPECT_EQ(BalanceOf(*router, from), 100);
  EXPECT_EQ(store.account(from)->balance, 100);
  EXPECT_EQ(BalanceOf(*router, to), std::nullopt);
  std::vector<EntryKind> kinds;
  for (const JournalEntry& entry : EntriesOf(store, id)) kinds.push_back(entry.kind);
  EXPECT_EQ(kinds, (std::vector<EntryKind>{EntryKind::kTransferOut, EntryKind::kTransferRefund}));
  EXPECT_EQ(router->transfers().in_flight_count(), 0);
  EXPECT_EQ(router->transfers().in_flight_amount(), 0);
  const Reply replay = Transfer(*router, id, from, to, 30);
  EXPECT_EQ(replay.outcome, Outcome::kCounterpartyNotFound);
  EXPECT_TRUE(replay.replayed);
  router->Stop();
}

// A router stopped while transfers are between shards leaves them pending in the store; a new one
// over the same store, given the accounts and the pending records, finishes each exactly once.
TEST(TransferRestartTest, StoppedMidFlightThenRestartedEveryTransferEndsOnce) {
  MemoryStore store;
  constexpr int kAccountsHere = 20;
  constexpr int kTransfers = 200;
  std::vector<std::string> accounts;
  for (int i = 0; i < kAccountsHere; ++i) accounts.push_back(absl::StrCat("stop-", i));
  std::vector<std::unique_ptr<RecordingCompletion>> replies;
  std::vector<const RecordingCompletion*> accepted;
  {
    auto router = MakeRouter(&store);
    router->Start();
    for (const std::string& account : accounts) {
      ASSERT_EQ(CallShard(*router, Op::kDeposit, account, 1000).outcome, Outcome::kOk);
    }
    for (int i = 0; i < kTransfers; ++i) {
      replies.push_back(std::make_unique<RecordingCompletion>());
      const std::string& from = accounts[i % kAccountsHere];
      const std::string& to = accounts[(i * 7 + 3) % kAccountsHere];
      if (from == to) continue;
      // Refused by a full mailbox: nothing sent, and its completion is never called.
      if (router->transfers().Submit(absl::StrCat("stop-t", i), from, to, 1 + i % 13,
                                     replies.back().get()) == SendOutcome::kAccepted) {
        accepted.push_back(replies.back().get());
      }
    }
    router->Stop();  // Mid-flight: some are pending.
  }
  // Each accepted call was answered once: its outcome, or kTransferPending when stopped first.
  for (const RecordingCompletion* reply : accepted) EXPECT_EQ(reply->completions(), 1);
  int pending = 0;
  auto router = MakeRouter(&store);
  for (const std::string& account : accounts) router->LoadAccount(account, *store.account(account));
  for (const auto& [id, record] : store.transfers()) {
    if (record.state != TransferState::kPending) continue;
    ++pending;
    router->LoadPendingTransfer(id, record);
  }
  std::cout << "  pending at restart: " << pending << "\n";
  router->Start();
  ASSERT_TRUE(WaitUntil([&] { return router->transfers().active() == 0; },
                        "every resumed transfer is finished"));
  int64_t total = 0;
  std::map<std::string, int64_t> expected;
  for (const std::string& account : accounts) expected[account] = 1000;
  for (const auto& [id, record] : store.transfers()) {
    EXPECT_NE(record.state, TransferState::kPending) << id;
    if (record.state == TransferState::kCommitted) {
      expected[record.from] -= record.amount;
      expected[record.to] += record.amount;
    }
    // Each side's entries once.
    int outs = 0, ins = 0, refunds = 0;
    for (const JournalEntry& entry : EntriesOf(store, id)) {
      outs += entry.kind == EntryKind::kTransferOut;
      ins += entry.kind == EntryKind::kTransferIn;
      refunds += entry.kind == EntryKind::kTransferRefund;
    }
    EXPECT_EQ(ins, record.state == TransferState::kCommitted ? 1 : 0) << id;
    EXPECT_EQ(outs, refunds + ins) << id;
  }
  for (const std::string& account : accounts) {
    EXPECT_EQ(BalanceOf(*router, account), expected[account]) << account;
    total += *BalanceOf(*router, account);
  }
  EXPECT_EQ(total, 1000 * kAccountsHere);
  EXPECT_EQ(router->transfers().in_flight_count(), 0);
  EXPECT_EQ(router->transfers().in_flight_amount(), 0);
  router->Stop();
}

}  // namespace
}  // namespace ledger
