// Test helper: where the programs under test and the source tree are, for the tests that start
// ledgerd, ledgerctl, ledger-loadtest or Prometheus, or read a file of the repository.
//
// The paths are compiled into one small file (test_paths.cc) rather than into every test, so that
// the tests' own objects hold no absolute path and a second clone of the repository compiles them
// from ccache (docs/testing.md).
#ifndef LEDGER_TESTS_TEST_PATHS_H_
#define LEDGER_TESTS_TEST_PATHS_H_

#include <string>

namespace ledger::testing_util {

// The root of the source tree, without a trailing slash; files below it are SourceDir() + "/...".
std::string SourceDir();

// The binaries of this build tree.
std::string LedgerdPath();
std::string LedgerctlPath();
std::string LoadtestPath();
// The delay relay (tests/relay/delay_proxy.cc).
std::string DelayProxyPath();

// The library that moves a process's wall clock (tests/clock_shift/clock_shift.cc).
std::string ClockShiftLibraryPath();

// The tools the end-to-end tests run against (Debian's prometheus package).
std::string PrometheusPath();
std::string PromtoolPath();

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_TEST_PATHS_H_
