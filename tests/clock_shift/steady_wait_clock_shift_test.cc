// base/steady_wait.h's waits keep their length when the wall clock moves an hour either way, and
// under the library so do Abseil's begun after the move (a real step also moves Abseil's waits in
// progress, which is why ledgerd does not use them). The test
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

// Abseil's timed wait hands the kernel an absolute deadline on the wall clock, computed on this
// process's clock; the library moves it back by the shift (clock_shift.cc), as a machine whose
// clock was set keeps its kernel's clock and the process's in step. Without that, every such
// wait begun after the shift lasted an hour more (ahead) or ended at once (behind), and gRPC's
// timers, which wait that way, stalled in a shifted replica for the whole test. (A real step still
// stretches or cuts short the waits in progress as it happens, which this library does not
// reproduce; ledgerd's own waits are on the monotonic clock for that reason.) Abseil's absl::Now()
// reads the clock again at most every 2 s or so, hence the pause.
void ExpectAbseilWaitsOfTheirLength(absl::Duration shift) {
  shift_file->Set(shift);
  std::this_thread::sleep_for(std::chrono::seconds(3));
  ASSERT_LT(absl::AbsDuration(absl::Now() - absl::FromChrono(std::chrono::system_clock::now())),
            absl::Seconds(5));
  constexpr absl::Duration kTimeout = absl::Milliseconds(300);
  absl::Notification never;
  const SteadyTime start = SteadyNow();
  EXPECT_FALSE(never.WaitForNotificationWithTimeout(kTimeout));
  EXPECT_GE(SteadySince(start), kTimeout);
  EXPECT_LT(SteadySince(start), absl::Seconds(20));
}

TEST_F(ClockShiftTest, AbseilsTimedWaitsKeepTheirLengthWithTheWallClockAnHourAhead) {
  ExpectAbseilWaitsOfTheirLength(absl::Hours(1));
}

TEST_F(ClockShiftTest, AbseilsTimedWaitsKeepTheirLengthWithTheWallClockAnHourBehind) {
  ExpectAbseilWaitsOfTheirLength(-absl::Hours(1));
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
