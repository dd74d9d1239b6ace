// The pipelined commit path (issue 13) at the shard level, with real Shard, Router and
// CommitPipeline objects and their real threads: replies wait for their write; two groups in
// flight are written and answered in order; a failed group fails everything decided on top of it
// and nothing of another shard; the mailbox bounds queued plus decided-awaiting-write calls;
// shutdown drains the pipeline; a lookup that needs the disk moves to the shard thread.
//
// The in-memory store's OnWrite hook holds a write in flight (the journal thread blocks inside it)
// and injects failures, so every test is driven by events, not timing. Waits are bounded
// (tests/wait_until.h): a broken pipeline fails the test instead of hanging it.
#include "shard/commit_pipeline.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "shard/router.h"
#include "shard/shard.h"
#include "tests/shard/forwarding_store.h"
#include "tests/shard/memory_store.h"
#include "tests/shard/pipelined_store.h"
#include "tests/shard/shard_test_util.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using testing_util::CountingObserver;
using testing_util::Event;
using testing_util::ForwardingStore;
using testing_util::MemoryStore;
using testing_util::PipelinedStore;
using testing_util::WaitUntil;

// Records its reply and its rank among the test's answered calls (0 first), so that a test can
// check the order in which replies were released.
class RankedCompletion final : public Completion {
 public:
  explicit RankedCompletion(std::atomic<int>* answered) : answered_(answered) {}

  bool CallerGone() const override { return false; }
  void Complete(const Reply& reply) override {
    reply_ = reply;
    rank_ = answered_->fetch_add(1);
    completions_.fetch_add(1);
    done_.Notify();
  }

  bool HasReply() const { return done_.HasBeenNotified(); }
  // Only after HasReply: Notify publishes the reply and the rank.
  const Reply& reply() const { return reply_; }
  int rank() const { return rank_; }
  int completions() const { return completions_.load(); }

 private:
  std::atomic<int>* const answered_;
  Reply reply_;
  int rank_ = -1;
  std::atomic<int> completions_{0};
  Event done_;
};

// One store write held in flight: the journal thread blocks inside it until Release.
class WriteHold {
 public:
  void Block() {
    held_.Notify();
    release_.WaitForNotification();
  }
  ::testing::AssertionResult WaitUntilHeld() const {
    return WaitUntil([this] { return held_.HasBeenNotified(); }, "a write is held in flight");
  }
  void Release() { release_.Notify(); }

 private:
  Event held_;
  Event release_;
};

// What the pipeline reported for each store write, in order. Thread-safe.
class RecordingCommitObserver final : public CommitObserver {
 public:
  struct GroupWrite {
    size_t batches = 0;
    size_t calls = 0;
    bool ok = false;
  };
  void OnGroupWrite(size_t batches, size_t calls, std::chrono::nanoseconds, bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writes_.push_back({batches, calls, ok});
  }
  std::vector<GroupWrite> writes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return writes_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<GroupWrite> writes_;
};

// A store that, like RocksDB for a record that is only on disk, cannot answer from memory the
// request_ids that start with "disk-"; and that remembers which threads did a blocking lookup.
class DiskLookupStore final : public ForwardingStore {
 public:
  explicit DiskLookupStore(MemoryStore* inner) : ForwardingStore(inner) {}

  absl::StatusOr<std::optional<RequestRecord>> FindRequest(absl::string_view account_id,
                                                           absl::string_view request_id) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      lookup_threads_.push_back(std::this_thread::get_id());
    }
    return ForwardingStore::FindRequest(account_id, request_id);
  }
  absl::StatusOr<MemoryLookup> FindRequestInMemory(absl::string_view account_id,
                                                   absl::string_view request_id) override {
    if (absl::StartsWith(request_id, "disk-")) return MemoryLookup{};
    return ForwardingStore::FindRequestInMemory(account_id, request_id);
  }

  std::vector<std::thread::id> lookup_threads() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lookup_threads_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::thread::id> lookup_threads_;
};

// A shard (on its own pipeline) or a router (shards sharing one pipeline) over a MemoryStore.
// Calls and the strings their messages view live in the fixture, so that a test that fails
// half-way leaves nothing dangling for TearDown, which releases every hold and stops.
class PipelineFixture {
 protected:
  PipelineFixture() {
    store_.OnWrite([this](const BatchWrite&) {
      if (WriteHold* hold = next_hold_.exchange(nullptr)) hold->Block();
    });
  }

  void StopAll() {
    next_hold_.store(nullptr);
    for (WriteHold& hold : holds_) hold.Release();
    unstall_.Notify();
    if (sender_.joinable()) sender_.join();
    if (stopper_.joinable()) stopper_.join();
    if (shard_ != nullptr) shard_->Stop();
    if (router_ != nullptr) router_->Stop();
  }

  ShardOptions Options(size_t capacity, bool inline_execution) {
    ShardOptions options;
    options.mailbox_capacity = capacity;
    options.inline_execution = inline_execution;
    options.observer = &observer_;
    options.store = &store_;
    return options;
  }

  // A call for an account "stall..." blocks whichever thread decides it, so that calls sent after
  // it stay queued and undecided.
  ShardTestHooks Hooks() {
    ShardTestHooks hooks;
    hooks.before_handle = [this](const Message& message) {
      if (absl::StartsWith(message.account_id, "stall")) {
        stalled_.Notify();
        unstall_.WaitForNotification();
      }
    };
    return hooks;
  }

  void StartShard(size_t capacity, bool inline_execution, LedgerStore* store = nullptr) {
    ShardOptions options = Options(capacity, inline_execution);
    if (store != nullptr) options.store = store;
    shard_ = std::make_unique<Shard>(std::move(options), Hooks());
    shard_->Start();
  }

  void StartRouter(int32_t shards, size_t capacity, bool inline_execution,
                   LedgerStore* store = nullptr) {
    RouterOptions options;
    options.num_shards = shards;
    options.shard = Options(capacity, inline_execution);
    if (store != nullptr) options.shard.store = store;
    options.shard.observer = nullptr;
    router_observers_ = std::vector<CountingObserver>(shards);
    for (CountingObserver& observer : router_observers_) options.observers.push_back(&observer);
    options.commit_observer = &commit_observer_;
    absl::StatusOr<std::unique_ptr<Router>> router =
        Router::Create(options, RouterTestHooks{.shard = Hooks(), .transfers = {}});
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = *std::move(router);
    router_->Start();
  }

  // The next store write blocks inside the store until the hold is released. Arm it only when
  // no other write can start first.
  WriteHold& HoldNextWrite() {
    WriteHold& hold = holds_.emplace_back();
    next_hold_.store(&hold);
    return hold;
  }

