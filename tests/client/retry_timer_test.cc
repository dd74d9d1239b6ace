#include "client/retry_timer.h"

#include <chrono>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ledger {
namespace {

using Clock = RetryTimer::Clock;

TEST(RetryTimerTest, ATaskRunsNoEarlierThanItsDueTime) {
  RetryTimer timer;
  absl::Notification ran;
  Clock::time_point ran_at;
  const Clock::time_point due = Clock::now() + std::chrono::milliseconds(20);
  timer.Schedule(due, [&] {
    ran_at = Clock::now();
    ran.Notify();
  });
  ASSERT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_GE(ran_at, due);
}

TEST(RetryTimerTest, StopRunsTheWaitingTasksInOrderOfDueTime) {
  RetryTimer timer;
  absl::Mutex mu;
  std::vector<int> order;
  const Clock::time_point later = Clock::now() + std::chrono::hours(1);
  for (int i : {3, 1, 2}) {
    timer.Schedule(later + std::chrono::seconds(i), [&, i] {
      absl::MutexLock lock(&mu);
      order.push_back(i);
    });
  }
  timer.Schedule(later + std::chrono::seconds(1), [&] {  // Same time as 1: after it.
    absl::MutexLock lock(&mu);
    order.push_back(10);
  });
  EXPECT_EQ(timer.Waiting(), 4u);
  timer.Stop();
  EXPECT_THAT(order, ::testing::ElementsAre(1, 10, 2, 3));
  EXPECT_EQ(timer.Waiting(), 0u);
}

TEST(RetryTimerTest, ATaskMayScheduleAnother) {
  RetryTimer timer;
  absl::Notification second_ran;
  timer.Schedule(Clock::now(), [&] { timer.Schedule(Clock::now(), [&] { second_ran.Notify(); }); });
  EXPECT_TRUE(second_ran.WaitForNotificationWithTimeout(absl::Seconds(10)));
}

}  // namespace
}  // namespace ledger
