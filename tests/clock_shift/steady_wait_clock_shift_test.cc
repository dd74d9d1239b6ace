// base/steady_wait.h's waits keep their length when the wall clock moves an hour either way;
// Abseil's (20220623, Debian 12's) do not, which is why ledgerd does not use them. The test
// process moves its own wall clock: main starts it again with the clock-shift library preloaded
// (tests/clock_shift/clock_shift.cc) and a shift file it then writes.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/steady_wait.h"
#include "gtest/gtest.h"
#include "tests/clock_shift/clock_shift_file.h"

extern char** environ;

namespace ledger {
namespace {

using testing_util::ClockShiftFile;

ClockShiftFile* shift_file = nullptr;  // Set by main, in the process under the library.

class ClockShiftTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NE(shift_file, nullptr); }
  void TearDown() override { shift_file->Set(absl::ZeroDuration()); }
};

absl::Duration WallClockReading() {
  return absl::FromChrono(std::chrono::system_clock::now().time_since_epoch());
}

TEST_F(ClockShiftTest, TheShiftMovesTheWallClockAndNotTheMonotonicOne) {
  const absl::Duration wall_before = WallClockReading();
  const SteadyTime steady_before = SteadyNow();
  shift_file->Set(absl::Hours(1));
  const absl::Duration wall_moved = WallClockReading() - wall_before;
  EXPECT_GE(wall_moved, absl::Hours(1));
  EXPECT_LT(wall_moved, absl::Hours(1) + absl::Seconds(10));
  EXPECT_LT(SteadySince(steady_before), absl::Seconds(10));
  shift_file->Set(-absl::Hours(1));
  EXPECT_LT(WallClockReading() - wall_before, -absl::Hours(1) + absl::Seconds(10));
}

// Each wait of 300 ms, started after the clock moved, takes 300 ms (and a little more on a busy
// machine), not an hour more or nothing.
void ExpectSteadyWaitsOfTheirLength() {
  constexpr absl::Duration kTimeout = absl::Milliseconds(300);
  SteadyNotification notification;
  SteadyTime start = SteadyNow();
  EXPECT_FALSE(notification.WaitForNotificationWithTimeout(kTimeout));
  EXPECT_GE(SteadySince(start), kTimeout);
  EXPECT_LT(SteadySince(start), absl::Seconds(20));

  absl::Mutex mu;
  SteadyCondVar changed;
  absl::MutexLock lock(&mu);
  start = SteadyNow();
  EXPECT_FALSE(changed.WaitFor(mu, kTimeout, [] { return false; }));
  EXPECT_GE(SteadySince(start), kTimeout);
  EXPECT_LT(SteadySince(start), absl::Seconds(20));

  const SteadyDeadline deadline(kTimeout);
  EXPECT_GT(deadline.Left(), absl::Milliseconds(200));
}

TEST_F(ClockShiftTest, SteadyWaitsKeepTheirLengthWithTheWallClockAnHourAhead) {
  shift_file->Set(absl::Hours(1));
  ExpectSteadyWaitsOfTheirLength();
}

TEST_F(ClockShiftTest, SteadyWaitsKeepTheirLengthWithTheWallClockAnHourBehind) {
  shift_file->Set(-absl::Hours(1));
  ExpectSteadyWaitsOfTheirLength();
}

// Why: Abseil's timed wait hands the kernel a deadline on the wall clock. With this process's
// clock an hour behind the kernel's, a 30 s wait is over before it starts, as every wait in
// progress is stretched by an hour when a machine's clock is set back. (Abseil's absl::Now()
// reads the clock again at most every 2 s or so, hence the pause.) Should Debian's Abseil move
// to the monotonic clock, this fails, and base/steady_wait.h can go.
TEST_F(ClockShiftTest, AbseilsTimedWaitsFollowTheWallClock) {
  shift_file->Set(-absl::Hours(1));
  std::this_thread::sleep_for(std::chrono::seconds(3));
  ASSERT_LT(absl::Now() - absl::FromChrono(std::chrono::system_clock::now()), absl::Seconds(5));
  absl::Notification never;
  const SteadyTime start = SteadyNow();
  EXPECT_FALSE(never.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_LT(SteadySince(start), absl::Seconds(10));
}

}  // namespace
}  // namespace ledger

// Under the library: runs the tests. Otherwise: starts this program again under it, with a new
// shift file, and returns what it returns.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (const char* path = std::getenv("LEDGER_CLOCK_SHIFT_FILE"); path != nullptr) {
    ledger::testing_util::ClockShiftFile file(path);
    ledger::shift_file = &file;
    const int result = RUN_ALL_TESTS();
    unlink(path);  // Made for this run by the first start (below).
    return result;
  }
  const std::string path =
      (std::filesystem::temp_directory_path() / ("ledger_clock_shift." + std::to_string(getpid())))
          .string();
  std::vector<std::string> variables = ledger::testing_util::ClockShiftFile(path).Environment();
  for (char** each = environ; *each != nullptr; ++each) variables.emplace_back(*each);
  std::vector<char*> envp;
  for (std::string& variable : variables) envp.push_back(variable.data());
  envp.push_back(nullptr);
  std::vector<char*> args(argv, argv + argc);
  args.push_back(nullptr);
  execve("/proc/self/exe", args.data(), envp.data());
  perror("steady_wait_clock_shift_test: cannot start itself again under the library");
  return 2;
}