  // A shard (inline execution) whose store takes `in_flight` group writes at once and ends
  // each when the test says (PipelinedStore::Finish).
  PipelinedStore* StartShardWithWritesInFlight(int in_flight) {
    auto* pipelined = new PipelinedStore(&store_, in_flight, /*auto_finish=*/false);
    front_store_.reset(pipelined);
    StartShard(1024, /*inline_execution=*/true, pipelined);
    return pipelined;
  }
  // Exactly `writes` writes of the PipelinedStore are in flight (bounded wait).
  ::testing::AssertionResult WritesPending(size_t writes) {
    auto* pipelined = static_cast<PipelinedStore*>(front_store_.get());
    return WaitUntil([pipelined, writes] { return pipelined->pending() == writes; },
                     absl::StrCat(writes, " writes are in flight"));
  }

  // An account id owned by router shard `shard`.
  absl::string_view AccountOn(int32_t shard, absl::string_view prefix) {
    for (int i = 0;; ++i) {
      std::string id = absl::StrCat(prefix, "-", i);
      if (router_->ShardFor(id) == shard) return Keep(std::move(id));
    }
  }
  absl::string_view Keep(std::string text) { return strings_.emplace_back(std::move(text)); }

  SendOutcome TrySend(Op op, absl::string_view account, int64_t amount,
                      absl::string_view request_id, RankedCompletion& call) {
    Message message = MakeAccountCall(op, account, amount, request_id, &call);
    if (router_ != nullptr) return router_->TrySend(router_->ShardFor(account), std::move(message));
    return shard_->TrySend(std::move(message));
  }
  RankedCompletion& NewCall() { return calls_.emplace_back(&answered_); }
  // For a call that must be refused: kept apart, as it is never answered.
  RankedCompletion& NewRefusedCall() { return refused_.emplace_back(&answered_); }
  // Sends Balance probes until the mailbox refuses them as closed; a probe accepted before the
  // close is a call like any other.
  ::testing::AssertionResult ProbeUntilClosed(absl::string_view account) {
    return WaitUntil(
        [&] {
          RankedCompletion& probe = NewCall();
          const SendOutcome outcome = TrySend(Op::kBalance, account, 0, {}, probe);
          if (outcome != SendOutcome::kAccepted) calls_.pop_back();
          return outcome == SendOutcome::kClosed;
        },
        "the mailbox is closed");
  }
  // Sends a call that must be accepted; its reply comes later.
  RankedCompletion& Send(Op op, absl::string_view account, int64_t amount,
                         absl::string_view request_id = {}) {
    RankedCompletion& call = NewCall();
    EXPECT_EQ(TrySend(op, account, amount, request_id, call), SendOutcome::kAccepted)
        << OpName(op) << " " << account;
    return call;
  }
  // The call's reply, waiting for it (bounded); kInternal with a failure when it never comes.
  Reply Await(const RankedCompletion& call) {
    if (!WaitUntil([&call] { return call.HasReply(); }, "the call is answered")) {
      ADD_FAILURE() << "no reply";
      return Reply{.outcome = Outcome::kInternal};
    }
    return call.reply();
  }
  Reply Call(Op op, absl::string_view account, int64_t amount, absl::string_view request_id = {}) {
    return Await(Send(op, account, amount, request_id));
  }
  // Every call sent so far has its reply.
  ::testing::AssertionResult AllAnswered() {
    return WaitUntil(
        [this] {
          for (const RankedCompletion& call : calls_) {
            if (!call.HasReply()) return false;
          }
          return true;
        },
        "every call is answered");
  }
  size_t Replied() const {
    size_t replied = 0;
    for (const RankedCompletion& call : calls_) replied += call.HasReply() ? 1 : 0;
    return replied;
  }
  // The shard has sealed (decided) `messages` messages in all: with inline execution off, what
  // was sent is decided by the shard thread some time after TrySend returns.
  ::testing::AssertionResult Decided(int64_t messages, const CountingObserver& observer) {
    return WaitUntil([&] { return observer.batched_messages.load() >= messages; },
                     absl::StrCat(messages, " messages are decided"));
  }

  // Journal entries in the store that carry `request_id`.
  size_t JournalEntriesFor(absl::string_view request_id) const {
    size_t entries = 0;
    for (const JournalEntry& entry : store_.journal()) entries += entry.request_id == request_id;
    return entries;
  }

  MemoryStore store_;
  CountingObserver observer_;
  std::vector<CountingObserver> router_observers_;
  RecordingCommitObserver commit_observer_;
  std::deque<WriteHold> holds_;
  std::atomic<WriteHold*> next_hold_{nullptr};
  Event stalled_;
  Event unstall_;
  std::atomic<int> answered_{0};
  std::deque<RankedCompletion> calls_;
  std::deque<RankedCompletion> refused_;
  std::deque<std::string> strings_;
  // A test's own store in front of store_, when it needs one; outlives the shard.
  std::unique_ptr<LedgerStore> front_store_;
  // A sender that blocks deciding "stall", and a thread in Stop: joined by StopAll.
  std::thread sender_;
  std::thread stopper_;
  Event stopped_;
  std::unique_ptr<Shard> shard_;
  std::unique_ptr<Router> router_;
};

// The behaviours that hold whichever thread decides: a sender that found the shard idle
// (inline execution, the server's default) or the shard thread only.
class CommitPipelineTest : public PipelineFixture, public testing::TestWithParam<bool> {
 protected:
  void TearDown() override { StopAll(); }
  bool inline_execution() const { return GetParam(); }
  void StartShard(size_t capacity = 1024) {
    PipelineFixture::StartShard(capacity, inline_execution());
  }

