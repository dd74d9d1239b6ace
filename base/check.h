// Defines `LEDGER_CHECK(condition)`: an assertion for programmer errors that stays on in every
// build, NDEBUG or not. A ledger must never continue on a broken assumption, so a failed check
// writes where it failed to stderr and aborts. Never use it on input from outside the process.
//
// `LEDGER_CHECK_EQ/NE/LT/LE/GT/GE(a, b)` do the same for a comparison and also print both
// values, so that a broken money invariant says which balance or sequence it saw. Each operand is
// evaluated once; the values are formatted only on failure, so a passing check costs one compare.
#ifndef LEDGER_BASE_CHECK_H_
#define LEDGER_BASE_CHECK_H_

#include <cstdio>
#include <cstdlib>
#include <type_traits>

#define LEDGER_CHECK(condition)                                                        \
  do {                                                                                 \
    if (!(condition)) [[unlikely]] {                                                   \
      std::fprintf(stderr, "ledgerd: check failed at %s:%d: %s\n", __FILE__, __LINE__, \
                   #condition);                                                        \
      std::abort();                                                                    \
    }                                                                                  \
  } while (false)

namespace ledger::check_internal {

// Integers, enums and bools print as numbers; anything else as "?".
template <typename T>
void PrintValue(const T& value) {
  if constexpr (std::is_enum_v<T> || (std::is_integral_v<T> && std::is_signed_v<T>)) {
    std::fprintf(stderr, "%lld", static_cast<long long>(value));
  } else if constexpr (std::is_integral_v<T>) {
    std::fprintf(stderr, "%llu", static_cast<unsigned long long>(value));
  } else {
    std::fprintf(stderr, "?");
  }
}

template <typename A, typename B>
[[noreturn]] __attribute__((noinline, cold)) void FailComparison(const char* file, int line,
                                                                 const char* expression, const A& a,
                                                                 const B& b) {
  std::fprintf(stderr, "ledgerd: check failed at %s:%d: %s (", file, line, expression);
  PrintValue(a);
  std::fprintf(stderr, " vs ");
  PrintValue(b);
  std::fprintf(stderr, ")\n");
  std::abort();
}

}  // namespace ledger::check_internal

#define LEDGER_CHECK_OP_(a, op, b)                                                    \
  do {                                                                                \
    const auto& ledger_check_a_ = (a);                                                \
    const auto& ledger_check_b_ = (b);                                                \
    if (!(ledger_check_a_ op ledger_check_b_)) [[unlikely]] {                         \
      ::ledger::check_internal::FailComparison(__FILE__, __LINE__, #a " " #op " " #b, \
                                               ledger_check_a_, ledger_check_b_);     \
    }                                                                                 \
  } while (false)

#define LEDGER_CHECK_EQ(a, b) LEDGER_CHECK_OP_(a, ==, b)
#define LEDGER_CHECK_NE(a, b) LEDGER_CHECK_OP_(a, !=, b)
#define LEDGER_CHECK_LT(a, b) LEDGER_CHECK_OP_(a, <, b)
#define LEDGER_CHECK_LE(a, b) LEDGER_CHECK_OP_(a, <=, b)
#define LEDGER_CHECK_GT(a, b) LEDGER_CHECK_OP_(a, >, b)
#define LEDGER_CHECK_GE(a, b) LEDGER_CHECK_OP_(a, >=, b)

#endif  // LEDGER_BASE_CHECK_H_
