// Test helper: waits for an observable event (a counter, a metric, a status) with a bounded
// deadline, instead of sleeping and hoping. A wait that times out fails the test and says what
// it was waiting for, so a broken behaviour is a clear failure, not a hang or a silent pass.
#ifndef LEDGER_TESTS_WAIT_UNTIL_H_
#define LEDGER_TESTS_WAIT_UNTIL_H_

#include <chrono>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace ledger::testing_util {

// Generous, because the tests share two cores with other builds and may run under ASan; only a
// broken behaviour ever waits this long.
inline constexpr std::chrono::seconds kEventTimeout{30};

// Success as soon as `condition()` is true (checked every `interval`: raise it when a check
// costs something, such as an RPC); failure naming `what` once `timeout` has passed without it.
// Use as ASSERT_TRUE(WaitUntil(...)).
template <typename Condition>
::testing::AssertionResult WaitUntil(
    Condition condition, const std::string& what, std::chrono::milliseconds timeout = kEventTimeout,
    std::chrono::milliseconds interval = std::chrono::milliseconds(1)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return ::testing::AssertionFailure()
             << "timed out after " << timeout.count() << " ms waiting until " << what;
    }
    std::this_thread::sleep_for(interval);
  }
  return ::testing::AssertionSuccess();
}

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_WAIT_UNTIL_H_