  // Many senders on two shards while every fourth store write fails (half of those land anyway)
  // and every write yields mid-way: each request, retried with its request_id until it is OK, is
  // applied exactly once, and memory, the store and the journal agree. Cheap enough for every
  // build (a few thousand calls), and the point of running it under ThreadSanitizer. `store`: in
  // front of store_ (null: store_ itself).
  void RunConcurrentSendersWithFailingWrites(LedgerStore* store) {
    StartRouter(2, 16, inline_execution(), store);
    store_.OnWrite([this](const BatchWrite&) {
      // Per batch, so the group's first batch decides; the store applies it to this group.
      const int group = store_.groups();
      if (group % 4 == 0) {
        store_.LandFailedWrites(group % 8 == 0);
        store_.FailNextWrites(1);
      }
      std::this_thread::yield();
    });
    constexpr int kSenders = 4;
    constexpr int kRequestsPerSender = 150;
    constexpr int kAccountsPerSender = 3;
    constexpr int kAttemptsMax = 50;
    std::vector<std::string> accounts;
    for (int t = 0; t < kSenders; ++t) {
      for (int k = 0; k < kAccountsPerSender; ++k) accounts.push_back(absl::StrCat("s", t, "-", k));
    }
    std::vector<std::thread> senders;
    std::vector<std::deque<RankedCompletion>> replies(kSenders);
    std::vector<std::deque<std::string>> request_ids(kSenders);
    std::atomic<int> answered{0};
    for (int t = 0; t < kSenders; ++t) {
      senders.emplace_back([&, t] {
        for (int j = 0; j < kRequestsPerSender; ++j) {
          const std::string& account = accounts[t * kAccountsPerSender + j % kAccountsPerSender];
          const std::string& request_id = request_ids[t].emplace_back(absl::StrCat("r", t, "-", j));
          bool applied = false;
          for (int attempt = 0; attempt < kAttemptsMax && !applied; ++attempt) {
            RankedCompletion& call = replies[t].emplace_back(&answered);
            Message message = MakeAccountCall(
                j % 10 == 9 ? Op::kBalance : Op::kDeposit, account, j % 10 == 9 ? 0 : j + 1,
                j % 10 == 9 ? absl::string_view() : request_id, &call);
            const SendOutcome sent =
                router_->TrySend(router_->ShardFor(account), std::move(message));
            if (sent == SendOutcome::kFull) {
              std::this_thread::yield();
              continue;
            }
            ASSERT_EQ(sent, SendOutcome::kAccepted);
            ASSERT_TRUE(
                WaitUntil([&call] { return call.HasReply(); }, "a stress call is answered"));
            const Outcome outcome = call.reply().outcome;
            ASSERT_TRUE(outcome == Outcome::kOk || outcome == Outcome::kStorageFailed ||
                        outcome == Outcome::kAccountNotFound)
                << OutcomeName(outcome);
            applied = outcome != Outcome::kStorageFailed;
          }
          ASSERT_TRUE(applied) << request_id;
        }
      });
    }
    for (std::thread& sender : senders) sender.join();

    EXPECT_GT(store_.failed_writes(), 0);
    for (int t = 0; t < kSenders; ++t) {
      for (const RankedCompletion& call : replies[t]) {
        if (call.HasReply()) {
          EXPECT_EQ(call.completions(), 1);
        }
      }
      for (int k = 0; k < kAccountsPerSender; ++k) {
        int64_t expected = 0;
        uint64_t deposits = 0;
        for (int j = k; j < kRequestsPerSender; j += kAccountsPerSender) {
          if (j % 10 == 9) continue;
          expected += j + 1;
          ++deposits;
        }
        const std::string& account = accounts[t * kAccountsPerSender + k];
        EXPECT_EQ(store_.account(account),
                  (AccountState{.balance = expected, .sequence = deposits}))
            << account;
        EXPECT_EQ(Call(Op::kBalance, account, 0).balance, expected) << account;
      }
    }
    // Each request_id is in the journal exactly once; nothing else is.
    std::map<std::string, int> entries;
    for (const JournalEntry& entry : store_.journal()) ++entries[entry.request_id];
    for (const auto& [request_id, count] : entries) EXPECT_EQ(count, 1) << request_id;
    size_t deposits = 0;
    for (int j = 0; j < kRequestsPerSender; ++j) deposits += j % 10 == 9 ? 0 : 1;
    EXPECT_EQ(entries.size(), deposits * kSenders);
  }
};
INSTANTIATE_TEST_SUITE_P(ExecutionModes, CommitPipelineTest, testing::Values(true, false),
                         [](const testing::TestParamInfo<bool>& info) {
                           return info.param ? "InlineWhenIdle" : "ShardThreadOnly";
                         });

// The behaviours that need a particular execution mode, or a router.
class CommitPipelineScenarioTest : public PipelineFixture, public testing::Test {
 protected:
  void TearDown() override { StopAll(); }
};

TEST_P(CommitPipelineTest, AReplyIsReleasedOnlyAfterItsWrite) {
  StartShard();
  WriteHold& hold = HoldNextWrite();
  RankedCompletion& deposit = Send(Op::kDeposit, "a", 10, "r1");
  ASSERT_TRUE(hold.WaitUntilHeld());
  // A read that sees the undurable deposit waits for it like the deposit does.
  RankedCompletion& read = Send(Op::kBalance, "a", 0);
  ASSERT_TRUE(Decided(2, observer_));
  EXPECT_FALSE(deposit.HasReply());
  EXPECT_FALSE(read.HasReply());
  EXPECT_TRUE(store_.journal().empty());
  EXPECT_EQ(store_.account("a"), std::nullopt);

  hold.Release();
  const Reply deposited = Await(deposit);
  // Once the reply is out, the store holds the deposit.
  const std::vector<JournalEntry> journal = store_.journal();
  ASSERT_EQ(journal.size(), 1u);
  EXPECT_EQ(journal[0].account_id, "a");
  EXPECT_EQ(journal[0].sequence, 1u);
  EXPECT_EQ(journal[0].kind, EntryKind::kDeposit);
  EXPECT_EQ(journal[0].amount, 10);
  EXPECT_EQ(journal[0].balance_after, 10);
  EXPECT_EQ(journal[0].request_id, "r1");
  EXPECT_EQ(deposited.outcome, Outcome::kOk);
  EXPECT_EQ(deposited.balance, 10);
  EXPECT_FALSE(deposited.replayed);
  EXPECT_EQ(Await(read).balance, 10);
  EXPECT_LT(deposit.rank(), read.rank());
  EXPECT_EQ(store_.account("a"), (AccountState{.balance = 10, .sequence = 1}));
  EXPECT_EQ(deposit.completions(), 1);
  EXPECT_EQ(read.completions(), 1);
  // The read only waited for its turn: it needed no store write of its own.
  EXPECT_EQ(store_.groups(), 1);
}

// With nothing in flight a read depends on nothing undurable: it is answered when decided, with
// no store write. (Usually on the sender's thread before TrySend returns; the shard thread may
// hold the shard at that moment, so the test does not require it.)
TEST_F(CommitPipelineScenarioTest, AReadWithNothingInFlightNeedsNoWrite) {
  StartShard(1024, /*inline_execution=*/true);
  ASSERT_EQ(Call(Op::kDeposit, "a", 10).balance, 10);
  const int groups = store_.groups();
  EXPECT_EQ(Call(Op::kBalance, "a", 0).balance, 10);
  EXPECT_EQ(Call(Op::kBalance, "nobody", 0).outcome, Outcome::kAccountNotFound);
  EXPECT_EQ(store_.groups(), groups);
}

