#include "cli/host_port.h"

#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ledger::cli {
namespace {

bool IsHostNameChar(char c) { return absl::ascii_isalnum(c) || c == '.' || c == '-' || c == '_'; }

bool IsIpv6Char(char c) { return absl::ascii_isxdigit(c) || c == ':' || c == '.' || c == '%'; }

bool AllOf(absl::string_view text, bool (*predicate)(char)) {
  for (char c : text) {
    if (!predicate(c)) return false;
  }
  return true;
}

}  // namespace

std::string HostPort::ToString() const { return WithPort(port); }

std::string HostPort::WithPort(int actual_port) const {
  return absl::StrContains(host, ':') ? absl::StrCat("[", host, "]:", actual_port)
                                      : absl::StrCat(host, ":", actual_port);
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view flag, absl::string_view text,
                                       AddressUse use, int example_port) {
  const bool all_digits =
      !text.empty() && AllOf(text, [](char c) { return absl::ascii_isdigit(c) != 0; });
  const std::string example =
      absl::StrCat(all_digits && text.size() <= 5 ? std::string(text) : absl::StrCat(example_port));
  const std::string needs =
      absl::StrCat(flag, " needs HOST:PORT, e.g. 127.0.0.1:", example, " or :", example);
  auto invalid = [&](absl::string_view problem) {
    return absl::InvalidArgumentError(absl::StrCat(needs, "; got \"", text, "\": ", problem));
  };
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(needs, "; got an empty value"));
  if (absl::StrContains(text, "://")) return invalid("no scheme (such as http://), only HOST:PORT");
  std::string host;
  absl::string_view port_text;
  if (text.front() == '[') {
    const size_t close = text.find(']');
    if (close == absl::string_view::npos) return invalid("no ']' after the IPv6 address");
    host = std::string(text.substr(1, close - 1));
    if (host.empty() || !AllOf(host, IsIpv6Char)) return invalid("not an IPv6 address in [ ]");
    if (close + 1 >= text.size() || text[close + 1] != ':') return invalid("no :PORT after ]");
    port_text = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == absl::string_view::npos) return invalid("no port");
    host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
    if (absl::StrContains(host, ':')) {
      return invalid(absl::StrCat("an IPv6 address needs brackets, e.g. [::1]:", example));
    }
    if (!AllOf(host, IsHostNameChar)) return invalid("not a host name or IP address");
    if (host.empty()) host = use == AddressUse::kListen ? "0.0.0.0" : "localhost";
  }
  if (port_text.empty()) return invalid("no port");
  const int port_min = use == AddressUse::kListen ? 0 : 1;
  int64_t port = 0;
  if (port_text.size() > 10 ||
      !AllOf(port_text, [](char c) { return absl::ascii_isdigit(c) != 0; }) ||
      !absl::SimpleAtoi(port_text, &port)) {
    return invalid(absl::StrCat("port \"", port_text, "\" is not a number"));
  }
  if (port < port_min || port > kPortMax) {
    return invalid(absl::StrCat("port ", port, " is out of range (", port_min, " to ", kPortMax,
                                use == AddressUse::kListen ? "; 0 picks a free port)" : ")"));
  }
  return HostPort{std::move(host), static_cast<int>(port)};
}

bool HostPort::IsLoopback() const {
  if (host == "localhost" || host == "::1") return true;
  // 127.0.0.0/8, as dotted digits only: a name that merely starts with "127." is not an address.
  if (!absl::StartsWith(host, "127.")) return false;
  int dots = 0;
  for (char c : host) {
    if (c == '.') {
      ++dots;
    } else if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      return false;
    }
  }
  return dots == 3;
}

}  // namespace ledger::cli
