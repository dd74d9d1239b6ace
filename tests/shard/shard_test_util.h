// Test helpers for driving shards by hand: a Completion that records its reply, and an observer
// that counts what a shard reports.
#ifndef LEDGER_TESTS_SHARD_SHARD_TEST_UTIL_H_
#define LEDGER_TESTS_SHARD_SHARD_TEST_UTIL_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "shard/ledger_rules.h"
#include "shard/message.h"
#include "shard/router.h"
#include "shard/shard_observer.h"
#include "base/stable_hash.h"
#include "tests/wait_until.h"

namespace ledger::testing_util {

// A one-shot event, like absl::Notification but made only of std::atomic, so ThreadSanitizer sees
// its synchronisation (Debian's Abseil library is not TSan-instrumented). Thread-safe.
class Event {
 public:
  void Notify() {
    notified_.store(true, std::memory_order_release);
    notified_.notify_all();
  }
  void WaitForNotification() const { notified_.wait(false, std::memory_order_acquire); }
  bool HasBeenNotified() const { return notified_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> notified_{false};
};

// Records the one reply a message gets. Thread-safe: Complete is called by the shard thread,
// reply() after WaitForReply by the test thread.
class RecordingCompletion final : public Completion {
 public:
  bool CallerGone() const override { return gone_.load(); }
  void Complete(const Reply& reply) override {
    reply_ = reply;
    completions_.fetch_add(1);
    done_.Notify();
  }

  void MarkCallerGone() { gone_.store(true); }
  const Reply& WaitForReply() {
    done_.WaitForNotification();
    return reply_;
  }
  bool HasReply() const { return done_.HasBeenNotified(); }
  int completions() const { return completions_.load(); }

 private:
  std::atomic<bool> gone_{false};
  std::atomic<int> completions_{0};
  Reply reply_;
  Event done_;
};

// Counts every event. Thread-safe.
class CountingObserver final : public ShardObserver {
 public:
  void OnShed(size_t) override { shed.fetch_add(1); }
  void OnExpired() override { expired.fetch_add(1); }
  void OnHandled(Op, std::chrono::nanoseconds wait, std::chrono::nanoseconds handler) override {
    handled.fetch_add(1);
    if (wait.count() < 0 || handler.count() < 0) negative_durations.fetch_add(1);
  }
  void OnInternalError() override { internal_errors.fetch_add(1); }
  void OnBatch(size_t size, size_t account_count) override {
    batches.fetch_add(1);
    batched_messages.fetch_add(static_cast<int64_t>(size));
    accounts.store(static_cast<int64_t>(account_count));
  }
  void OnStorageError() override { storage_errors.fetch_add(1); }

  std::atomic<int64_t> shed{0};
  std::atomic<int64_t> expired{0};
  std::atomic<int64_t> handled{0};
  std::atomic<int64_t> internal_errors{0};
  std::atomic<int64_t> batches{0};
  std::atomic<int64_t> batched_messages{0};
  std::atomic<int64_t> accounts{0};
  std::atomic<int64_t> negative_durations{0};
  std::atomic<int64_t> storage_errors{0};
};

// The amount of a Deposit's message; 0 for any other kind. For test hooks that pick one out.
inline int64_t DepositAmount(const Message& message) {
  const auto* deposit = std::get_if<DepositCall>(&message.kind);
  return deposit == nullptr ? 0 : deposit->amount;
}

// A message for `account_id`, answered through `completion`; `request_id` empty means none.
inline Message MakeMessage(Op op, absl::string_view account_id, int64_t amount,
                           Completion* completion, absl::string_view request_id = {}) {
  return MakeAccountCall(op, account_id, amount, request_id, completion);
}

// An account id named after `prefix` that lives on shard `shard` of `shards`.
inline std::string AccountOnShard(const std::string& prefix, int32_t shard, int32_t shards) {
  for (int i = 0; i < 10000; ++i) {
    std::string id = absl::StrCat(prefix, "-", i);
    if (ShardOf(id, shards) == shard) return id;
  }
  ADD_FAILURE() << "no account id for shard " << shard << " of " << shards;
  return prefix;
}

// Waits, bounded, for a completion's one reply. A reply that never comes fails the test (and
// reads as kInternal); the completion must then outlive the router, which the callers'
// declaration order ensures.
inline Reply AwaitReply(RecordingCompletion& completion) {
  EXPECT_TRUE(WaitUntil([&] { return completion.HasReply(); }, "the call is answered"));
  if (!completion.HasReply()) return {.outcome = Outcome::kInternal};
  EXPECT_EQ(completion.completions(), 1);
  return completion.WaitForReply();
}

// Sends one message to the shard of `account_id` and waits (bounded) for its reply; a refused
// send fails the test.
inline Reply CallShard(Router& router, Op op, absl::string_view account_id, int64_t amount) {
  RecordingCompletion completion;
  EXPECT_EQ(
      router.TrySend(router.ShardFor(account_id), MakeMessage(op, account_id, amount, &completion)),
      SendOutcome::kAccepted);
  return AwaitReply(completion);
}

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_SHARD_SHARD_TEST_UTIL_H_
