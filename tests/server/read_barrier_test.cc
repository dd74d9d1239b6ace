// ReadBarrier (server/read_barrier.h): a read continues only after a barrier proposed after it
// arrived; one barrier serves every read waiting when it is proposed; a failed barrier refuses
// its reads; a stop answers what still waits.
#include "server/read_barrier.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using testing_util::WaitUntil;

// A `confirm` the test releases one barrier at a time, recording when each was proposed.
class HeldBarriers {
 public:
  absl::Status Confirm() {
    absl::MutexLock lock(&mu_);
    ++proposed_;
    const int mine = proposed_;
    const auto released = [this, mine]()
                              ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return released_ >= mine; };
    mu_.Await(absl::Condition(&released));
    return fail_ ? absl::UnavailableError("leadership lost") : absl::OkStatus();
  }
  void Release(bool fail = false) {
    absl::MutexLock lock(&mu_);
    fail_ = fail;
    ++released_;
  }
  int proposed() {
    absl::MutexLock lock(&mu_);
    return proposed_;
  }

 private:
  absl::Mutex mu_;
  int proposed_ ABSL_GUARDED_BY(mu_) = 0;
  int released_ ABSL_GUARDED_BY(mu_) = 0;
  bool fail_ ABSL_GUARDED_BY(mu_) = false;
};

TEST(ReadBarrierTest, AReadWaitsForABarrierProposedAfterItAndOneBarrierServesAllWaiting) {
  HeldBarriers held;
  ReadBarrier barrier([&held] { return held.Confirm(); });
  std::atomic<int> served{0};
  std::vector<absl::Status> results(5);
  barrier.After([&](const absl::Status& s) {
    results[0] = s;
    ++served;
  });
  ASSERT_TRUE(WaitUntil([&] { return held.proposed() == 1; }, "the first barrier is proposed"));
  // Four reads arrive while the first barrier is in flight: it cannot serve them.
  for (int i = 1; i < 5; ++i) {
    barrier.After([&, i](const absl::Status& s) {
      results[i] = s;
      ++served;
    });
  }
  held.Release();
  ASSERT_TRUE(WaitUntil([&] { return served.load() == 1; }, "the first read is served"));
  EXPECT_TRUE(results[0].ok());
  ASSERT_TRUE(WaitUntil([&] { return held.proposed() == 2; }, "a second barrier is proposed"));
  EXPECT_EQ(served.load(), 1);  // The four wait for it.
  held.Release();
  ASSERT_TRUE(WaitUntil([&] { return served.load() == 5; }, "the four are served"));
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok());
  EXPECT_EQ(held.proposed(), 2);  // One barrier for the four.
  EXPECT_EQ(barrier.barriers(), 2u);
}

TEST(ReadBarrierTest, AFailedBarrierRefusesItsReadsAndTheNextOneServesAgain) {
  HeldBarriers held;
  ReadBarrier barrier([&held] { return held.Confirm(); });
  absl::Notification first;
  absl::Status refused;
  barrier.After([&](const absl::Status& s) {
    refused = s;
    first.Notify();
  });
  held.Release(/*fail=*/true);
  first.WaitForNotification();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(barrier.failures(), 1u);
  absl::Notification second;
  absl::Status served = absl::UnknownError("not run");
  barrier.After([&](const absl::Status& s) {
    served = s;
    second.Notify();
  });
  held.Release();
  second.WaitForNotification();
  EXPECT_TRUE(served.ok());
}

TEST(ReadBarrierTest, AStopAnswersEveryWaitingReadUnavailable) {
  std::atomic<int> unavailable{0};
  {
    HeldBarriers held;
    ReadBarrier barrier([&held] { return held.Confirm(); });
    for (int i = 0; i < 3; ++i) {
      barrier.After([&](const absl::Status& s) {
        if (absl::IsUnavailable(s)) ++unavailable;
      });
    }
    ASSERT_TRUE(WaitUntil([&] { return held.proposed() == 1; }, "a barrier is proposed"));
    barrier.After([&](const absl::Status& s) {
      if (absl::IsUnavailable(s)) ++unavailable;
    });
    held.Release(/*fail=*/true);  // The first three: refused by the failed barrier.
    // The fourth: refused by the stop, or by a second barrier if one is proposed first.
    held.Release(/*fail=*/true);
  }
  EXPECT_EQ(unavailable.load(), 4);
}

}  // namespace
}  // namespace ledger
