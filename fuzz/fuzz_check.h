// Defines `FUZZ_CHECK(condition)`, the property check of the fuzz targets: on violation it says
// which property broke and traps, which libFuzzer reports as a crash and saves the input for.
#ifndef LEDGER_FUZZ_FUZZ_CHECK_H_
#define LEDGER_FUZZ_FUZZ_CHECK_H_

#include <cstdio>

#define FUZZ_CHECK(condition)                                                            \
  do {                                                                                   \
    if (!(condition)) [[unlikely]] {                                                     \
      std::fprintf(stderr, "fuzz: property violated at %s:%d: %s\n", __FILE__, __LINE__, \
                   #condition);                                                          \
      __builtin_trap();                                                                  \
    }                                                                                    \
  } while (false)

#endif  // LEDGER_FUZZ_FUZZ_CHECK_H_