TEST_P(CommitPipelineTest, TwoGroupsInFlightAreWrittenAndAnsweredInOrder) {
  StartShard();
  WriteHold& hold = HoldNextWrite();
  RankedCompletion& first = Send(Op::kDeposit, "a", 100, "g1");
  ASSERT_TRUE(hold.WaitUntilHeld());
  // Decided on top of the first group's undurable state, and queued behind it as the next group.
  // The hook sees the second group's write start: none of the second group's replies may be out.
  // (The first group's may or may not be: answering it may overlap the next write.)
  RankedCompletion& deposit = Send(Op::kDeposit, "a", 10, "g2-1");
  RankedCompletion& withdraw = Send(Op::kWithdraw, "a", 30, "g2-2");
  RankedCompletion& read = Send(Op::kBalance, "a", 0);
  RankedCompletion& open_b = Send(Op::kDeposit, "b", 5);
  ASSERT_TRUE(Decided(5, observer_));
  struct AtSecondWrite {
    std::atomic<bool> seen{false};
    std::atomic<int> second_answered{-1};
  };
  auto at_second_write = std::make_shared<AtSecondWrite>();
  store_.OnWrite([at_second_write, &deposit, &withdraw, &read, &open_b](const BatchWrite&) {
    if (at_second_write->seen.exchange(true)) return;
    at_second_write->second_answered =
        deposit.HasReply() + withdraw.HasReply() + read.HasReply() + open_b.HasReply();
  });
  EXPECT_EQ(Replied(), 0u);

  hold.Release();
  ASSERT_TRUE(AllAnswered());
  EXPECT_EQ(first.reply().balance, 100);
  EXPECT_EQ(deposit.reply().balance, 110);
  EXPECT_EQ(withdraw.reply().balance, 80);
  EXPECT_EQ(read.reply().balance, 80);
  EXPECT_EQ(open_b.reply().balance, 5);
  for (const RankedCompletion& call : calls_) EXPECT_EQ(call.reply().outcome, Outcome::kOk);
  // Answered in the order they were decided.
  EXPECT_EQ(first.rank(), 0);
  EXPECT_LT(deposit.rank(), withdraw.rank());
  EXPECT_LT(withdraw.rank(), read.rank());
  EXPECT_LT(read.rank(), open_b.rank());
  EXPECT_EQ(at_second_write->second_answered.load(), 0);
  // The journal continues the account's numbering across the two groups.
  const std::vector<JournalEntry> journal = store_.journal();
  ASSERT_EQ(journal.size(), 4u);
  EXPECT_EQ(journal[0].balance_after, 100);
  EXPECT_EQ(journal[1].sequence, 2u);
  EXPECT_EQ(journal[1].balance_after, 110);
  EXPECT_EQ(journal[2].sequence, 3u);
  EXPECT_EQ(journal[2].balance_after, 80);
  EXPECT_EQ(journal[3].account_id, "b");
  EXPECT_EQ(store_.account("a"), (AccountState{.balance = 80, .sequence = 3}));
  EXPECT_EQ(store_.account("b"), (AccountState{.balance = 5, .sequence = 1}));
  // Everything decided while the first write was held went out in one more write.
  if (inline_execution()) {
    EXPECT_EQ(store_.groups(), 2);
  }
}

// A store that takes two group writes in flight (a cluster replica's): the next group's write
// starts while the first is being committed, a third waits for room, and answers leave group by
// group in the order the writes started.
TEST_F(CommitPipelineScenarioTest, WithTwoWritesInFlightTheNextGroupStartsBeforeTheFirstEnds) {
  PipelinedStore* const pipelined = StartShardWithWritesInFlight(2);
  const auto pending = [this](size_t writes) { return WritesPending(writes); };
  RankedCompletion& first = Send(Op::kDeposit, "a", 100, "w1");
  ASSERT_TRUE(pending(1));
  RankedCompletion& second = Send(Op::kDeposit, "a", 10, "w2");
  ASSERT_TRUE(pending(2));
  RankedCompletion& open_b = Send(Op::kDeposit, "b", 5, "w3");
  RankedCompletion& withdraw = Send(Op::kWithdraw, "a", 30, "w4");
  ASSERT_TRUE(Decided(4, observer_));
  // No room for a third write, and nothing is answered before its write ends.
  EXPECT_EQ(pipelined->pending(), 2u);
  EXPECT_EQ(Replied(), 0u);
  EXPECT_TRUE(store_.journal().empty());

  pipelined->Finish();
  ASSERT_TRUE(WaitUntil([&first] { return first.HasReply(); }, "the first group is answered"));
  // The queued group's write starts in the room the first left.
  ASSERT_TRUE(pending(2));
  EXPECT_FALSE(second.HasReply());
  EXPECT_FALSE(open_b.HasReply());
  EXPECT_EQ(first.reply().balance, 100);
  pipelined->Finish();
  ASSERT_TRUE(WaitUntil([&second] { return second.HasReply(); }, "the second group is answered"));
  EXPECT_FALSE(withdraw.HasReply());
  pipelined->Finish();
  ASSERT_TRUE(AllAnswered());

  EXPECT_EQ(second.reply().balance, 110);
  EXPECT_EQ(open_b.reply().balance, 5);
  EXPECT_EQ(withdraw.reply().balance, 80);
  for (const RankedCompletion& call : calls_) EXPECT_EQ(call.reply().outcome, Outcome::kOk);
  EXPECT_LT(first.rank(), second.rank());
  EXPECT_LT(second.rank(), open_b.rank());
  EXPECT_LT(open_b.rank(), withdraw.rank());
  EXPECT_EQ(pipelined->most_pending(), 2u);
  EXPECT_EQ(store_.groups(), 3);
  EXPECT_EQ(store_.account("a"), (AccountState{.balance = 80, .sequence = 3}));
  EXPECT_EQ(store_.account("b"), (AccountState{.balance = 5, .sequence = 1}));
}

// The first of two writes in flight fails: the second, decided on top of it, fails with it and
// never reaches the store, the shard rolls both back, and writes go on once the failure is
// handled.
TEST_F(CommitPipelineScenarioTest, AFailedWriteFailsTheWriteInFlightBehindIt) {
  PipelinedStore* const pipelined = StartShardWithWritesInFlight(2);
  const auto pending = [this](size_t writes) { return WritesPending(writes); };
  RankedCompletion& opened = Send(Op::kDeposit, "a", 100, "f0");
  ASSERT_TRUE(pending(1));
  pipelined->Finish();
  ASSERT_EQ(Await(opened).balance, 100);

  RankedCompletion& deposit = Send(Op::kDeposit, "a", 50, "f1");
  ASSERT_TRUE(pending(1));
  // 150 - 120: only the first write's deposit allows it.
  RankedCompletion& withdraw = Send(Op::kWithdraw, "a", 120, "f2");
  ASSERT_TRUE(pending(2));
  store_.FailNextWrites(1);
  pipelined->Finish();
  EXPECT_FALSE(deposit.HasReply());  // Not before the write behind it has its outcome too.
  pipelined->Finish();
  ASSERT_TRUE(WaitUntil([&] { return deposit.HasReply() && withdraw.HasReply(); },
                        "both writes' calls are answered"));
  EXPECT_EQ(deposit.reply().outcome, Outcome::kStorageFailed);
  EXPECT_EQ(withdraw.reply().outcome, Outcome::kStorageFailed);
  EXPECT_EQ(store_.failed_writes(), 1);  // The second never reached the store.
  EXPECT_EQ(store_.groups(), 2);
  EXPECT_EQ(store_.account("a"), (AccountState{.balance = 100, .sequence = 1}));

  // Handled: the next write repairs the store and lands; the retries apply once.
  RankedCompletion& retried = Send(Op::kDeposit, "a", 50, "f1");
  ASSERT_TRUE(pending(1));
  pipelined->Finish();
  EXPECT_EQ(Await(retried).outcome, Outcome::kOk);
  EXPECT_EQ(retried.reply().balance, 150);
  RankedCompletion& read = Send(Op::kBalance, "a", 0);
  EXPECT_EQ(Await(read).balance, 150);
  EXPECT_EQ(pipelined->refused(), 0);
  EXPECT_EQ(store_.account("a"), (AccountState{.balance = 150, .sequence = 2}));
  EXPECT_EQ(JournalEntriesFor("f1"), 1u);
  EXPECT_EQ(JournalEntriesFor("f2"), 0u);
}

