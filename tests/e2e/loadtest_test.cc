// ledger-loadtest end to end against a ledgerd it starts, bounded to a few seconds each.
#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/ledger_dir.h"
#include "tests/e2e/subprocess.h"
#include "tests/scratch_dir.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing_util::Subprocess;

// The number after `"key":` in a flat JSON text, or -1.
long long JsonNumber(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\":");
  return at == std::string::npos ? -1 : std::atoll(json.c_str() + at + key.size() + 3);
}

class LoadtestTest : public testing::Test {
 protected:
  void StartLedgerd(std::vector<std::string> flags) {
    flags.insert(flags.begin(), {LEDGERD_PATH, "--listen=127.0.0.1:0",
                                 "--metrics_listen=", testing_util::NewLedgerDirFlag()});
    ledgerd_ = std::make_unique<Subprocess>(flags);
    ASSERT_TRUE(ledgerd_->WaitForOutput("overdraft limit")) << ledgerd_->output();
    target_ = "127.0.0.1:" + std::to_string(testing_util::PortAfter(ledgerd_->output(),
                                                                    "listening on 127.0.0.1:"));
  }
  void TearDown() override {
    if (ledgerd_ != nullptr) {
      ledgerd_->Signal(SIGTERM);
      ledgerd_->WaitForExit();
    }
    std::filesystem::remove(json_path_);
  }

  // Runs the load test; returns its exit code and leaves its JSON report in json_.
  int RunLoadtest(std::vector<std::string> flags) {
    flags.insert(flags.begin(), {LOADTEST_PATH, "--target=" + target_, "--json_file=" + json_path_,
                                 "--server_shards=2", "--warmup=0s"});
    Subprocess loadtest(flags);
    const int exit_code = loadtest.WaitForExit(std::chrono::seconds(60)).value_or(-1);
    output_ = loadtest.output();
    std::ifstream file(json_path_);
    json_.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
    return exit_code;
  }

  std::unique_ptr<Subprocess> ledgerd_;
  std::string target_;
  const std::string json_path_ =
      (std::filesystem::temp_directory_path() / ("loadtest-" + std::to_string(getpid()) + ".json"))
          .string();
  std::string json_;
  std::string output_;
};

TEST_F(LoadtestTest, HealthyServerClosedLoopHasNoErrorsAndPasses) {
  StartLedgerd({"--shards=2"});
  ASSERT_EQ(RunLoadtest({"--duration=2s", "--concurrency=32", "--accounts=200"}), 0) << output_;
  EXPECT_THAT(json_, HasSubstr("\"verification\":\"PASS\""));
  EXPECT_GT(JsonNumber(json_, "OK"), 1000);
  EXPECT_GT(JsonNumber(json_, "ok_per_second"), 500);
  // Only the ledger's own answers: refused withdrawals and reads of unopened accounts.
  for (const char* error :
       {"RESOURCE_EXHAUSTED", "UNAVAILABLE", "DEADLINE_EXCEEDED", "INTERNAL", "CANCELLED"}) {
    EXPECT_THAT(json_, Not(HasSubstr(std::string("\"") + error + "\""))) << error;
  }
  for (const char* key : {"p50", "p90", "p99", "p999", "max", "attempted_per_second"}) {
    EXPECT_THAT(json_, HasSubstr(std::string("\"") + key + "\":")) << key;
  }
  EXPECT_THAT(output_, HasSubstr("verification: PASS"));
}

TEST_F(LoadtestTest, OverloadedServerShedsAndStillLosesNoMoney) {
  StartLedgerd({"--shards=2", "--mailbox_capacity=4", "--debug_handler_delay=2ms"});
  ASSERT_EQ(RunLoadtest({"--duration=2s", "--concurrency=64", "--distribution=zipf:1.1"}), 0)
      << output_;
  EXPECT_THAT(json_, HasSubstr("\"verification\":\"PASS\""));
  EXPECT_GT(JsonNumber(json_, "RESOURCE_EXHAUSTED"), 0) << json_;
  EXPECT_GT(JsonNumber(json_, "OK"), 0) << json_;
}

