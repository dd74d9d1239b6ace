// End to end with a real Prometheus: ledgerd and the Debian `prometheus` server are started on
// loopback ports, Prometheus scrapes ledgerd every second, and the test asks Prometheus's HTTP
// API what it saw. Both are stopped by PID; Prometheus's data directory is removed.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ledger/v1/ledger.grpc.pb.h"
#include "tests/e2e/ledgerd_process.h"
#include "tests/e2e/subprocess.h"
#include "tests/http_get.h"
#include "tests/scratch_dir.h"
#include "tests/test_paths.h"
#include "tests/unused_port.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using testing_util::HttpGet;
using testing_util::LedgerdProcess;
using testing_util::Subprocess;
using testing_util::UnusedPort;

std::string UrlEncode(const std::string& text) {
  std::string encoded;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-') {
      encoded += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof(hex), "%%%02X", c);
      encoded += hex;
    }
  }
  return encoded;
}

// The JSON body of /api/v1/query for `promql`, or "" on failure.
std::string Query(int port, const std::string& promql) {
  auto response = HttpGet(port, "/api/v1/query?query=" + UrlEncode(promql));
  return response.has_value() && response->status == 200 ? response->body : "";
}

// Number of series in a query result, and the value of the first one.
size_t SeriesCount(const std::string& json) {
  size_t count = 0;
  for (size_t at = json.find("\"metric\":"); at != std::string::npos;
       at = json.find("\"metric\":", at + 1)) {
    ++count;
  }
  return count;
}

std::optional<double> FirstValue(const std::string& json) {
  const size_t at = json.find("\"value\":[");
  if (at == std::string::npos) return std::nullopt;
  const size_t quote = json.find('"', json.find(',', at));
  if (quote == std::string::npos) return std::nullopt;
  return std::strtod(json.c_str() + quote + 1, nullptr);
}

class PrometheusEndToEndTest : public testing::Test {
 protected:
  void SetUp() override {
    data_dir_ =
        std::filesystem::temp_directory_path() / ("ledger-prometheus-" + std::to_string(getpid()));
    std::filesystem::remove_all(data_dir_);
    std::filesystem::create_directories(data_dir_);
  }
  void TearDown() override {
    if (prometheus_ != nullptr) {
      prometheus_->Signal(SIGTERM);
      prometheus_->WaitForExit(std::chrono::seconds(20));
    }
    if (ledgerd_ != nullptr) ledgerd_->Stop();
    std::filesystem::remove_all(data_dir_);
  }

  std::filesystem::path data_dir_;
  std::unique_ptr<LedgerdProcess> ledgerd_;
  std::unique_ptr<Subprocess> prometheus_;
};

