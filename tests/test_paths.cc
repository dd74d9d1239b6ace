#include "tests/test_paths.h"

namespace ledger::testing_util {

std::string SourceDir() { return LEDGER_TEST_SOURCE_DIR; }
std::string LedgerdPath() { return LEDGER_TEST_LEDGERD; }
std::string LedgerctlPath() { return LEDGER_TEST_LEDGERCTL; }
std::string LoadtestPath() { return LEDGER_TEST_LOADTEST; }
std::string DelayProxyPath() { return LEDGER_TEST_DELAY_PROXY; }
std::string ClockShiftLibraryPath() { return LEDGER_TEST_CLOCK_SHIFT; }
std::string PrometheusPath() { return LEDGER_TEST_PROMETHEUS; }
std::string PromtoolPath() { return LEDGER_TEST_PROMTOOL; }

}  // namespace ledger::testing_util
