// A library preloaded into one ledgerd (LD_PRELOAD) that moves that process's wall clock, and
// nothing else's, by an offset the test changes while the process runs: the "clock jump on one
// node" of the fault suite. A real jump (an NTP step, a VM resumed, `date -s`) moves the
// machine's clock for every process; on one machine, three replicas need a clock each.
//
// libfaketime does the same for most programs, but a ledgerd on jemalloc never starts under it:
// libfaketime resolves the real clock_gettime with dlsym, dlsym allocates, and jemalloc's first
// allocation reads the clock ("Unexpected recursive calls to clock_gettime()"). Here, the real
// function is read while nothing else is resolving it, and a call made meanwhile goes to the
// kernel directly.
//
// CLOCK_REALTIME, CLOCK_REALTIME_COARSE and CLOCK_TAI (and gettimeofday and time, which read
// them) gain the offset in the file that LEDGER_CLOCK_SHIFT_FILE names: 8 bytes, a signed count
// of nanoseconds in host byte order, mapped shared so that the test's write is seen by the next
// call. The monotonic clocks do not move, as they do not when a machine's wall clock is set. What
// the kernel does with an absolute wall-clock deadline it was given (a futex wait, a timer) is
// not shifted: it compares with the true clock, so a process shifted forward by D sees such a
// wait last D longer, as a real process does when its clock is set back by D.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace {

using ClockGettimeFunction = int (*)(clockid_t, struct timespec*);

std::atomic<ClockGettimeFunction> real_clock_gettime{nullptr};
std::atomic<bool> resolving{false};

const int64_t kNoShift = 0;
std::atomic<const volatile int64_t*> shift{nullptr};
std::atomic<bool> mapping{false};

void Die(const char* message) {
  const char kPrefix[] = "clock_shift: ";
  (void)!write(STDERR_FILENO, kPrefix, sizeof(kPrefix) - 1);
  (void)!write(STDERR_FILENO, message, strlen(message));
  abort();
}

int RealClockGettime(clockid_t clock, struct timespec* time) {
  ClockGettimeFunction real = real_clock_gettime.load(std::memory_order_acquire);
  if (real == nullptr && !resolving.exchange(true)) {
    real = reinterpret_cast<ClockGettimeFunction>(dlsym(RTLD_NEXT, "clock_gettime"));
    real_clock_gettime.store(real, std::memory_order_release);
  }
  if (real != nullptr) return real(clock, time);
  // Resolving (dlsym may allocate, and the allocator reads the clock), or not found.
  return static_cast<int>(syscall(SYS_clock_gettime, clock, time));
}

// The offset now: none until the file is mapped (the first call maps it; a call from another
// thread while it does sees none, which only the first microseconds of a process can meet).
int64_t Shift() {
  const volatile int64_t* mapped = shift.load(std::memory_order_acquire);
  if (mapped == nullptr) {
    if (mapping.exchange(true)) return 0;
    mapped = &kNoShift;
    if (const char* path = getenv("LEDGER_CLOCK_SHIFT_FILE"); path != nullptr && *path != '\0') {
      const int fd = open(path, O_RDONLY | O_CLOEXEC);
      if (fd < 0) Die("cannot open LEDGER_CLOCK_SHIFT_FILE\n");
      void* view = mmap(nullptr, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
      close(fd);
      if (view == MAP_FAILED) Die("cannot map LEDGER_CLOCK_SHIFT_FILE (8 bytes needed)\n");
      mapped = static_cast<const volatile int64_t*>(view);
    }
    shift.store(mapped, std::memory_order_release);
  }
  return *mapped;
}

bool IsWallClock(clockid_t clock) {
  return clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE || clock == CLOCK_TAI;
}

void AddNanoseconds(struct timespec* time, int64_t nanoseconds) {
  constexpr int64_t kPerSecond = 1'000'000'000;
  int64_t seconds = nanoseconds / kPerSecond;
  int64_t rest = time->tv_nsec + nanoseconds % kPerSecond;
  if (rest < 0) {
    rest += kPerSecond;
    --seconds;
  } else if (rest >= kPerSecond) {
    rest -= kPerSecond;
    ++seconds;
  }
  time->tv_sec += seconds;
  time->tv_nsec = rest;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int clock_gettime(clockid_t clock,
                                                         struct timespec* time) noexcept {
  const int result = RealClockGettime(clock, time);
  if (result == 0 && IsWallClock(clock)) AddNanoseconds(time, Shift());
  return result;
}

__attribute__((visibility("default"))) int gettimeofday(struct timeval* time, void* zone) noexcept {
  struct timespec now;
  if (clock_gettime(CLOCK_REALTIME, &now) != 0) return -1;
  time->tv_sec = now.tv_sec;  // Never null: glibc declares it nonnull.
  time->tv_usec = now.tv_nsec / 1000;
  if (zone != nullptr) memset(zone, 0, sizeof(struct timezone));
  return 0;
}

__attribute__((visibility("default"))) time_t time(time_t* result) noexcept {
  struct timespec now;
  if (clock_gettime(CLOCK_REALTIME, &now) != 0) return static_cast<time_t>(-1);
  if (result != nullptr) *result = now.tv_sec;
  return now.tv_sec;
}

}  // extern "C"
