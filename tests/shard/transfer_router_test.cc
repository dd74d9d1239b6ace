// Transfers under load through a Router: many threads move money both ways between random
// accounts (mostly across shards) while others deposit and withdraw, through mailboxes small
// enough to fill, so that the coordinator's steps are refused and retried. At the end every
// balance is exactly what the OK replies imply, no money is in flight and every stored transfer
// is final. Runs under ThreadSanitizer too (with smaller counts).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "shard/router.h"
#include "tests/shard/memory_store.h"
#include "tests/shard/shard_test_util.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using testing_util::MakeMessage;
using testing_util::MemoryStore;
using testing_util::WaitUntil;

#if defined(__SANITIZE_THREAD__)
constexpr bool kUnderTsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kUnderTsan = true;
#else
constexpr bool kUnderTsan = false;
#endif
#else
constexpr bool kUnderTsan = false;
#endif

constexpr int32_t kRouterShards = 4;
constexpr int kAccounts = 1000;
constexpr int kThreads = 4;
// Bounded: about a second in Release; TSan is ~10x slower on two shared cores.
constexpr int kOpsPerThread = kUnderTsan ? 400 : 3000;
constexpr int64_t kOpening = 10'000;
// A first step refused by a full mailbox is sent again this many times (at first at once, then
// after a short sleep) before it counts as shed.
constexpr int kSendTries = 5000;

std::string AccountId(int i) { return absl::StrCat("acct-", i); }

// One call and its reply. The completion writes the reply, then publishes `done`.
struct TrackedCall final : public Completion {
  Op op = Op::kDeposit;
  std::string id;  // The transfer_id (transfers only).
  std::string account;
  std::string counterparty;
  int64_t amount = 0;
  bool accepted = false;
  Reply reply;
  std::atomic<bool> done{false};
  std::atomic<int>* completed = nullptr;

  bool CallerGone() const override { return false; }
  void Complete(const Reply& answer) override {
    reply = answer;
    // A second completion would be a bug; count it so that the test sees it.
    if (done.exchange(true, std::memory_order_acq_rel)) duplicate_completions.fetch_add(1);
    completed->fetch_add(1, std::memory_order_release);
  }
  static inline std::atomic<int> duplicate_completions{0};
};

