// Defines `HostPort` and `ParseHostPort`, the one parser of every flag that takes a network
// address (ledgerd's --listen and --metrics_listen, the clients' --target), so that all three
// binaries accept and refuse the same spellings with the same words.
#ifndef LEDGER_CLI_HOST_PORT_H_
#define LEDGER_CLI_HOST_PORT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ledger::cli {

// What an address is for: it decides what `:PORT` means and whether port 0 is allowed.
enum class AddressUse {
  kListen,   // `:PORT` is every IPv4 interface (0.0.0.0); port 0 picks a free port.
  kConnect,  // `:PORT` is localhost; port 0 is refused (no server listens there).
};

// A parsed address. Plain value; thread-compatible.
struct HostPort {
  std::string host;  // A name, an IPv4 address or an IPv6 address without its brackets.
  int port = 0;      // 0 to 65535.

  // `host:port`, with brackets around an IPv6 host: what gRPC and civetweb take.
  std::string ToString() const;
  // The same with another port (the one actually bound when `port` was 0).
  std::string WithPort(int actual_port) const;
  // Whether only this machine can reach it: "localhost", 127.0.0.0/8 or ::1. A wildcard
  // (0.0.0.0, ::) or any other name or address is not.
  bool IsLoopback() const;
};

inline constexpr int kPortMax = 65535;

// Parses `text`, the value of `flag` (named with its dashes, e.g. "--listen"): `HOST:PORT`,
// `:PORT` or `[IPV6]:PORT`. InvalidArgument says what was wrong and shows a right spelling
// that uses `example_port`: a missing port, a port that is not a number or is out of range,
// an IPv6 address without brackets, a host with characters no host name has.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view flag, absl::string_view text,
                                       AddressUse use, int example_port);

}  // namespace ledger::cli

#endif  // LEDGER_CLI_HOST_PORT_H_
