// Overload end to end: ledgerd with a slow handler (--debug_handler_delay) under a closed loop
// far beyond what it can serve. Each refusal reason is driven on its own; the load test's
// verification proves that nothing refused was applied, and /metrics counts the refusals by
// reason. Bounded to a few seconds each; no timing assertions.
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/ledgerd_process.h"
#include "tests/e2e/loadtest_report.h"
#include "tests/e2e/subprocess.h"
#include "tests/http_get.h"
#include "tests/metrics_text.h"
#include "tests/test_paths.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;
using testing_util::JsonNumber;
using testing_util::Subprocess;

class OverloadTest : public testing::Test {
 protected:
  // A ledgerd with 2 shards, 2 ms in every handler, then `flags`, and a new ledger.
  void StartLedgerd(std::vector<std::string> flags) {
    flags.insert(flags.begin(), {"--shards=2", "--debug_handler_delay=2ms"});
    ledgerd_ = std::make_unique<testing_util::LedgerdProcess>(flags);
    ASSERT_TRUE(ledgerd_->Start());
    target_ = ledgerd_->target();
    metrics_port_ = ledgerd_->metrics_port();
  }
  void TearDown() override {
    if (ledgerd_ != nullptr) ledgerd_->Stop();
    std::filesystem::remove(json_path_);
  }

  // Runs the load test: 64 calls in flight for 2 s on skewed accounts, retries off so that every
  // refusal the client counts is one the server counted. (The server counts a few more: the
  // verification's balance reads can be refused too, and are read again.) Returns its exit code
  // and leaves its JSON report in json_.
  int RunLoadtest() {
    Subprocess loadtest({testing_util::LoadtestPath(), "--target=" + target_,
                         "--json_file=" + json_path_, "--server_shards=2", "--warmup=0s",
                         "--duration=2s", "--concurrency=64", "--distribution=zipf:1.1",
                         "--max_retries=0"});
    const int exit_code = loadtest.WaitForExit(std::chrono::seconds(60)).value_or(-1);
    output_ = loadtest.output();
    std::ifstream file(json_path_);
    json_.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
    return exit_code;
  }

  double Metric(const std::string& series) {
    const std::optional<testing_util::HttpResponse> response =
        testing_util::HttpGet(metrics_port_, "/metrics");
    if (!response.has_value() || response->status != 200) return -1;
    return testing_util::SampleValue(response->body, series).value_or(-1);
  }

  std::unique_ptr<testing_util::LedgerdProcess> ledgerd_;
  std::string target_;
  int metrics_port_ = 0;
  const std::string json_path_ =
      (std::filesystem::temp_directory_path() / ("overload-" + std::to_string(getpid()) + ".json"))
          .string();
  std::string json_;
  std::string output_;
};

// Every call in flight waits at least 2 ms in its handler, so 64 client calls against a bound of
// 8 keep the bound full: the rest are refused in_flight_limit, none by a mailbox (1024 each).
TEST_F(OverloadTest, TheInFlightLimitRefusesTheExcessAndNothingRefusedIsApplied) {
  StartLedgerd({"--max_in_flight=8"});
  ASSERT_EQ(RunLoadtest(), 0) << output_;
  EXPECT_THAT(json_, HasSubstr("\"verification\":\"PASS\"")) << json_;
  const long long shed = JsonNumber(json_, "RESOURCE_EXHAUSTED");
  EXPECT_GT(shed, 0) << json_;
  EXPECT_GT(JsonNumber(json_, "OK"), 0) << json_;
  EXPECT_EQ(JsonNumber(json_, "DEADLINE_EXCEEDED"), -1) << "refusals must not wait: " << json_;
  EXPECT_GE(Metric("ledger_refused_total{reason=\"in_flight_limit\"}"), static_cast<double>(shed));
  EXPECT_EQ(Metric("ledger_refused_total{reason=\"mailbox_full\"}"), 0);
  EXPECT_EQ(Metric("ledger_in_flight_limit"), 8);
  EXPECT_EQ(Metric("ledger_in_flight"), 0);  // Every admitted call was answered.
}

// With the server-wide bound out of the way, the shards' mailboxes (4 each) refuse instead.
TEST_F(OverloadTest, AFullMailboxRefusesTheExcessAndNothingRefusedIsApplied) {
  StartLedgerd({"--max_in_flight=100000", "--mailbox_capacity=4", "--max_batch=1"});
  ASSERT_EQ(RunLoadtest(), 0) << output_;
  EXPECT_THAT(json_, HasSubstr("\"verification\":\"PASS\"")) << json_;
  const long long shed = JsonNumber(json_, "RESOURCE_EXHAUSTED");
  EXPECT_GT(shed, 0) << json_;
  EXPECT_GT(JsonNumber(json_, "OK"), 0) << json_;
  EXPECT_GE(Metric("ledger_refused_total{reason=\"mailbox_full\"}"), static_cast<double>(shed));
  EXPECT_EQ(Metric("ledger_refused_total{reason=\"in_flight_limit\"}"), 0);
  EXPECT_EQ(Metric("ledger_in_flight"), 0);
}

}  // namespace
}  // namespace ledger