TEST_P(CommitPipelineTest, AFailedGroupFailsTheGroupDecidedOnTopOfIt) {
  StartShard();
  ASSERT_EQ(Call(Op::kDeposit, "a", 100).balance, 100);
  WriteHold& hold = HoldNextWrite();
  RankedCompletion& deposit = Send(Op::kDeposit, "a", 50, "n-1");
  ASSERT_TRUE(hold.WaitUntilHeld());
  // Group N+1, decided on top of N's deposit (150): its calls read and change undurable state.
  RankedCompletion& withdraw = Send(Op::kWithdraw, "a", 120, "n1-1");
  RankedCompletion& read = Send(Op::kBalance, "a", 0);
  RankedCompletion& open_b = Send(Op::kDeposit, "b", 5, "n1-2");
  ASSERT_TRUE(Decided(5, observer_));
  store_.FailWrites(true);
  hold.Release();

  ASSERT_TRUE(AllAnswered());
  EXPECT_EQ(deposit.reply().outcome, Outcome::kStorageFailed);
  // Decided at 150 - 120 = 30, which only N's deposit allowed: rolled back with it.
  EXPECT_EQ(withdraw.reply().outcome, Outcome::kStorageFailed);
  // The read is answered from the restored state, not from the failed deposit's.
  EXPECT_EQ(read.reply().outcome, Outcome::kOk);
  EXPECT_EQ(read.reply().balance, 100);
  EXPECT_EQ(open_b.reply().outcome, Outcome::kStorageFailed);
  EXPECT_LT(deposit.rank(), withdraw.rank());
  // Group N+1 was not written after N failed (its write could only fail or land out of order).
  EXPECT_EQ(store_.failed_writes(), 1);
  EXPECT_EQ(observer_.storage_errors.load(), 1);
  for (const RankedCompletion& call : calls_) EXPECT_EQ(call.completions(), 1);

  store_.FailWrites(false);
  // Memory equals the store.
  EXPECT_EQ(store_.account("a"), (AccountState{.balance = 100, .sequence = 1}));
  EXPECT_EQ(store_.account("b"), std::nullopt);
  EXPECT_EQ(Call(Op::kBalance, "a", 0).balance, 100);
  EXPECT_EQ(Call(Op::kBalance, "b", 0).outcome, Outcome::kAccountNotFound);
  // A retry with the same request_id applies once; its second retry is replayed.
  const Reply retried = Call(Op::kDeposit, "a", 50, "n-1");
  EXPECT_EQ(retried.outcome, Outcome::kOk);
  EXPECT_EQ(retried.balance, 150);
  EXPECT_FALSE(retried.replayed);
  const Reply again = Call(Op::kDeposit, "a", 50, "n-1");
  EXPECT_EQ(again.balance, 150);
  EXPECT_TRUE(again.replayed);
  EXPECT_EQ(Call(Op::kWithdraw, "a", 120, "n1-1").balance, 30);
  EXPECT_EQ(Call(Op::kDeposit, "b", 5, "n1-2").balance, 5);
  EXPECT_EQ(JournalEntriesFor("n-1"), 1u);
  EXPECT_EQ(JournalEntriesFor("n1-1"), 1u);
  EXPECT_EQ(store_.account("a"), (AccountState{.balance = 30, .sequence = 3}));
  EXPECT_EQ(store_.account("b"), (AccountState{.balance = 5, .sequence = 1}));
}

TEST_P(CommitPipelineTest, ARetryWhileTheFirstWriteIsInFlightIsAnsweredFromMemory) {
  StartShard();
  WriteHold& hold = HoldNextWrite();
  RankedCompletion& first = Send(Op::kDeposit, "a", 40, "once");
  ASSERT_TRUE(hold.WaitUntilHeld());
  RankedCompletion& retry = Send(Op::kDeposit, "a", 40, "once");
  RankedCompletion& reused = Send(Op::kDeposit, "a", 41, "once");
  ASSERT_TRUE(Decided(3, observer_));
  // The replay reads an undurable record: it waits for that record's write too.
  EXPECT_FALSE(retry.HasReply());
  hold.Release();

  ASSERT_TRUE(AllAnswered());
  EXPECT_EQ(first.reply().outcome, Outcome::kOk);
  EXPECT_EQ(first.reply().balance, 40);
  EXPECT_FALSE(first.reply().replayed);
  EXPECT_EQ(retry.reply().outcome, Outcome::kOk);
  EXPECT_EQ(retry.reply().balance, 40);
  EXPECT_TRUE(retry.reply().replayed);
  EXPECT_EQ(reused.reply().outcome, Outcome::kRequestIdReused);
  EXPECT_EQ(std::get<ReusedRequestId>(reused.reply().detail).amount, 40);
  EXPECT_LT(first.rank(), retry.rank());
  EXPECT_EQ(JournalEntriesFor("once"), 1u);
  EXPECT_EQ(store_.account("a"), (AccountState{.balance = 40, .sequence = 1}));
  // Once durable, the record is answered from the store.
  const Reply later = Call(Op::kDeposit, "a", 40, "once");
  EXPECT_TRUE(later.replayed);
  EXPECT_EQ(later.balance, 40);
  EXPECT_EQ(Call(Op::kBalance, "a", 0).balance, 40);
}

// Shutdown with a write held in flight: Stop waits for it, and every accepted call gets its real
// outcome.
TEST_P(CommitPipelineTest, StopWaitsForTheWriteInFlightAndAnswersEveryAcceptedCall) {
  StartShard();
  WriteHold& hold = HoldNextWrite();
  RankedCompletion& first = Send(Op::kDeposit, "a", 1);
  ASSERT_TRUE(hold.WaitUntilHeld());
  RankedCompletion& second = Send(Op::kDeposit, "a", 2);
  RankedCompletion& third = Send(Op::kWithdraw, "a", 3);
  stopper_ = std::thread([this] {
    shard_->Stop();
    stopped_.Notify();
  });
  // The mailbox closes at once; what was accepted before is still answered.
  ASSERT_TRUE(ProbeUntilClosed("a"));
  EXPECT_FALSE(stopped_.HasBeenNotified());
  EXPECT_EQ(Replied(), 0u);
  hold.Release();
  stopper_.join();
  // Stop returned only once everything accepted was answered.
  EXPECT_EQ(Replied(), calls_.size());
  EXPECT_EQ(first.reply().balance, 1);
  EXPECT_EQ(second.reply().balance, 3);
  EXPECT_EQ(third.reply().outcome, Outcome::kOk);
  EXPECT_EQ(third.reply().balance, 0);
  for (const RankedCompletion& call : calls_) EXPECT_EQ(call.completions(), 1);
  EXPECT_EQ(store_.account("a"), (AccountState{.balance = 0, .sequence = 3}));
}

