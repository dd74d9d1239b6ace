// Test helper: `LedgerctlTest`, a fixture that starts a ledgerd (or a FakeLedger) and runs the
// ledgerctl binary against it, for ledgerctl's end-to-end tests.
#ifndef LEDGER_TESTS_E2E_LEDGERCTL_FIXTURE_H_
#define LEDGER_TESTS_E2E_LEDGERCTL_FIXTURE_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/e2e/fake_ledger.h"
#include "tests/e2e/ledgerd_process.h"
#include "tests/e2e/subprocess.h"
#include "tests/test_paths.h"

namespace ledger::testing_util {

// What a ledgerctl run ended with.
struct LedgerctlResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr as they came, or stdout alone.
};

// Not thread-safe, but for Run (see ShedCallIsOverloaded).
class LedgerctlTest : public testing::Test {
 protected:
  // A ledgerd with 2 shards, no metrics (unless `flags` say otherwise) and a new ledger.
  void StartLedgerd(std::vector<std::string> flags = {}) {
    flags.insert(flags.begin(), {"--metrics_listen=", "--shards=2"});  // The last value wins.
    ledgerd_ = std::make_unique<LedgerdProcess>(flags);
    ASSERT_TRUE(ledgerd_->Start());
    target_ = "--target=" + ledgerd_->target();
  }
  void TearDown() override {
    if (ledgerd_ != nullptr) ledgerd_->Stop();
  }

  // Runs ledgerctl against the started ledgerd; `stdout_only` drops what it writes to stderr;
  // `stdin_path`, when set, is its standard input.
  LedgerctlResult Run(std::vector<std::string> args, bool stdout_only = false,
                      const std::optional<std::string>& stdin_path = std::nullopt) {
    std::string command = testing_util::LedgerctlPath() + " " + target_;
    for (const std::string& arg : args) command += " '" + arg + "'";
    if (stdin_path.has_value()) command += " < '" + *stdin_path + "'";
    if (stdout_only) command += " 2>/dev/null";
    Subprocess ledgerctl({"/bin/sh", "-c", command});
    const std::optional<int> exit_code = ledgerctl.WaitForExit();
    return {exit_code.value_or(-1), ledgerctl.output()};
  }

  // Serves ledgerctl's calls from a FakeLedger that sheds as `shedding` says.
  void StartFakeLedger(FakeLedger::Shedding shedding,
                       std::optional<FakeLedger::WriteFault> first_write_fault = {}) {
    fake_ = std::make_unique<FakeLedger>(shedding, std::move(first_write_fault));
    target_ = "--target=" + fake_->Start();
  }

  std::unique_ptr<LedgerdProcess> ledgerd_;
  std::unique_ptr<FakeLedger> fake_;
  std::string target_;
};

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_E2E_LEDGERCTL_FIXTURE_H_
