// AdmissionControl: the server-wide bound on calls in flight, the refusal counts, and the
// pushback told to refused clients. Deterministic: time is passed in, never read.
#include "shard/admission_control.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace ledger {
namespace {

using std::chrono::milliseconds;
using Clock = AdmissionControl::Clock;

// One client's calls, admitted and answered in order: the slots it holds.
class Caller {
 public:
  Caller(AdmissionControl& admission, std::string name, Clock::time_point now = Clock::time_point{})
      : admission_(admission), name_(std::move(name)), now_(now) {}
  bool Admit() { return Try().admitted; }
  AdmissionControl::Admission Try() {
    AdmissionControl::Admission admitted = admission_.TryAdmit(name_, now_);
    if (admitted.admitted) slots_.push_back(admitted.slot);
    return admitted;
  }
  void Answer(int32_t shard) {
    ASSERT_FALSE(slots_.empty());
    admission_.Answered(shard, slots_.back(), now_);
    slots_.pop_back();
  }
  void set_now(Clock::time_point now) { now_ = now; }

 private:
  AdmissionControl& admission_;
  const std::string name_;
  Clock::time_point now_;
  std::vector<ClientShares::Slot> slots_;
};

TEST(AdmissionControlTest, AdmitsUpToTheLimitThenRefusesAndCountsTheRefusal) {
  AdmissionControl admission(/*max_in_flight=*/3, /*num_shards=*/2, Clock::time_point{});
  Caller caller(admission, "alone");
  EXPECT_TRUE(caller.Admit());
  EXPECT_TRUE(caller.Admit());
  EXPECT_TRUE(caller.Admit());
  EXPECT_FALSE(caller.Admit());
  EXPECT_FALSE(caller.Admit());
  EXPECT_EQ(admission.in_flight(), 3);  // A refused call never counts in flight.
  EXPECT_EQ(admission.admitted(), 3u);
  EXPECT_EQ(admission.refused(RefusalReason::kInFlightLimit), 2u);
  EXPECT_EQ(admission.refused(RefusalReason::kMailboxFull), 0u);
}

TEST(AdmissionControlTest, TheLimitFreesAsCallsAreAnswered) {
  AdmissionControl admission(2, 2, Clock::time_point{});
  Caller caller(admission, "alone");
  ASSERT_TRUE(caller.Admit());
  ASSERT_TRUE(caller.Admit());
  ASSERT_FALSE(caller.Admit());
  caller.Answer(/*shard=*/0);
  EXPECT_EQ(admission.in_flight(), 1);
  EXPECT_TRUE(caller.Admit());
  EXPECT_FALSE(caller.Admit());
  caller.Answer(1);
  caller.Answer(-1);  // Answered by no shard (History, bad input): frees the same.
  EXPECT_EQ(admission.in_flight(), 0);
  EXPECT_EQ(admission.admitted(), 3u);
  EXPECT_EQ(admission.refused(RefusalReason::kInFlightLimit), 2u);
}

TEST(AdmissionControlTest, RefusalsAfterAdmissionAreCountedByReason) {
  AdmissionControl admission(10, 2, Clock::time_point{});
  admission.CountRefused(RefusalReason::kMailboxFull);
  admission.CountRefused(RefusalReason::kMailboxFull);
  admission.CountRefused(RefusalReason::kShuttingDown);
  EXPECT_EQ(admission.refused(RefusalReason::kMailboxFull), 2u);
  EXPECT_EQ(admission.refused(RefusalReason::kShuttingDown), 1u);
  EXPECT_EQ(admission.refused(RefusalReason::kInFlightLimit), 0u);
  EXPECT_STREQ(RefusalReasonName(RefusalReason::kInFlightLimit), "in_flight_limit");
  EXPECT_STREQ(RefusalReasonName(RefusalReason::kMailboxFull), "mailbox_full");
  EXPECT_STREQ(RefusalReasonName(RefusalReason::kShuttingDown), "shutting_down");
  EXPECT_STREQ(RefusalReasonName(RefusalReason::kFairShare), "fair_share");
}

TEST(PushbackForTest, IsTheTimeToAnswerTheQueueRoundedUpAndClamped) {
  EXPECT_EQ(PushbackFor(100, 10'000), milliseconds(10));  // 100 calls at 10k/s.
  EXPECT_EQ(PushbackFor(101, 10'000), milliseconds(11));  // Rounded up, never early.
  EXPECT_EQ(PushbackFor(1, 1'000'000), kMinPushback);     // Never "retry now".
  EXPECT_EQ(PushbackFor(0, 1'000'000), kMinPushback);     // An empty queue still waits 1 ms.
  EXPECT_EQ(PushbackFor(1'000'000, 10), kMaxPushback);    // Never "stay away for hours".
  EXPECT_EQ(PushbackFor(100, 0), kUnmeasuredPushback);    // No rate measured yet.
}

TEST(DrainRateTest, MeasuresAnsweredCallsPerSecondOverWholeWindows) {
  const Clock::time_point start{};
  DrainRate rate(start);
  for (int i = 0; i < 500; ++i) rate.Count();
  // Within the first window nothing is measured yet.
  EXPECT_EQ(rate.PerSecond(start + milliseconds(50)), 0);
  // 500 calls in 250 ms: 2,000 per second.
  EXPECT_DOUBLE_EQ(rate.PerSecond(start + milliseconds(250)), 2000);
  for (int i = 0; i < 100; ++i) rate.Count();
  // Inside the next window the last estimate stands.
  EXPECT_DOUBLE_EQ(rate.PerSecond(start + milliseconds(300)), 2000);
  // 100 more in the 250 ms since: 400 per second.
  EXPECT_DOUBLE_EQ(rate.PerSecond(start + milliseconds(500)), 400);
}

TEST(DrainRateTest, AfterAnIdleSpellTheRateIsMeasuredAfresh) {
  const Clock::time_point start{};
  DrainRate rate(start);
  for (int i = 0; i < 100; ++i) rate.Count();
  EXPECT_DOUBLE_EQ(rate.PerSecond(start + milliseconds(100)), 1000);
  // Ten idle seconds would average to almost nothing; the estimate restarts instead.
  EXPECT_EQ(rate.PerSecond(start + milliseconds(10'100)), 0);
  for (int i = 0; i < 300; ++i) rate.Count();
  EXPECT_DOUBLE_EQ(rate.PerSecond(start + milliseconds(10'200)), 3000);
}

TEST(AdmissionControlTest, PushbackFollowsTheServerRateForTheLimitAndTheShardRateForAMailbox) {
  const Clock::time_point start{};
  AdmissionControl admission(4, 2, start);
  Caller caller(admission, "alone", start);
  // Shard 0 answers 1,000 calls and shard 1 answers 100 in the first 100 ms.
  for (int i = 0; i < 1100; ++i) {
    ASSERT_TRUE(caller.Admit());
    caller.Answer(i < 1000 ? 0 : 1);
  }
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(caller.Admit());
  const auto now = start + milliseconds(100);
  // 4 in flight at 11,000 answered per second: under a millisecond, so the minimum.
  EXPECT_EQ(admission.PushbackAfterInFlightLimit(now), kMinPushback);
  // A full mailbox of 500 on shard 0 (10,000/s) takes 50 ms; on shard 1 (1,000/s) 500 ms.
  EXPECT_EQ(admission.PushbackAfterFullMailbox(0, 500, now), milliseconds(50));
  EXPECT_EQ(admission.PushbackAfterFullMailbox(1, 500, now), milliseconds(500));
}

// Many threads admitting and answering at once never hold more than the limit in flight, and
// every attempt is counted exactly once as admitted or refused. Run under TSan too.
TEST(AdmissionControlTest, ConcurrentCallersNeverExceedTheLimit) {
  constexpr int64_t kLimit = 8;
  constexpr int kThreads = 8;
  constexpr int kAttemptsPerThread = 20'000;
  AdmissionControl admission(kLimit, 2);
  std::atomic<int64_t> held{0};
  std::atomic<int64_t> most_held{0};
  std::atomic<uint64_t> admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Two clients, four threads each: the shares and the bound, both under contention.
      Caller caller(admission, t % 2 == 0 ? "even" : "odd", Clock::now());
      for (int i = 0; i < kAttemptsPerThread; ++i) {
        caller.set_now(Clock::now());
        if (!caller.Admit()) continue;
        admitted.fetch_add(1);
        const int64_t now_held = held.fetch_add(1) + 1;
        int64_t seen = most_held.load();
        while (now_held > seen && !most_held.compare_exchange_weak(seen, now_held)) {
        }
        held.fetch_sub(1);
        caller.Answer(t % 2);
        if (i % 64 == 0) admission.PushbackAfterInFlightLimit(Clock::now());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_LE(most_held.load(), kLimit);
  EXPECT_GT(most_held.load(), 0);
  EXPECT_EQ(admission.in_flight(), 0);
  EXPECT_EQ(admission.admitted(), admitted.load());
  EXPECT_EQ(admission.admitted() + admission.refused(RefusalReason::kInFlightLimit) +
                admission.refused(RefusalReason::kFairShare),
            static_cast<uint64_t>(kThreads) * kAttemptsPerThread);
}

// Issue 30's greedy client: alone it may fill the bound; once a second client calls, the first is
// held to half, so that the second is served while the first keeps every slot left free.
TEST(AdmissionControlTest, ASecondClientIsServedOnceTheFirstIsHeldToItsShare) {
  AdmissionControl admission(8, 2, Clock::time_point{});
  Caller greedy(admission, "address:10.0.0.1");
  Caller polite(admission, "address:10.0.0.2");
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(greedy.Admit());  // Alone: the whole bound.
  // The bound is full: the polite client's first call is refused by it, but now counts.
  const AdmissionControl::Admission first = polite.Try();
  EXPECT_FALSE(first.admitted);
  EXPECT_EQ(first.refusal, RefusalReason::kInFlightLimit);
  EXPECT_EQ(admission.shares().clients(), 2u);
  EXPECT_EQ(admission.shares().share(), 4);
  // As the greedy client's calls are answered it may not take their slots back beyond 4...
  greedy.Answer(0);
  const AdmissionControl::Admission held = greedy.Try();
  EXPECT_FALSE(held.admitted);
  EXPECT_EQ(held.refusal, RefusalReason::kFairShare);
  EXPECT_EQ(held.share.in_flight, 7);
  EXPECT_EQ(held.share.clients, 2u);
  // ...so the polite client's next call is admitted.
  EXPECT_TRUE(polite.Admit());
  for (int i = 0; i < 4; ++i) greedy.Answer(1);
  EXPECT_EQ(admission.in_flight(), 4);  // Greedy 3, polite 1.
  EXPECT_TRUE(greedy.Admit());          // Below its share again.
  EXPECT_EQ(admission.refused(RefusalReason::kFairShare), 1u);
  EXPECT_EQ(admission.refused(RefusalReason::kInFlightLimit), 1u);
}

// A client that stopped calling stops counting after kRecentClientWindow: the one left has the
// whole bound again.
TEST(AdmissionControlTest, AClientThatStoppedCallingNoLongerHoldsAShare) {
  const Clock::time_point start{};
  AdmissionControl admission(4, 1, start);
  Caller stays(admission, "stays", start);
  Caller leaves(admission, "leaves", start);
  ASSERT_TRUE(leaves.Admit());
  leaves.Answer(0);
  ASSERT_TRUE(stays.Admit());
  ASSERT_TRUE(stays.Admit());
  EXPECT_FALSE(stays.Admit());  // Its share of 2 while "leaves" is recent.
  const Clock::time_point later = start + kRecentClientWindow + milliseconds(1);
  stays.set_now(later);
  EXPECT_TRUE(stays.Admit());
  EXPECT_TRUE(stays.Admit());
  EXPECT_FALSE(stays.Admit());  // The bound itself.
  EXPECT_EQ(admission.shares().clients(), 1u);
}

TEST(AdmissionControlTest, FairSharePushbackIsTheClientsCallsAtItsShareOfTheRate) {
  const Clock::time_point start{};
  AdmissionControl admission(100, 1, start);
  Caller caller(admission, "c", start);
  for (int i = 0; i < 1000; ++i) {  // 10,000 answered per second over the first 100 ms.
    ASSERT_TRUE(caller.Admit());
    caller.Answer(0);
  }
  // 50 calls in flight at a fourth of 10,000/s (four clients): 20 ms.
  EXPECT_EQ(admission.PushbackAfterFairShare({.in_flight = 50, .clients = 4, .share = 25},
                                             start + milliseconds(100)),
            milliseconds(20));
}

TEST(ClientSharesTest, TheShareIsTheBoundDividedAmongTheClientsRoundedUp) {
  ClientShares shares(10, Clock::time_point{});
  EXPECT_EQ(shares.share(), 10);
  std::vector<ClientShares::Slot> held;
  for (const char* client : {"a", "b", "c"}) {
    held.push_back(shares.TryTake(client, Clock::time_point{}));
    ASSERT_NE(held.back(), nullptr);
  }
  EXPECT_EQ(shares.clients(), 3u);
  EXPECT_EQ(shares.share(), 4);  // ceil(10 / 3)
  for (int i = 0; i < 3; ++i) ASSERT_NE(shares.TryTake("a", Clock::time_point{}), nullptr);
  ClientShares::Refusal refusal;
  EXPECT_EQ(shares.TryTake("a", Clock::time_point{}, &refusal), nullptr);
  EXPECT_EQ(refusal.in_flight, 4);
  EXPECT_EQ(refusal.clients, 3u);
}

// Beyond kMaxTrackedClients the new clients share one entry: memory stays bounded, and a flood
// of addresses is held, all together, to one share.
TEST(ClientSharesTest, ClientsBeyondTheTrackedMostShareOneEntry) {
  const int64_t bound = static_cast<int64_t>(kMaxTrackedClients) * 4;
  ClientShares shares(bound, Clock::time_point{});
  for (size_t i = 0; i < kMaxTrackedClients; ++i) {
    ASSERT_NE(shares.TryTake(std::to_string(i), Clock::time_point{}), nullptr);
  }
  EXPECT_EQ(shares.clients(), kMaxTrackedClients);
  EXPECT_EQ(shares.share(), 4);
  const ClientShares::Slot first = shares.TryTake("beyond-1", Clock::time_point{});
  const ClientShares::Slot second = shares.TryTake("beyond-2", Clock::time_point{});
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first, second);  // One entry for both.
  EXPECT_EQ(shares.clients(), kMaxTrackedClients);
  ASSERT_NE(shares.TryTake("beyond-3", Clock::time_point{}), nullptr);
  ASSERT_NE(shares.TryTake("beyond-4", Clock::time_point{}), nullptr);
  EXPECT_EQ(shares.TryTake("beyond-5", Clock::time_point{}), nullptr);  // Their one share of 4.
}

}  // namespace
}  // namespace ledger