// The held write fails while Stop waits for it: the shard thread has already exited, so Stop
// itself must roll the failed batches back and answer them.
TEST_P(CommitPipelineTest, StopAnswersTheCallsOfAWriteThatFailsWhileItWaits) {
  StartShard();
  WriteHold& hold = HoldNextWrite();
  RankedCompletion& first = Send(Op::kDeposit, "a", 5, "s-1");
  ASSERT_TRUE(hold.WaitUntilHeld());
  RankedCompletion& second = Send(Op::kDeposit, "a", 6, "s-2");
  // Decided on top of the first (with inline execution off, the shard thread decides it later).
  ASSERT_TRUE(Decided(2, observer_));
  stopper_ = std::thread([this] {
    shard_->Stop();
    stopped_.Notify();
  });
  ASSERT_TRUE(ProbeUntilClosed("a"));
  store_.FailNextWrites(1);
  hold.Release();
  stopper_.join();

  EXPECT_EQ(Replied(), calls_.size());
  EXPECT_EQ(first.reply().outcome, Outcome::kStorageFailed);
  EXPECT_EQ(second.reply().outcome, Outcome::kStorageFailed);
  // Probes accepted before the close read the restored state: "a" was never opened.
  for (size_t i = 2; i < calls_.size(); ++i) {
    EXPECT_EQ(calls_[i].reply().outcome, Outcome::kAccountNotFound);
  }
  for (const RankedCompletion& call : calls_) EXPECT_EQ(call.completions(), 1);
  EXPECT_EQ(store_.failed_writes(), 1);
  EXPECT_EQ(store_.account("a"), std::nullopt);
  EXPECT_TRUE(store_.journal().empty());
}

TEST_P(CommitPipelineTest, ConcurrentSendersWithFailingWritesApplyEachRequestOnce) {
  RunConcurrentSendersWithFailingWrites(nullptr);
}

// The same with three group writes in flight, ending on the store's thread (as a cluster
// replica's): a failure fails the writes started behind it too, and none of them lands.
TEST_P(CommitPipelineTest, ConcurrentSendersWithFailingWritesInFlightApplyEachRequestOnce) {
  auto* pipelined = new PipelinedStore(&store_, /*in_flight=*/3, /*auto_finish=*/true);
  front_store_.reset(pipelined);
  RunConcurrentSendersWithFailingWrites(pipelined);
  EXPECT_GT(pipelined->most_pending(), 1u);
}

TEST_F(CommitPipelineScenarioTest, ShardsSharingTheRoutersPipelineAreWrittenInOneWrite) {
  StartRouter(2, 1024, /*inline_execution=*/true);
  const absl::string_view on_0 = AccountOn(0, "x");
  const absl::string_view on_1 = AccountOn(1, "y");
  WriteHold& hold = HoldNextWrite();
  RankedCompletion& first = Send(Op::kDeposit, on_0, 7);
  ASSERT_TRUE(hold.WaitUntilHeld());
  for (int i = 1; i <= 3; ++i) {
    Send(Op::kDeposit, on_0, i);
    Send(Op::kDeposit, on_1, int64_t{10} * i);
  }
  EXPECT_EQ(Replied(), 0u);
  hold.Release();

  ASSERT_TRUE(AllAnswered());
  EXPECT_EQ(first.reply().balance, 7);
  EXPECT_EQ(Call(Op::kBalance, on_0, 0).balance, 7 + 1 + 2 + 3);
  EXPECT_EQ(Call(Op::kBalance, on_1, 0).balance, 10 + 20 + 30);
  // Two store writes for seven batches of two shards: the second held both shards' batches.
  EXPECT_EQ(store_.groups(), 2);
  EXPECT_EQ(store_.batches().size(), 7u);
  const std::vector<RecordingCommitObserver::GroupWrite> writes = commit_observer_.writes();
  ASSERT_EQ(writes.size(), 2u);
  EXPECT_EQ(writes[0].batches, 1u);
  EXPECT_EQ(writes[1].batches, 6u);
  EXPECT_EQ(writes[1].calls, 6u);
  EXPECT_TRUE(writes[0].ok && writes[1].ok);
  EXPECT_EQ(store_.account(std::string(on_0)), (AccountState{.balance = 13, .sequence = 4}));
  EXPECT_EQ(store_.account(std::string(on_1)), (AccountState{.balance = 60, .sequence = 3}));
}

TEST_F(CommitPipelineScenarioTest, AFailedGroupSparesTheBatchesOfOtherShardsQueuedBehindIt) {
  StartRouter(2, 1024, /*inline_execution=*/true);
  const absl::string_view on_0 = AccountOn(0, "x");
  const absl::string_view other_0 = AccountOn(0, "z");
  const absl::string_view on_1 = AccountOn(1, "y");
  WriteHold& hold = HoldNextWrite();
  RankedCompletion& failed = Send(Op::kDeposit, on_0, 7);
  ASSERT_TRUE(hold.WaitUntilHeld());
  // Shard 0's next batch was decided on top of the failed one; shard 1's was not.
  RankedCompletion& on_top = Send(Op::kDeposit, other_0, 3);
  RankedCompletion& spared = Send(Op::kDeposit, on_1, 11);
  store_.FailNextWrites(1);
  hold.Release();

  ASSERT_TRUE(AllAnswered());
  EXPECT_EQ(failed.reply().outcome, Outcome::kStorageFailed);
  EXPECT_EQ(on_top.reply().outcome, Outcome::kStorageFailed);
  EXPECT_EQ(spared.reply().outcome, Outcome::kOk);
  EXPECT_EQ(spared.reply().balance, 11);
  EXPECT_EQ(store_.failed_writes(), 1);
  EXPECT_EQ(store_.account(std::string(on_1)), (AccountState{.balance = 11, .sequence = 1}));
  EXPECT_EQ(store_.account(std::string(on_0)), std::nullopt);
  EXPECT_EQ(store_.account(std::string(other_0)), std::nullopt);
  const std::vector<RecordingCommitObserver::GroupWrite> writes = commit_observer_.writes();
  ASSERT_EQ(writes.size(), 2u);
  EXPECT_FALSE(writes[0].ok);
  EXPECT_TRUE(writes[1].ok);
  EXPECT_EQ(writes[1].batches, 1u);
  EXPECT_EQ(router_observers_[0].storage_errors.load(), 1);
  EXPECT_EQ(router_observers_[1].storage_errors.load(), 0);
  // Shard 0 writes again afterwards; memory equals the store.
  EXPECT_EQ(Call(Op::kBalance, on_0, 0).outcome, Outcome::kAccountNotFound);
  EXPECT_EQ(Call(Op::kDeposit, other_0, 3).balance, 3);
  EXPECT_EQ(store_.account(std::string(other_0)), (AccountState{.balance = 3, .sequence = 1}));
}

