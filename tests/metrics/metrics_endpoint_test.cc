#include "metrics/metrics_endpoint.h"

#include <chrono>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "tests/http_get.h"

namespace ledger {
namespace {

using testing_util::HttpGet;

// A registry with one counter at 7, to see what the endpoint serves.
std::shared_ptr<prometheus::Registry> RegistryWithOneCounter() {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter()
      .Name("ledger_test_total")
      .Help("test")
      .Register(*registry)
      .Add({})
      .Increment(7);
  return registry;
}

// Every ledgerd shutdown waits for this destructor. civetweb alone takes up to 2 s, its listening
// thread's poll timeout; the endpoint wakes that poll, so stopping takes milliseconds. The bound
// is half of civetweb's timeout, far above the few milliseconds it takes.
constexpr auto kStopBound = std::chrono::milliseconds(1000);

class MetricsEndpointTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MetricsEndpointTest, ServesTheRegistryThenStopsWithoutWaitingOutCivetwebsPoll) {
  const auto registry = RegistryWithOneCounter();
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint =
      MetricsEndpoint::Start(GetParam(), registry);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int port = (*endpoint)->port();
  ASSERT_GT(port, 0);
  const auto scrape = HttpGet(port, "/metrics");
  ASSERT_TRUE(scrape.has_value());
  EXPECT_EQ(scrape->status, 200);
  EXPECT_NE(scrape->body.find("ledger_test_total 7"), std::string::npos) << scrape->body;

  const auto started = std::chrono::steady_clock::now();
  endpoint->reset();
  EXPECT_LT(std::chrono::steady_clock::now() - started, kStopBound);
  EXPECT_FALSE(HttpGet(port, "/metrics").has_value()) << "still serving after the stop";
}

// On loopback, and on every interface (then the wake-up goes to loopback).
INSTANTIATE_TEST_SUITE_P(Addresses, MetricsEndpointTest,
                         ::testing::Values("127.0.0.1:0", "0.0.0.0:0"));

}  // namespace
}  // namespace ledger