TEST_F(LoadtestTest, OpenLoopAtAFixedRateSendsAboutThatMany) {
  StartLedgerd({"--shards=2"});
  ASSERT_EQ(RunLoadtest({"--duration=2s", "--rate=500"}), 0) << output_;
  EXPECT_THAT(json_, HasSubstr("\"verification\":\"PASS\""));
  EXPECT_NEAR(JsonNumber(json_, "attempted_per_second"), 500, 100) << json_;
}

TEST_F(LoadtestTest, BadFlagsExitWithUsageCode) {
  target_ = "127.0.0.1:1";
  for (const std::vector<std::string>& flags :
       std::vector<std::vector<std::string>>{{"--mix=transfer=5"},
                                             {"--distribution=zipf:0"},
                                             {"--amount_min=0"},
                                             {"--concurrency=0"},
                                             {"--run_id=has space"}}) {
    EXPECT_EQ(RunLoadtest(flags), 2) << flags[0] << ": " << output_;
    EXPECT_THAT(output_, HasSubstr("ledger-loadtest: ")) << flags[0];
  }
}

TEST_F(LoadtestTest, JsonPrintsTheReportAsJsonOnStdoutInsteadOfText) {
  StartLedgerd({"--shards=2"});
  Subprocess loadtest({"/bin/sh", "-c",
                       std::string(LOADTEST_PATH) + " --target=" + target_ +
                           " --json --requests=200 --duration=0s --warmup=0s --server_shards=2 "
                           "--accounts=20 2>/dev/null"});
  ASSERT_EQ(loadtest.WaitForExit(std::chrono::seconds(60)), 0) << loadtest.output();
  const std::string& out = loadtest.output();
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.front(), '{') << out;
  EXPECT_EQ(out.find('\n'), out.size() - 1) << "one line: " << out;
  EXPECT_THAT(out, HasSubstr("\"verification\":\"PASS\""));
  EXPECT_THAT(out, HasSubstr("\"shards\":[{\"calls\":"));
  EXPECT_THAT(out, Not(HasSubstr("verification: PASS")));  // The text report.
}

struct FlagCase {
  std::vector<std::string> args;
  std::string message;  // The first line of the output; exit 2.
};

class LoadtestFlagTest : public testing::TestWithParam<FlagCase> {};

TEST_P(LoadtestFlagTest, IsRefusedWithExitTwoAndAHint) {
  std::vector<std::string> argv = {LOADTEST_PATH, "--target=127.0.0.1:1"};
  argv.insert(argv.end(), GetParam().args.begin(), GetParam().args.end());
  Subprocess loadtest(argv);
  EXPECT_EQ(loadtest.WaitForExit(std::chrono::seconds(30)), 2) << loadtest.output();
  EXPECT_EQ(loadtest.output().substr(0, loadtest.output().find('\n')),
            "ledger-loadtest: " + GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LoadtestFlagTest,
    testing::Values(
        FlagCase{{"--duration=10"},
                 "Illegal value '10' specified for flag 'duration'; durations need a unit, e.g. "
                 "5s, 250ms or 1m30s"},
        FlagCase{{"--json=out.json"},
                 "Illegal value 'out.json' specified for flag 'json'; use true or false"},
        FlagCase{{"--shards=2"}, "Unknown command line flag 'shards'"},
        FlagCase{{"--server_shards=1025"}, "--server_shards must be 0 to 1024"},
        FlagCase{{"--target=ledger"},
                 "--target needs HOST:PORT, e.g. 127.0.0.1:50051 or :50051; got \"ledger\": no "
                 "port"},
        FlagCase{{"--concurency=8"},
                 "Unknown command line flag 'concurency'; did you mean --concurrency?"},
        FlagCase{{"run"}, "unexpected argument \"run\"; ledger-loadtest takes only flags"}));

TEST(LoadtestHelpTest, HelpListsItsOwnFlagsAndExitsZero) {
  Subprocess help({LOADTEST_PATH, "--help"});
  EXPECT_EQ(help.WaitForExit(), 0);
  for (const char* flag : {"  --json  (default: false)", "  --json_file=STRING", "--server_shards",
                           "must equal the server's --shards", "--concurrency", "--version"}) {
    EXPECT_THAT(help.output(), HasSubstr(flag)) << flag;
  }
  EXPECT_THAT(help.output(), Not(HasSubstr("No flags matched")));
  EXPECT_THAT(help.output(), Not(HasSubstr("Flags from")));
}

}  // namespace
}  // namespace ledger
