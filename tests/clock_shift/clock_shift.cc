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
// call. The monotonic clocks do not move, as they do not when a machine's wall clock is set.
//
// An absolute wall-clock deadline the process gives the kernel is computed on the shifted clock,
// and the kernel compares it with the true one: unmended, every such wait of a process shifted
// forward by D would last D longer, for as long as the shift holds (a real clock step stretches
// only the waits begun before it). Abseil's timed waits are such waits (absl::Mutex, CondVar,
// Notification: futex FUTEX_WAIT_BITSET | FUTEX_CLOCK_REALTIME until an absolute time), and
// gRPC's own run on them: its timers, alarms and server shutdown stalled for the whole shift
// (session 14: the GOAWAYs of a drain waited out their 1 s timeout, and reads on a leader stalled
// for seconds). So syscall(), which they call, is taken over too, and such a deadline is moved
// back by the shift before the kernel sees it. glibc's own timed waits (pthread_cond_timedwait,
// sem_timedwait) make the system call inline and are not mended; ledgerd waits on the monotonic
// clock (scripts/check-clocks.py).
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdarg.h>
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

// The system call itself (x86-64 Linux), for syscall() below, which replaces libc's: the
// kernel's result, or -1 with errno set, as libc's syscall() returns.
long RawSyscall(long number, long a1, long a2, long a3, long a4, long a5, long a6) {
#if defined(__x86_64__)
  long result;
  register long r10 __asm__("r10") = a4;
  register long r8 __asm__("r8") = a5;
  register long r9 __asm__("r9") = a6;
  __asm__ volatile("syscall"
                   : "=a"(result)
                   : "a"(number), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  if (result < 0 && result > -4096) {
    errno = static_cast<int>(-result);
    return -1;
  }
  return result;
#else
#error "clock_shift's syscall() is written for x86-64 Linux"
#endif
}

}  // namespace

extern "C" {

// libc's syscall(), but an absolute wall-clock futex deadline is moved back by the shift (see the
// file comment). Every argument register is passed on, as libc's does: extra ones are ignored.
__attribute__((visibility("default"))) long syscall(long number, ...) noexcept {
  va_list list;
  va_start(list, number);
  long args[6];
  for (long& arg : args) arg = va_arg(list, long);
  va_end(list);
  struct timespec moved;
  if (number == SYS_futex && args[3] != 0) {
    const int op = static_cast<int>(args[1]);
    if ((op & FUTEX_CLOCK_REALTIME) != 0 && (op & FUTEX_CMD_MASK) == FUTEX_WAIT_BITSET) {
      // The system call's argument is the caller's pointer, passed as a register's integer.
      moved =
          *reinterpret_cast<const struct timespec*>(args[3]);  // NOLINT(performance-no-int-to-ptr)
      AddNanoseconds(&moved, -Shift());
      args[3] = reinterpret_cast<long>(&moved);
    }
  }
  return RawSyscall(number, args[0], args[1], args[2], args[3], args[4], args[5]);
}

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
