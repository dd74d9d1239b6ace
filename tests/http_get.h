// Test helper: a minimal blocking HTTP/1.0 GET against a port (of loopback unless a host is
// named), enough to scrape /metrics and query Prometheus's HTTP API without an HTTP client
// library.
#ifndef LEDGER_TESTS_HTTP_GET_H_
#define LEDGER_TESTS_HTTP_GET_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <optional>
#include <string>

namespace ledger::testing_util {

struct HttpResponse {
  int status = 0;
  std::string body;
};

// GET http://`host`:`port``path` (`host` an IPv4 address); nullopt when the connection or the
// response fails.
inline std::optional<HttpResponse> HttpGet(const std::string& host, int port,
                                           const std::string& path) {
  in_addr host_address{};
  if (inet_pton(AF_INET, host.c_str(), &host_address) != 1) return std::nullopt;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return std::nullopt;
  const timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr = host_address;
  std::optional<HttpResponse> result;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) {
    const std::string request = "GET " + path + " HTTP/1.0\r\nHost: " + host + "\r\n\r\n";
    if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
        static_cast<ssize_t>(request.size())) {
      std::string raw;
      char buffer[16384];
      ssize_t n = 0;
      while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) raw.append(buffer, n);
      const size_t header_end = raw.find("\r\n\r\n");
      if (raw.rfind("HTTP/1.", 0) == 0 && header_end != std::string::npos) {
        result =
            HttpResponse{std::atoi(raw.c_str() + raw.find(' ') + 1), raw.substr(header_end + 4)};
      }
    }
  }
  close(fd);
  return result;
}

// GET http://127.0.0.1:`port``path`.
inline std::optional<HttpResponse> HttpGet(int port, const std::string& path) {
  return HttpGet("127.0.0.1", port, path);
}

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_HTTP_GET_H_
