// Test helper for end-to-end tests: data directories made the way an operator makes them, by
// running `ledgerd init`. Needs testing_util::LedgerdPath(), which every e2e test target defines.
#ifndef LEDGER_TESTS_E2E_LEDGER_DIR_H_
#define LEDGER_TESTS_E2E_LEDGER_DIR_H_

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/e2e/subprocess.h"
#include "tests/scratch_dir.h"
#include "tests/test_paths.h"

namespace ledger::testing_util {

// Runs `ledgerd init --data_dir=DIR` (with --ledger_id when `ledger_id` is not empty: the
// replicas of a cluster share one); a failed init fails the test that called it.
inline void InitLedgerDir(const std::string& dir, const std::string& ledger_id = "") {
  // A 1 MiB first log segment: tests make many ledgers, some on tiny filesystems.
  std::vector<std::string> argv = {testing_util::LedgerdPath(), "init", "--data_dir=" + dir,
                                   "--log_segment_mib=1"};
  if (!ledger_id.empty()) argv.push_back("--ledger_id=" + ledger_id);
  Subprocess init(std::move(argv));
  const std::optional<int> exit_code = init.WaitForExit();
  EXPECT_EQ(exit_code, 0) << init.output();
}

// "--data_dir=DIR" naming a new ledger made by `ledgerd init`, for one ledgerd; every such
// directory is removed when the test program exits. Not thread-safe.
inline std::string NewLedgerDirFlag() {
  static ScratchDir root;
  static int next = 0;
  const std::string dir = root.Sub("data-" + std::to_string(next++));
  InitLedgerDir(dir);
  return "--data_dir=" + dir;
}

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_E2E_LEDGER_DIR_H_
