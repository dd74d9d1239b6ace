// What the libraft spike programs (raft_spike, shape_bench) share: dying with a message, the
// clocks, flushed output lines for their drivers, and flag values.
#ifndef LEDGER_BENCH_REPLICATION_SPIKE_UTIL_H_
#define LEDGER_BENCH_REPLICATION_SPIKE_UTIL_H_

#include <errno.h>  // program_invocation_short_name (GNU).
#include <time.h>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <system_error>

namespace spike {

// Exit status 2, "PROGRAM: message" on stderr.
[[noreturn]] inline void Die(const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, message.c_str());
  std::exit(2);
}

inline int64_t NowNs(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// Lines go to a file or a pipe the driver reads while we run, so flush each one.
template <typename... Args>
void Emit(const char* format, Args... args) {
  std::printf(format, args...);
  std::fflush(stdout);
}

// The whole of `text` as a number, or Die naming `flag`.
template <typename T>
T ParseNumber(std::string_view flag, std::string_view text) {
  T value{};
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    Die("bad value for " + std::string(flag) + ": " + std::string(text));
  }
  return value;
}

}  // namespace spike

#endif  // LEDGER_BENCH_REPLICATION_SPIKE_UTIL_H_