// A write can fail after its data reached the disk (a failed sync). The rolled-back accounts are
// reloaded from the store before their next use, so the ledger continues from the landed state.
TEST_F(CommitPipelineScenarioTest, AFailedWriteThatLandedIsReloadedBeforeTheNextUse) {
  StartShard(1024, /*inline_execution=*/true);
  ASSERT_EQ(Call(Op::kDeposit, "a", 100).balance, 100);
  WriteHold& hold = HoldNextWrite();
  RankedCompletion& landed = Send(Op::kDeposit, "a", 50, "landed");
  ASSERT_TRUE(hold.WaitUntilHeld());
  RankedCompletion& on_top = Send(Op::kDeposit, "a", 7);  // Decided at 157, never written.
  store_.FailNextWrites(1);
  store_.LandFailedWrites(true);
  hold.Release();

  ASSERT_TRUE(AllAnswered());
  EXPECT_EQ(landed.reply().outcome, Outcome::kStorageFailed);
  EXPECT_EQ(on_top.reply().outcome, Outcome::kStorageFailed);
  EXPECT_EQ(store_.failed_writes(), 1);
  EXPECT_EQ(store_.account("a"), (AccountState{.balance = 150, .sequence = 2}));
  // The next deposit starts from the landed state, and continues its numbering.
  const Reply next = Call(Op::kDeposit, "a", 1);
  EXPECT_EQ(next.outcome, Outcome::kOk);
  EXPECT_EQ(next.balance, 151);
  EXPECT_EQ(store_.account("a"), (AccountState{.balance = 151, .sequence = 3}));
  const std::vector<JournalEntry> journal = store_.journal();
  ASSERT_EQ(journal.size(), 3u);
  EXPECT_EQ(journal[2].sequence, 3u);
  EXPECT_EQ(journal[2].balance_after, 151);
  // The landed call's retry finds its record: replayed, not applied again.
  const Reply retried = Call(Op::kDeposit, "a", 50, "landed");
  EXPECT_EQ(retried.outcome, Outcome::kOk);
  EXPECT_TRUE(retried.replayed);
  EXPECT_EQ(retried.balance, 150);
  EXPECT_EQ(Call(Op::kBalance, "a", 0).balance, 151);
  EXPECT_EQ(JournalEntriesFor("landed"), 1u);
}

// Capacity bounds what a shard accepted and has not answered: queued, being decided, and decided
// but waiting for the write. Shard 1 of the router is only a probe: the pipeline answers batches
// one after another, in order, and frees a batch's cells right after answering it, so the probe's
// later reply proves that shard 0's cells are free again (its own replies do not: they come first).
TEST_F(CommitPipelineScenarioTest, TheMailboxCapacityBoundsQueuedAndDecidedAwaitingWrite) {
  constexpr size_t kCapacity = 4;
  StartRouter(2, kCapacity, /*inline_execution=*/true);
  const absl::string_view on_0 = AccountOn(0, "x");
  const absl::string_view stall_0 = AccountOn(0, "stall");
  const absl::string_view probe = AccountOn(1, "p");
  CountingObserver& shard_0 = router_observers_[0];

  WriteHold& hold = HoldNextWrite();
  Send(Op::kDeposit, on_0, 1);
  ASSERT_TRUE(hold.WaitUntilHeld());
  // A sender blocked while deciding holds the shard, so the next two stay queued.
  RankedCompletion& stalled = NewCall();
  sender_ = std::thread([this, stall_0, &stalled] {
    EXPECT_EQ(TrySend(Op::kDeposit, stall_0, 1, {}, stalled), SendOutcome::kAccepted);
  });
  ASSERT_TRUE(WaitUntil([&] { return stalled_.HasBeenNotified(); }, "the sender is deciding"));
  Send(Op::kDeposit, on_0, 1);
  Send(Op::kDeposit, on_0, 1);
  // kCapacity accepted: 1 awaiting the write, 1 being decided, 2 queued.
  RankedCompletion& refused = NewRefusedCall();
  EXPECT_EQ(TrySend(Op::kDeposit, on_0, 1000, {}, refused), SendOutcome::kFull);
  EXPECT_EQ(shard_0.shed.load(), 1);

  unstall_.Notify();
  sender_.join();
  // The sender decided the queued two before it let go: all four wait for the write. Still full.
  ASSERT_TRUE(Decided(4, shard_0));
  EXPECT_EQ(TrySend(Op::kDeposit, on_0, 1000, {}, refused), SendOutcome::kFull);
  EXPECT_EQ(shard_0.shed.load(), 2);
  EXPECT_EQ(Replied(), 0u);

  hold.Release();
  ASSERT_TRUE(AllAnswered());
  for (const RankedCompletion& call : calls_) EXPECT_EQ(call.reply().outcome, Outcome::kOk);
  EXPECT_EQ(Call(Op::kDeposit, probe, 1).outcome, Outcome::kOk);
  EXPECT_FALSE(refused.HasReply());
  EXPECT_EQ(store_.account(std::string(on_0)), (AccountState{.balance = 3, .sequence = 3}));

  // The capacity is whole again: four more are accepted while a write is held, the fifth is not.
  WriteHold& again = HoldNextWrite();
  Send(Op::kDeposit, on_0, 1);
  ASSERT_TRUE(again.WaitUntilHeld());
  for (size_t i = 1; i < kCapacity; ++i) Send(Op::kDeposit, on_0, 1);
  EXPECT_EQ(TrySend(Op::kDeposit, on_0, 1000, {}, NewRefusedCall()), SendOutcome::kFull);
  EXPECT_EQ(shard_0.shed.load(), 3);
  again.Release();
  ASSERT_TRUE(AllAnswered());
  EXPECT_EQ(Call(Op::kDeposit, probe, 1).outcome, Outcome::kOk);
  EXPECT_EQ(Call(Op::kBalance, on_0, 0).balance, 7);
  EXPECT_EQ(store_.account(std::string(on_0)), (AccountState{.balance = 7, .sequence = 7}));
  for (const RankedCompletion& call : refused_) EXPECT_FALSE(call.HasReply());
}

TEST_F(CommitPipelineScenarioTest, RouterStopDrainsThePipelineOfEveryShard) {
  StartRouter(2, 1024, /*inline_execution=*/true);
  const absl::string_view on_0 = AccountOn(0, "x");
  const absl::string_view on_1 = AccountOn(1, "y");
  WriteHold& hold = HoldNextWrite();
  Send(Op::kDeposit, on_0, 5);
  ASSERT_TRUE(hold.WaitUntilHeld());
  Send(Op::kDeposit, on_1, 6);
  Send(Op::kWithdraw, on_0, 2);
  stopper_ = std::thread([this] {
    router_->Stop();
    stopped_.Notify();
  });
  ASSERT_TRUE(ProbeUntilClosed(on_1));
  EXPECT_FALSE(stopped_.HasBeenNotified());
  EXPECT_EQ(Replied(), 0u);
  hold.Release();
  stopper_.join();
  EXPECT_EQ(Replied(), calls_.size());
  for (const RankedCompletion& call : calls_) EXPECT_EQ(call.reply().outcome, Outcome::kOk);
  EXPECT_EQ(calls_[0].reply().balance, 5);
  EXPECT_EQ(calls_[1].reply().balance, 6);
  EXPECT_EQ(calls_[2].reply().balance, 3);
  EXPECT_EQ(store_.account(std::string(on_0)), (AccountState{.balance = 3, .sequence = 2}));
  EXPECT_EQ(store_.account(std::string(on_1)), (AccountState{.balance = 6, .sequence = 1}));
}

