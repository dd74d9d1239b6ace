#include "metrics/metrics_endpoint.h"

#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ledger {
namespace {

// civetweb serves one connection per thread. With 8 threads, 8 slow clients are needed to hold
// every thread, and each is dropped when its request is not complete within the timeout (civetweb's
// default, 30 s, let 2 slow connections keep /metrics blind: issue 10). A scrape reads atomics and
// answers in milliseconds; Prometheus waits up to its scrape timeout (10 s by default).
constexpr int kHttpThreads = 8;
constexpr int kRequestTimeoutMs = 3000;

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& address, const std::weak_ptr<prometheus::Collectable>& collectable) {
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", address, "num_threads", std::to_string(kHttpThreads),
        "request_timeout_ms", std::to_string(kRequestTimeoutMs), "enable_keep_alive", "no"});
  } catch (const std::exception& error) {
    // civetweb reports a port in use (or a bad address) by failing to construct.
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on ", address,
        ": the port is in use or the address is not one of this machine's (", error.what(), ")"));
  }
  const std::vector<int> ports = exposer->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address));
  }
  exposer->RegisterCollectable(collectable, "/metrics");
  const int port = ports.front();
  return std::unique_ptr<MetricsEndpoint>(new MetricsEndpoint(std::move(exposer), port));
}

}  // namespace ledger
