// Test helper: a fresh directory under the system's temporary directory, removed with everything
// in it when the helper goes out of scope.
#ifndef LEDGER_TESTS_SCRATCH_DIR_H_
#define LEDGER_TESTS_SCRATCH_DIR_H_

#include <stdlib.h>

#include <filesystem>
#include <iostream>
#include <string>
#include <system_error>

#include "gtest/gtest.h"

namespace ledger::testing_util {

// Not thread-safe.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ledgerd-test-XXXXXX").string();
    const char* made = mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr) << "mkdtemp " << pattern;
    path_ = pattern;
  }
  // Removed unless the test failed and LEDGER_TEST_KEEP_FAILED is set (to look at a failed
  // test's files: a replica's Raft segments, a journal).
  ~ScratchDir() {
    if (::testing::Test::HasFailure() && getenv("LEDGER_TEST_KEEP_FAILED") != nullptr) {
      std::cerr << "LEDGER_TEST_KEEP_FAILED: kept " << path_ << "\n";
      return;
    }
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  // A path inside the directory (not created).
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_SCRATCH_DIR_H_