// A shutdown that runs out of grace: calls not yet decided are answered kShuttingDown, unapplied;
// those already decided still get their real outcome once their write is durable.
TEST_F(CommitPipelineScenarioTest, AbandonedUndecidedCallsAreRefusedWhileDecidedOnesComplete) {
  // The shard thread decides, so that the stalled one leaves the rest queued behind it.
  StartShard(1024, /*inline_execution=*/false);
  WriteHold& hold = HoldNextWrite();
  RankedCompletion& decided = Send(Op::kDeposit, "a", 10);
  ASSERT_TRUE(hold.WaitUntilHeld());
  RankedCompletion& stalled = Send(Op::kDeposit, "stall", 1);
  ASSERT_TRUE(WaitUntil([&] { return stalled_.HasBeenNotified(); }, "the shard is deciding"));
  RankedCompletion& queued = Send(Op::kDeposit, "a", 20, "q-1");
  RankedCompletion& queued_read = Send(Op::kBalance, "a", 0);
  stopper_ = std::thread([this] {
    shard_->Stop();
    stopped_.Notify();
  });
  shard_->AbandonUndecided();
  unstall_.Notify();
  // Even the refusals wait for the held write: replies are released in order.
  EXPECT_FALSE(stopped_.HasBeenNotified());
  EXPECT_EQ(Replied(), 0u);
  hold.Release();
  stopper_.join();

  EXPECT_EQ(Replied(), calls_.size());
  EXPECT_EQ(decided.reply().outcome, Outcome::kOk);
  EXPECT_EQ(decided.reply().balance, 10);
  // Being decided when the shutdown gave up: it finishes with its real outcome.
  EXPECT_EQ(stalled.reply().outcome, Outcome::kOk);
  EXPECT_EQ(queued.reply().outcome, Outcome::kShuttingDown);
  EXPECT_EQ(queued_read.reply().outcome, Outcome::kShuttingDown);
  EXPECT_EQ(store_.account("a"), (AccountState{.balance = 10, .sequence = 1}));
  EXPECT_EQ(store_.account("stall"), (AccountState{.balance = 1, .sequence = 1}));
  EXPECT_EQ(JournalEntriesFor("q-1"), 0u);
}

// A request_id whose record the store holds only on disk: a sender, which must never wait for
// the disk, hands the batch to the shard thread, which looks it up and decides it.
TEST_F(CommitPipelineScenarioTest, ALookupThatNeedsTheDiskRunsOnTheShardThread) {
  // Recorded long ago (an hour before now, well within the TTL), as a previous run left it.
  const absl::Time long_ago = absl::Now() - absl::Hours(1);
  BatchWrite old;
  old.accounts.push_back({.account_id = "a", .state = {.balance = 100, .sequence = 1}});
  old.journal.push_back({.account_id = "a",
                         .sequence = 1,
                         .kind = EntryKind::kDeposit,
                         .amount = 100,
                         .balance_after = 100,
                         .request_id = "disk-old",
                         .time = long_ago});
  old.requests.push_back({.account_id = "a",
                          .request_id = "disk-old",
                          .record = {.op = Op::kDeposit,
                                     .amount = 100,
                                     .outcome = Outcome::kOk,
                                     .balance = 100,
                                     .recorded_at = long_ago}});
  ASSERT_TRUE(store_.Write(old).ok());
  auto* disk = new DiskLookupStore(&store_);
  front_store_.reset(disk);
  ShardOptions options = Options(1024, /*inline_execution=*/true);
  options.store = disk;
  shard_ = std::make_unique<Shard>(std::move(options), Hooks());
  shard_->LoadAccount("a", {.balance = 100, .sequence = 1});
  shard_->Start();

  const Reply replayed = Call(Op::kDeposit, "a", 100, "disk-old");
  EXPECT_EQ(replayed.outcome, Outcome::kOk);
  EXPECT_TRUE(replayed.replayed);
  EXPECT_EQ(replayed.balance, 100);
  const Reply fresh = Call(Op::kDeposit, "a", 5, "disk-new");
  EXPECT_EQ(fresh.outcome, Outcome::kOk);
  EXPECT_FALSE(fresh.replayed);
  EXPECT_EQ(fresh.balance, 105);
  // A batch that mixes an id memory can answer with one it cannot, decided by another sender
  // than the test's thread: it holds the shard while it decides "stall", so the two queue.
  RankedCompletion& stalled = NewCall();
  std::atomic<std::thread::id> sender_id;
  sender_ = std::thread([this, &stalled, &sender_id] {
    sender_id = std::this_thread::get_id();
    EXPECT_EQ(TrySend(Op::kDeposit, "stall", 1, {}, stalled), SendOutcome::kAccepted);
  });
  ASSERT_TRUE(WaitUntil([&] { return stalled_.HasBeenNotified(); }, "the sender is deciding"));
  RankedCompletion& from_memory = Send(Op::kDeposit, "a", 5, "memory-new");
  RankedCompletion& from_disk = Send(Op::kDeposit, "a", 100, "disk-old");
  unstall_.Notify();
  sender_.join();
  ASSERT_TRUE(AllAnswered());
  EXPECT_EQ(stalled.reply().outcome, Outcome::kOk);
  EXPECT_EQ(from_memory.reply().balance, 110);
  EXPECT_FALSE(from_memory.reply().replayed);
  EXPECT_EQ(from_disk.reply().outcome, Outcome::kOk) << OutcomeName(from_disk.reply().outcome);
  EXPECT_TRUE(from_disk.reply().replayed);
  EXPECT_EQ(from_disk.reply().balance, 100);
  EXPECT_TRUE(Call(Op::kDeposit, "a", 5, "disk-new").replayed);
  EXPECT_EQ(Call(Op::kBalance, "a", 0).balance, 110);

  // Every blocking lookup ran on the shard thread: never the test's, never the other sender's.
  const std::vector<std::thread::id> threads = disk->lookup_threads();
  EXPECT_GE(threads.size(), 4u);  // disk-old twice, disk-new twice.
  for (const std::thread::id thread : threads) {
    EXPECT_NE(thread, std::this_thread::get_id());
    EXPECT_NE(thread, sender_id.load());
  }
  EXPECT_EQ(JournalEntriesFor("disk-old"), 1u);
  EXPECT_EQ(JournalEntriesFor("disk-new"), 1u);
  EXPECT_EQ(JournalEntriesFor("memory-new"), 1u);
  EXPECT_EQ(store_.account("a"), (AccountState{.balance = 110, .sequence = 3}));
  EXPECT_EQ(store_.account("stall"), (AccountState{.balance = 1, .sequence = 1}));
}

}  // namespace
}  // namespace ledger
