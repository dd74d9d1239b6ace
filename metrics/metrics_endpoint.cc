#include "metrics/metrics_endpoint.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <string>
#include <thread>
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

// How often the stopping endpoint is poked (see ~MetricsEndpoint).
constexpr std::chrono::milliseconds kWakeInterval{5};

// The host of a listening address ("127.0.0.1:9464", "[::1]:9464", "0.0.0.0:9464") that a
// connection reaches it by: the host itself, or loopback for a wildcard.
std::string WakeHost(const std::string& address) {
  const size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? "" : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty() || host == "0.0.0.0") return "127.0.0.1";
  if (host == "::") return "::1";
  return host;
}

// Opens a TCP connection to `address` and closes it at once; failures are ignored (the endpoint
// may already have stopped listening).
void ConnectAndClose(const addrinfo& address) {
  const int fd = socket(address.ai_family, address.ai_socktype | SOCK_CLOEXEC, address.ai_protocol);
  if (fd < 0) return;
  (void)connect(fd, address.ai_addr, address.ai_addrlen);
  close(fd);
}

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
  return std::unique_ptr<MetricsEndpoint>(
      new MetricsEndpoint(std::move(exposer), port, WakeHost(address)));
}

MetricsEndpoint::~MetricsEndpoint() {
  // civetweb's listening thread waits in poll() with a 2 s timeout and sees the stop flag only
  // when the poll returns, so stopping an idle endpoint took up to 2 s: every ledgerd shutdown
  // waited that long after the drain. A connection wakes the poll; the poke repeats until the
  // stop returns, since one made before civetweb sets its stop flag is served like any other.
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(wake_host_.c_str(), std::to_string(port_).c_str(), &hints, &found) != 0) {
    exposer_.reset();  // Nothing to connect to: the stop takes as long as civetweb takes.
    return;
  }
  std::atomic<bool> stopped{false};
  std::thread waker([found, &stopped] {
    while (!stopped.load(std::memory_order_relaxed)) {
      ConnectAndClose(*found);
      std::this_thread::sleep_for(kWakeInterval);
    }
  });
  exposer_.reset();
  stopped.store(true, std::memory_order_relaxed);
  waker.join();
  freeaddrinfo(found);
}

}  // namespace ledger
