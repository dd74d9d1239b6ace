#include "metrics/metrics_endpoint.h"

#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ledger {

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& address, const std::weak_ptr<prometheus::Collectable>& collectable) {
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    // Two HTTP threads: a scrape in progress never delays the next one by much, and scrapes
    // only read atomics.
    exposer = std::make_unique<prometheus::Exposer>(address, /*num_threads=*/2);
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
