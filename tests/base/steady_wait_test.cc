// base/steady_wait.h: what each wait returns, when it wakes, and how long it waits. The same
// waits with the process's wall clock moved an hour either way are in
// tests/clock_shift/steady_wait_clock_shift_test.cc.
#include "base/steady_wait.h"

#include <chrono>
#include <thread>

#include "absl/time/time.h"
#include "base/annotated_mutex.h"
#include "gtest/gtest.h"

namespace ledger {
namespace {

TEST(SteadyNotificationTest, ATimedWaitWithoutANotifyReturnsFalseAfterItsTimeout) {
  SteadyNotification notification;
  const SteadyTime start = SteadyNow();
  EXPECT_FALSE(notification.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  EXPECT_GE(SteadySince(start), absl::Milliseconds(50));
  EXPECT_FALSE(notification.HasBeenNotified());
}

TEST(SteadyNotificationTest, ANotifyFromAnotherThreadEndsTheWaitAtOnce) {
  SteadyNotification notification;
  std::thread notifier([&notification] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    notification.Notify();
  });
  const SteadyTime start = SteadyNow();
  EXPECT_TRUE(notification.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_LT(SteadySince(start), absl::Seconds(10));
  notifier.join();
  EXPECT_TRUE(notification.HasBeenNotified());
}

TEST(SteadyNotificationTest, OnceNotifiedEveryWaitReturnsTrueAndASecondNotifyDoesNothing) {
  SteadyNotification notification;
  notification.Notify();
  notification.Notify();
  EXPECT_TRUE(notification.HasBeenNotified());
  EXPECT_TRUE(notification.WaitForNotificationWithTimeout(absl::ZeroDuration()));
  EXPECT_TRUE(notification.WaitForNotificationWithTimeout(absl::InfiniteDuration()));
  notification.WaitForNotification();
}

TEST(SteadyNotificationTest, ANegativeTimeoutDoesNotWaitAndAnInfiniteOneWaitsForTheNotify) {
  SteadyNotification notification;
  const SteadyTime start = SteadyNow();
  EXPECT_FALSE(notification.WaitForNotificationWithTimeout(-absl::Seconds(5)));
  EXPECT_LT(SteadySince(start), absl::Seconds(1));
  std::thread notifier([&notification] { notification.Notify(); });
  EXPECT_TRUE(notification.WaitForNotificationWithTimeout(absl::InfiniteDuration()));
  notifier.join();
}

TEST(SteadyCondVarTest, AWaitEndsWhenThePredicateHoldsAfterANotify) {
  Mutex mu;  // base's: ThreadSanitizer sees it (Debian's Abseil is not instrumented).
  SteadyCondVar changed;
  int value = 0;
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    {
      MutexLock lock(&mu);
      value = 7;
    }
    changed.NotifyAll();
  });
  {
    MutexLock lock(&mu);
    EXPECT_TRUE(changed.WaitFor(mu, absl::Seconds(30), [&] { return value == 7; }));
    EXPECT_EQ(value, 7);
  }
  setter.join();
}

TEST(SteadyCondVarTest, AWaitWhosePredicateNeverHoldsReturnsFalseAfterItsTimeout) {
  Mutex mu;
  SteadyCondVar changed;
  MutexLock lock(&mu);
  const SteadyTime start = SteadyNow();
  int looks = 0;
  EXPECT_FALSE(changed.WaitFor(mu, absl::Milliseconds(50), [&] {
    ++looks;
    return false;
  }));
  EXPECT_GE(SteadySince(start), absl::Milliseconds(50));
  EXPECT_GE(looks, 2);  // Before waiting, and once more at the timeout.
}

TEST(SteadyCondVarTest, TheMutexIsFreeWhileItWaits) {
  Mutex mu;
  SteadyCondVar changed;
  bool done = false;
  std::thread other;
  {
    MutexLock lock(&mu);
    other = std::thread([&] {
      MutexLock other_lock(&mu);  // Taken only once the waiter releases it.
      done = true;
      changed.NotifyAll();
    });
    EXPECT_TRUE(changed.WaitFor(mu, absl::Seconds(30), [&] { return done; }));
  }
  other.join();
}

TEST(SteadyDeadlineTest, WhatIsLeftShrinksToZeroAndThenItHasPassed) {
  const SteadyDeadline deadline(absl::Milliseconds(40));
  EXPECT_FALSE(deadline.Passed());
  EXPECT_LE(deadline.Left(), absl::Milliseconds(40));
  EXPECT_GT(deadline.Left(), absl::ZeroDuration());
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_TRUE(deadline.Passed());
  EXPECT_EQ(deadline.Left(), absl::ZeroDuration());
  EXPECT_FALSE(SteadyDeadline(absl::InfiniteDuration()).Passed());
  EXPECT_TRUE(SteadyDeadline(-absl::Seconds(1)).Passed());
}

TEST(SteadyTimeoutTest, ClampsToZeroAndACentury) {
  EXPECT_EQ(SteadyTimeout(-absl::Seconds(3)), std::chrono::nanoseconds(0));
  EXPECT_EQ(SteadyTimeout(absl::Milliseconds(5)), std::chrono::milliseconds(5));
  EXPECT_EQ(
      SteadyTimeout(absl::InfiniteDuration()),
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::hours(24 * 365 * 100)));
}

}  // namespace
}  // namespace ledger
