// AdaptiveThrottle: SRE's client-side throttling formula, with time and randomness passed in.
#include "client/adaptive_throttle.h"

#include <chrono>

#include "gtest/gtest.h"

namespace ledger {
namespace {

using std::chrono::seconds;
using Clock = AdaptiveThrottle::Clock;

TEST(AdaptiveThrottleTest, SendsEverythingWhileTheServerAcceptsEverything) {
  AdaptiveThrottle throttle(/*k=*/1.1);
  const Clock::time_point now{seconds(100)};
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(throttle.ShouldSend(now, 0.0));  // Even the unluckiest draw is sent.
    throttle.CountAnswer(now, /*accepted=*/true);
  }
  EXPECT_EQ(throttle.RejectProbability(now), 0);
}

// Calls in flight are not requests yet: a burst sent before any answer arrives is not throttled,
// even with k near 1 (counted at sending, 100 unanswered calls would refuse the next ~99%).
TEST(AdaptiveThrottleTest, CallsInFlightDoNotCountUntilAnswered) {
  AdaptiveThrottle throttle(1.1);
  const Clock::time_point now{seconds(100)};
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(throttle.ShouldSend(now, 0.0)) << i;
}

TEST(AdaptiveThrottleTest, RejectsTheShareAboveKTimesTheAccepted) {
  AdaptiveThrottle throttle(/*k=*/2);
  const Clock::time_point now{seconds(100)};
  // 1,000 answers, 100 accepted: the server can take 200 (k = 2), so 800 of 1,001 should be
  // refused locally.
  for (int i = 0; i < 1000; ++i) throttle.CountAnswer(now, /*accepted=*/i < 100);
  EXPECT_DOUBLE_EQ(throttle.RejectProbability(now), 800.0 / 1001.0);
  EXPECT_FALSE(throttle.ShouldSend(now, 0.5));  // 0.5 < 0.8: refused...
  // ... and counted as a request not accepted.
  EXPECT_DOUBLE_EQ(throttle.RejectProbability(now), 801.0 / 1002.0);
  EXPECT_TRUE(throttle.ShouldSend(now, 0.9));  // 0.9 >= 0.8: sent, not counted until answered.
  EXPECT_DOUBLE_EQ(throttle.RejectProbability(now), 801.0 / 1002.0);
}

TEST(AdaptiveThrottleTest, ASmallerKThrottlesHarder) {
  AdaptiveThrottle gentle(2);
  AdaptiveThrottle hard(1.1);
  const Clock::time_point now{seconds(100)};
  for (int i = 0; i < 1000; ++i) {
    gentle.CountAnswer(now, i % 2 == 0);
    hard.CountAnswer(now, i % 2 == 0);
  }
  EXPECT_EQ(gentle.RejectProbability(now), 0);  // 1,000 <= 2 x 500.
  EXPECT_DOUBLE_EQ(hard.RejectProbability(now), (1000 - 1.1 * 500) / 1001);
}

TEST(AdaptiveThrottleTest, ForgetsWhatIsOlderThanTheWindow) {
  AdaptiveThrottle throttle(2, seconds(10), 10);
  const Clock::time_point start{seconds(100)};
  for (int i = 0; i < 1000; ++i) throttle.CountAnswer(start, /*accepted=*/false);
  EXPECT_GT(throttle.RejectProbability(start), 0.99);
  EXPECT_GT(throttle.RejectProbability(start + seconds(9)), 0.99);  // Still in the window.
  EXPECT_EQ(throttle.RejectProbability(start + seconds(10)), 0);    // Slid out of it.
  EXPECT_TRUE(throttle.ShouldSend(start + seconds(10), 0.0));
}

TEST(AdaptiveThrottleTest, KZeroTurnsItOff) {
  AdaptiveThrottle off(0);
  const Clock::time_point now{seconds(100)};
  for (int i = 0; i < 100; ++i) off.CountAnswer(now, false);
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(off.ShouldSend(now, 0.0));
  EXPECT_FALSE(off.enabled());
  EXPECT_EQ(off.RejectProbability(now), 0);
}

}  // namespace
}  // namespace ledger