// Sends `call` (a transfer through the coordinator, else to its shard), retrying a full mailbox.
// Returns how many times it found the mailbox full.
int SendTracked(Router& router, TrackedCall& call) {
  int full = 0;
  for (int attempt = 0; attempt < kSendTries; ++attempt) {
    SendOutcome outcome;
    if (call.op == Op::kTransfer) {
      outcome =
          router.transfers().Submit(call.id, call.account, call.counterparty, call.amount, &call);
    } else {
      outcome = router.TrySend(router.ShardFor(call.account),
                               MakeMessage(call.op, call.account, call.amount, &call));
    }
    if (outcome == SendOutcome::kAccepted) {
      call.accepted = true;
      return full;
    }
    EXPECT_EQ(outcome, SendOutcome::kFull);
    ++full;
    if (attempt < 16) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  return full;
}

struct Variant {
  bool durable;
  size_t mailbox_capacity;
  bool inline_execution;
  // With a store: every fail_every-th batch's write fails (and does not land), so that every
  // step is now and then rolled back and, after the first, retried. 0: none fails.
  int fail_every = 0;
};

class TransferRouterTest : public testing::TestWithParam<Variant> {};
INSTANTIATE_TEST_SUITE_P(
    Variants, TransferRouterTest,
    testing::Values(Variant{true, 8, true}, Variant{true, 8, false}, Variant{false, 8, true},
                    Variant{false, 8, false}, Variant{true, 1024, true}, Variant{true, 8, true, 7},
                    Variant{true, 1024, false, 5}),
    [](const testing::TestParamInfo<Variant>& info) {
      return absl::StrCat(
          info.param.durable ? "WithStore" : "WithoutStore", "Mailbox", info.param.mailbox_capacity,
          info.param.inline_execution ? "Inline" : "ShardThreadOnly",
          info.param.fail_every > 0 ? absl::StrCat("FailEvery", info.param.fail_every) : "");
    });

TEST_P(TransferRouterTest, BalancesAreExactlyWhatTheOkRepliesImply) {
  const Variant variant = GetParam();
  std::unique_ptr<MemoryStore> store = variant.durable ? std::make_unique<MemoryStore>() : nullptr;
  RouterOptions options;
  options.num_shards = kRouterShards;
  options.shard.store = store.get();
  options.shard.mailbox_capacity = variant.mailbox_capacity;
  options.shard.inline_execution = variant.inline_execution;
  options.transfers.retry_delay = absl::Microseconds(100);
  options.transfers.max_retry_delay = absl::Milliseconds(2);
  absl::StatusOr<std::unique_ptr<Router>> created = Router::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<Router> router = *std::move(created);
  router->Start();
  TrackedCall::duplicate_completions.store(0);
  std::atomic<int> batches_written{0};
  auto fail_some_writes = [&] {
    if (variant.fail_every == 0) return;
    store->LandFailedWrites(false);
    store->OnWrite([&](const BatchWrite&) {
      if (batches_written.fetch_add(1) % variant.fail_every == variant.fail_every - 1) {
        store->FailNextWrites(1);
      }
    });
  };

  // Every call lives until the end (the shards hold pointers to the accepted ones).
  std::atomic<int> completed{0};
  std::vector<std::unique_ptr<TrackedCall>> openings;
  for (int i = 0; i < kAccounts; ++i) {
    auto call = std::make_unique<TrackedCall>();
    call->account = AccountId(i);
    call->amount = kOpening;
    call->completed = &completed;
    SendTracked(*router, *call);
    ASSERT_TRUE(call->accepted);
    openings.push_back(std::move(call));
  }
  ASSERT_TRUE(WaitUntil([&] { return completed.load() == kAccounts; }, "every account is open"));
  for (const auto& call : openings) ASSERT_EQ(call->reply.outcome, Outcome::kOk);

  fail_some_writes();
  std::vector<std::vector<std::unique_ptr<TrackedCall>>> calls(kThreads);
  std::atomic<int64_t> full_mailboxes{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 random(1234 + t);
      std::uniform_int_distribution<int> account(0, kAccounts - 1);
      std::uniform_int_distribution<int> percent(0, 99);
      std::uniform_int_distribution<int64_t> amount(1, kOpening / 2);
      for (int i = 0; i < kOpsPerThread; ++i) {
        auto call = std::make_unique<TrackedCall>();
        call->completed = &completed;
        call->account = AccountId(account(random));
        call->amount = amount(random);
        const int kind = percent(random);
        if (kind < 70) {
          call->op = Op::kTransfer;
          call->id = absl::StrCat("t", t, "-", i);
          do {
            call->counterparty = AccountId(account(random));
          } while (call->counterparty == call->account);
          // Now and then to an account never opened: refused by the destination, refunded.
          if (kind < 3) call->counterparty = absl::StrCat("ghost-", i);
        } else if (kind < 85) {
          call->op = Op::kDeposit;
        } else {
          call->op = Op::kWithdraw;
        }
        full_mailboxes.fetch_add(SendTracked(*router, *call));
        calls[t].push_back(std::move(call));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  int accepted = kAccounts;
  for (const auto& per_thread : calls) {
    for (const auto& call : per_thread) accepted += call->accepted;
  }
  ASSERT_TRUE(WaitUntil([&] { return completed.load() == accepted; },
                        absl::StrCat("every accepted call is answered (", accepted, ")")));
  ASSERT_TRUE(WaitUntil([&] { return router->transfers().active() == 0; },
                        "the coordinator carries nothing"));
  EXPECT_EQ(TrackedCall::duplicate_completions.load(), 0);
  if (store != nullptr) store->OnWrite(nullptr);

  // The balances the OK replies imply; a refusal applied nothing.
  std::map<std::string, int64_t> expected;
  for (int i = 0; i < kAccounts; ++i) expected[AccountId(i)] = kOpening;
  int64_t deposited = kOpening * kAccounts;
  int64_t withdrawn = 0;
  std::map<std::string, const TrackedCall*> transfers;
  std::map<Outcome, int> outcomes;
  int transfers_ok = 0;
  for (const auto& per_thread : calls) {
    for (const auto& call : per_thread) {
      if (!call->accepted) continue;
      ASSERT_TRUE(call->done.load(std::memory_order_acquire));
      const Outcome outcome = call->reply.outcome;
      ++outcomes[outcome];
      // A full mailbox is never an answer: later steps are retried, not refused.
      EXPECT_NE(outcome, Outcome::kMailboxFull);
      EXPECT_FALSE(call->reply.replayed);
      if (call->op == Op::kTransfer) {
        transfers[call->id] = call.get();
        const bool ghost = call->counterparty.starts_with("ghost-");
        // kStorageFailed only for the first step (a failed write that did not land: nothing
        // applied); the coordinator retries the later ones.
        EXPECT_TRUE(outcome == Outcome::kOk || outcome == Outcome::kInsufficientFunds ||
                    (ghost && outcome == Outcome::kCounterpartyNotFound) ||
                    (variant.fail_every > 0 && outcome == Outcome::kStorageFailed))
            << OutcomeName(outcome) << " for " << call->id;
        EXPECT_TRUE(!ghost || outcome != Outcome::kOk);
        if (outcome != Outcome::kOk) continue;
        ++transfers_ok;
        expected[call->account] -= call->amount;
        expected[call->counterparty] += call->amount;
      } else {
        EXPECT_TRUE(outcome == Outcome::kOk ||
                    (call->op == Op::kWithdraw && outcome == Outcome::kInsufficientFunds) ||
                    (variant.fail_every > 0 && outcome == Outcome::kStorageFailed))
            << OutcomeName(outcome);
        if (outcome != Outcome::kOk) continue;
        const int64_t sign = call->op == Op::kDeposit ? 1 : -1;
        expected[call->account] += sign * call->amount;
        (call->op == Op::kDeposit ? deposited : withdrawn) += call->amount;
      }
    }
  }
  EXPECT_GT(transfers_ok, 0);
  for (const auto& [outcome, count] : outcomes) {
    std::cout << "  " << OutcomeName(outcome) << ": " << count << "\n";
  }
  std::cout << "  transfers sent: " << transfers.size()
            << ", full mailboxes: " << full_mailboxes.load()
            << ", step retries: " << router->transfers().step_retries()
            << ", failed writes: " << (store != nullptr ? store->failed_writes() : 0) << "\n";

  int64_t total = 0;
  for (const auto& [account, balance] : expected) {
    std::atomic<int> read{0};
    TrackedCall call;
    call.op = Op::kBalance;
    call.account = account;
    call.completed = &read;
    SendTracked(*router, call);
    ASSERT_TRUE(call.accepted);
    ASSERT_TRUE(WaitUntil([&] { return read.load() == 1; }, "a balance is read"));
    ASSERT_EQ(call.reply.outcome, Outcome::kOk) << account;
    EXPECT_EQ(call.reply.balance, balance) << account;
    total += call.reply.balance;
    if (store != nullptr) {
      EXPECT_EQ(store->account(account)->balance, balance) << account;
    }
  }
  EXPECT_EQ(total, deposited - withdrawn);
  EXPECT_EQ(router->transfers().in_flight_count(), 0);
  EXPECT_EQ(router->transfers().in_flight_amount(), 0);
  if (variant.durable && variant.mailbox_capacity <= 8) {
    EXPECT_GT(router->transfers().step_retries(), 0);
  }
  router->Stop();

  if (store == nullptr) return;
  // Every transfer is stored final, as its reply said; no ghost account was opened.
  std::map<std::string, TransferRecord> records = store->transfers();
  int recorded = 0;
  for (const auto& [id, call] : transfers)
    recorded += call->reply.outcome != Outcome::kStorageFailed;
  EXPECT_EQ(static_cast<int>(records.size()), recorded);
  for (const auto& [id, record] : records) {
    EXPECT_NE(record.state, TransferState::kPending) << id;
    auto call = transfers.find(id);
    ASSERT_NE(call, transfers.end()) << id;
    EXPECT_EQ(record.state == TransferState::kCommitted,
              call->second->reply.outcome == Outcome::kOk)
        << id;
    if (variant.fail_every > 0) {
      EXPECT_NE(call->second->reply.outcome, Outcome::kStorageFailed) << id << " was stored";
    }
    EXPECT_EQ(record.outcome, call->second->reply.outcome) << id;
  }
  for (const auto& per_thread : calls) {
    for (const auto& call : per_thread) {
      if (call->counterparty.starts_with("ghost-")) {
        EXPECT_EQ(store->account(call->counterparty), std::nullopt);
      }
    }
  }
}

}  // namespace
}  // namespace ledger