TEST_F(PrometheusEndToEndTest, ScrapesOneWaitSeriesPerShardAndCountsEveryOkCall) {
  constexpr int kMaxCalls = 20'000;
  ledgerd_ = std::make_unique<LedgerdProcess>(std::vector<std::string>{"--shards=2"});
  ASSERT_TRUE(ledgerd_->Start());
  const int metrics_port = ledgerd_->metrics_port();
  ASSERT_GT(metrics_port, 0);

  // Prometheus has no "port 0, tell me which" mode.
  const int prometheus_port = UnusedPort();
  const std::filesystem::path config = data_dir_ / "prometheus.yml";
  std::ofstream(config) << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                        << "scrape_configs:\n  - job_name: ledgerd\n    static_configs:\n"
                        << "      - targets: ['127.0.0.1:" << metrics_port << "']\n";
  prometheus_ = std::make_unique<Subprocess>(std::vector<std::string>{
      testing_util::PrometheusPath(), "--config.file=" + config.string(),
      "--storage.tsdb.path=" + (data_dir_ / "tsdb").string(),
      "--web.listen-address=127.0.0.1:" + std::to_string(prometheus_port)});
  ASSERT_TRUE(prometheus_->WaitForOutput("Server is ready to receive web requests"))
      << prometheus_->output();

  auto stub = v1::Ledger::NewStub(
      grpc::CreateChannel(ledgerd_->target(), grpc::InsecureChannelCredentials()));
  // A short load spread over a few scrapes, so that rates have samples to work on.
  int ok_calls = 0;
  int calls = 0;
  const auto load_end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < load_end && calls < kMaxCalls) {
    v1::DepositRequest request;
    request.set_account_id("acct-" + std::to_string(calls++ % 40));  // Spread over both shards.
    request.set_amount(1);
    v1::DepositResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (stub->Deposit(&context, request, &response).ok()) ++ok_calls;
    if (calls % 100 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(ok_calls, calls);

  // Prometheus scrapes every second; wait (bounded) until scrapes after the load are in.
  const std::string wait_p99_query =
      "histogram_quantile(0.99, sum by (le, shard) "
      "(rate(ledger_mailbox_wait_seconds_bucket[15s])))";
  std::string ok_total;
  std::string wait_p99;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    ok_total = Query(prometheus_port, "sum(ledger_requests_total{code=\"OK\"})");
    wait_p99 = Query(prometheus_port, wait_p99_query);
    if (FirstValue(ok_total) == ok_calls && SeriesCount(wait_p99) == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  EXPECT_EQ(FirstValue(ok_total), ok_calls) << ok_total;
  EXPECT_EQ(SeriesCount(wait_p99), 2u) << wait_p99;
  EXPECT_EQ(FirstValue(Query(prometheus_port, "up{job=\"ledgerd\"}")), 1);
}

TEST_F(PrometheusEndToEndTest, PromtoolAcceptsAScrapeTakenUnderLoad) {
  ledgerd_ = std::make_unique<LedgerdProcess>(std::vector<std::string>{});
  ASSERT_TRUE(ledgerd_->Start());
  const int metrics_port = ledgerd_->metrics_port();
  auto stub = v1::Ledger::NewStub(
      grpc::CreateChannel(ledgerd_->target(), grpc::InsecureChannelCredentials()));
  std::atomic<bool> stop{false};
  std::atomic<int> calls{0};
  std::vector<std::thread> load;
  for (int t = 0; t < 4; ++t) {
    load.emplace_back([&, t] {
      for (int i = 0; !stop.load() && i < 50'000; ++i) {
        v1::WithdrawRequest request;  // A mix of OK and FAILED_PRECONDITION, all shards.
        request.set_account_id("acct-" + std::to_string(t * 1000 + i % 50));
        request.set_amount(1);
        v1::WithdrawResponse response;
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        (void)stub->Withdraw(&context, request, &response);
        calls.fetch_add(1);
      }
    });
  }
  // The scrape is taken under load: after 500 calls, while the load threads keep calling.
  const ::testing::AssertionResult loaded =
      testing_util::WaitUntil([&] { return calls.load() >= 500; }, "the load has made 500 calls");
  auto scrape = HttpGet(metrics_port, "/metrics");
  stop = true;
  for (std::thread& thread : load) thread.join();
  ASSERT_TRUE(loaded);
  ASSERT_TRUE(scrape.has_value());
  const std::filesystem::path file = data_dir_ / "scrape.txt";
  std::ofstream(file) << scrape->body;
  Subprocess promtool(
      {"/bin/sh", "-c", testing_util::PromtoolPath() + " check metrics < " + file.string()});
  EXPECT_EQ(promtool.WaitForExit(), 0) << promtool.output();
  EXPECT_EQ(promtool.output(), "") << "promtool lint findings";
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream file(path);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

// Every `ledger_...` metric name in `text` that is not part of a recording rule's name (those
// read `level:ledger_...:operation` and are checked separately).
std::set<std::string> MetricNamesIn(const std::string& text) {
  std::set<std::string> names;
  for (size_t at = text.find("ledger_"); at != std::string::npos;
       at = text.find("ledger_", at + 1)) {
    if (at > 0 && (std::isalnum(static_cast<unsigned char>(text[at - 1])) || text[at - 1] == '_' ||
                   text[at - 1] == ':')) {
      continue;
    }
    size_t end = at;
    while (end < text.size() && (std::islower(static_cast<unsigned char>(text[end])) ||
                                 text[end] == '_' || text[end] == ':')) {
      ++end;
    }
    const std::string name = text.substr(at, end - at);
    if (name.find(':') == std::string::npos) names.insert(name);
  }
  return names;
}

// Recording rule names (`record: x`) defined in `rules`, and those used in `text`.
std::set<std::string> RecordedNames(const std::string& text, bool definitions) {
  std::set<std::string> names;
  const std::string marker = definitions ? "record: " : ":ledger_";
  for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at + 1)) {
    size_t begin = definitions ? at + marker.size() : at;
    while (!definitions && begin > 0 &&
           (std::islower(static_cast<unsigned char>(text[begin - 1])) || text[begin - 1] == '_' ||
            text[begin - 1] == ':')) {
      --begin;
    }
    size_t end = definitions ? begin : at + 1;
    while (end < text.size() && (std::isalnum(static_cast<unsigned char>(text[end])) ||
                                 text[end] == '_' || text[end] == ':')) {
      ++end;
    }
    while (end > begin && text[end - 1] == ':') --end;  // A colon of the prose around it.
    names.insert(text.substr(begin, end - begin));
  }
  return names;
}

// A rename in ledgerd must break the build, not silently empty a dashboard panel or an alert.
TEST_F(PrometheusEndToEndTest, DashboardAndRulesUseOnlyMetricNamesLedgerdExports) {
  ledgerd_ = std::make_unique<LedgerdProcess>(std::vector<std::string>{});
  ASSERT_TRUE(ledgerd_->Start());
  auto scrape = HttpGet(ledgerd_->metrics_port(), "/metrics");
  ASSERT_TRUE(scrape.has_value());
  // A cluster replica exports ledger_replica_* besides: one replica of a cluster of three, alone
  // (it never leads, but its metrics are there).
  LedgerdProcess replica(std::vector<std::string>{
      "--node_id=1", absl::StrCat("--peers=1=127.0.0.1:", UnusedPort(),
                                  ",2=127.0.0.1:", UnusedPort(), ",3=127.0.0.1:", UnusedPort())});
  ASSERT_TRUE(replica.Start());
  const auto replica_scrape = HttpGet(replica.metrics_port(), "/metrics");
  ASSERT_TRUE(replica_scrape.has_value());
  ASSERT_NE(replica_scrape->body.find("# TYPE ledger_replica_serving gauge"), std::string::npos);
  scrape->body += replica_scrape->body;
  const std::filesystem::path deploy = std::filesystem::path(testing_util::SourceDir()) / "deploy";
  const std::string rules = ReadFile(deploy / "prometheus" / "rules.yml");
  const std::string alerts = ReadFile(deploy / "prometheus" / "alerts.yml");
  const std::string dashboard = ReadFile(deploy / "grafana" / "ledger-dashboard.json");
  ASSERT_FALSE(rules.empty());
  ASSERT_FALSE(dashboard.empty());

  std::set<std::string> used = MetricNamesIn(rules + alerts + dashboard);
  EXPECT_GE(used.size(), 6u);
  for (std::string name : used) {
    for (const char* suffix : {"_bucket", "_count", "_sum"}) {
      if (name.ends_with(suffix) &&
          scrape->body.find("# TYPE " + name.substr(0, name.size() - std::strlen(suffix)) +
                            " histogram") != std::string::npos) {
        name.resize(name.size() - std::strlen(suffix));
      }
    }
    EXPECT_NE(scrape->body.find("# TYPE " + name + " "), std::string::npos)
        << name << " is used by deploy/ but ledgerd does not export it";
  }
  const std::set<std::string> defined = RecordedNames(rules, /*definitions=*/true);
  for (const std::string& name : RecordedNames(alerts + dashboard, /*definitions=*/false)) {
    EXPECT_TRUE(defined.contains(name)) << name << " is used but no recording rule defines it";
  }
}

}  // namespace
}  // namespace ledger
