// Defines `MetricsEndpoint`, the HTTP server (prometheus-cpp's Exposer) that serves
// GET /metrics in the Prometheus text format.
#ifndef LEDGER_METRICS_METRICS_ENDPOINT_H_
#define LEDGER_METRICS_METRICS_ENDPOINT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"

namespace ledger {

// Thread-safe: scrapes are served on the exposer's own HTTP threads, which only read.
class MetricsEndpoint {
 public:
  // Listens on `address` (host:port; port 0 picks a free one) and serves `collectable` at
  // /metrics. Unavailable when the address cannot be listened on.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& address, const std::weak_ptr<prometheus::Collectable>& collectable);

  // Stops serving; returns once no scrape is being served.
  ~MetricsEndpoint();

  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // The port actually bound.
  int port() const { return port_; }

 private:
  MetricsEndpoint(std::unique_ptr<prometheus::Exposer> exposer, int port, std::string wake_host)
      : exposer_(std::move(exposer)), port_(port), wake_host_(std::move(wake_host)) {}

  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_;
  // Where a connection reaches the endpoint: its host, or loopback when it listens on all.
  std::string wake_host_;
};

}  // namespace ledger

#endif  // LEDGER_METRICS_METRICS_ENDPOINT_H_
