// AdmissionControl: the server-wide bound on calls in flight, the refusal counts, and the
// pushback told to refused clients. Deterministic: time is passed in, never read.
#include "shard/admission_control.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ledger {
namespace {

using std::chrono::milliseconds;
using Clock = AdmissionControl::Clock;

TEST(AdmissionControlTest, AdmitsUpToTheLimitThenRefusesAndCountsTheRefusal) {
  AdmissionControl admission(/*max_in_flight=*/3, /*num_shards=*/2, Clock::time_point{});
  EXPECT_TRUE(admission.TryAdmit());
  EXPECT_TRUE(admission.TryAdmit());
  EXPECT_TRUE(admission.TryAdmit());
  EXPECT_FALSE(admission.TryAdmit());
  EXPECT_FALSE(admission.TryAdmit());
  EXPECT_EQ(admission.in_flight(), 3);  // A refused call never counts in flight.
  EXPECT_EQ(admission.admitted(), 3u);
  EXPECT_EQ(admission.refused(RefusalReason::kInFlightLimit), 2u);
  EXPECT_EQ(admission.refused(RefusalReason::kMailboxFull), 0u);
}

TEST(AdmissionControlTest, TheLimitFreesAsCallsAreAnswered) {
  AdmissionControl admission(2, 2, Clock::time_point{});
  ASSERT_TRUE(admission.TryAdmit());
  ASSERT_TRUE(admission.TryAdmit());
  ASSERT_FALSE(admission.TryAdmit());
  admission.Answered(/*shard=*/0);
  EXPECT_EQ(admission.in_flight(), 1);
  EXPECT_TRUE(admission.TryAdmit());
  EXPECT_FALSE(admission.TryAdmit());
  admission.Answered(1);
  admission.Answered(-1);  // Answered by no shard (History, bad input): frees the same.
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
  // Shard 0 answers 1,000 calls and shard 1 answers 100 in the first 100 ms.
  for (int i = 0; i < 1100; ++i) {
    ASSERT_TRUE(admission.TryAdmit());
    admission.Answered(i < 1000 ? 0 : 1);
  }
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(admission.TryAdmit());
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
      for (int i = 0; i < kAttemptsPerThread; ++i) {
        if (!admission.TryAdmit()) continue;
        admitted.fetch_add(1);
        const int64_t now_held = held.fetch_add(1) + 1;
        int64_t seen = most_held.load();
        while (now_held > seen && !most_held.compare_exchange_weak(seen, now_held)) {
        }
        held.fetch_sub(1);
        admission.Answered(t % 2);
        if (i % 64 == 0) admission.PushbackAfterInFlightLimit(Clock::now());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_LE(most_held.load(), kLimit);
  EXPECT_GT(most_held.load(), 0);
  EXPECT_EQ(admission.in_flight(), 0);
  EXPECT_EQ(admission.admitted(), admitted.load());
  EXPECT_EQ(admission.admitted() + admission.refused(RefusalReason::kInFlightLimit),
            static_cast<uint64_t>(kThreads) * kAttemptsPerThread);
}

}  // namespace
}  // namespace ledger
