// Defines `LEDGER_CHECK(condition)`: an assertion for programmer errors that stays on in every
// build, NDEBUG or not. A ledger must never continue on a broken assumption, so a failed check
// writes where it failed to stderr and aborts. Never use it on input from outside the process.
#ifndef LEDGER_SHARD_CHECK_H_
#define LEDGER_SHARD_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define LEDGER_CHECK(condition)                                                        \
  do {                                                                                 \
    if (!(condition)) [[unlikely]] {                                                   \
      std::fprintf(stderr, "ledgerd: check failed at %s:%d: %s\n", __FILE__, __LINE__, \
                   #condition);                                                        \
      std::abort();                                                                    \
    }                                                                                  \
  } while (false)

#endif  // LEDGER_SHARD_CHECK_H_
