// ParseHostPort: every spelling the three binaries accept, and every refusal with its words.
#include "cli/host_port.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ledger::cli {
namespace {

struct AcceptedCase {
  std::string text;
  AddressUse use;
  std::string host;
  int port;
  std::string canonical;
};

class AcceptedAddressTest : public testing::TestWithParam<AcceptedCase> {};

TEST_P(AcceptedAddressTest, ParsesToHostAndPort) {
  const AcceptedCase& c = GetParam();
  absl::StatusOr<HostPort> parsed = ParseHostPort("--listen", c.text, c.use, 50051);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->host, c.host);
  EXPECT_EQ(parsed->port, c.port);
  EXPECT_EQ(parsed->ToString(), c.canonical);
}

INSTANTIATE_TEST_SUITE_P(
    Spellings, AcceptedAddressTest,
    testing::Values(
        AcceptedCase{"127.0.0.1:50051", AddressUse::kListen, "127.0.0.1", 50051, "127.0.0.1:50051"},
        AcceptedCase{":50753", AddressUse::kListen, "0.0.0.0", 50753, "0.0.0.0:50753"},
        AcceptedCase{":50753", AddressUse::kConnect, "localhost", 50753, "localhost:50753"},
        AcceptedCase{"[::1]:9464", AddressUse::kListen, "::1", 9464, "[::1]:9464"},
        AcceptedCase{"[::]:1", AddressUse::kConnect, "::", 1, "[::]:1"},
        AcceptedCase{"ledger:50051", AddressUse::kConnect, "ledger", 50051, "ledger:50051"},
        AcceptedCase{"my-host_1.example:8080", AddressUse::kConnect, "my-host_1.example", 8080,
                     "my-host_1.example:8080"},
        // Limits: port 0 picks a free port when listening; 65535 is the largest port.
        AcceptedCase{"127.0.0.1:0", AddressUse::kListen, "127.0.0.1", 0, "127.0.0.1:0"},
        AcceptedCase{"127.0.0.1:1", AddressUse::kConnect, "127.0.0.1", 1, "127.0.0.1:1"},
        AcceptedCase{"127.0.0.1:65535", AddressUse::kListen, "127.0.0.1", 65535, "127.0.0.1:65535"},
        AcceptedCase{"127.0.0.1:65535", AddressUse::kConnect, "127.0.0.1", 65535,
                     "127.0.0.1:65535"}));

struct RefusedCase {
  std::string flag;
  std::string text;
  AddressUse use;
  std::string message;
};

class RefusedAddressTest : public testing::TestWithParam<RefusedCase> {};

TEST_P(RefusedAddressTest, SaysWhatWasWrong) {
  const RefusedCase& c = GetParam();
  absl::StatusOr<HostPort> parsed = ParseHostPort(c.flag, c.text, c.use, 9464);
  ASSERT_FALSE(parsed.ok()) << parsed->ToString();
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parsed.status().message(), c.message);
}

constexpr char kMetricsNeeds[] = "--metrics_listen needs HOST:PORT, e.g. 127.0.0.1:9464 or :9464";

INSTANTIATE_TEST_SUITE_P(
    Refusals, RefusedAddressTest,
    testing::Values(
        RefusedCase{"--metrics_listen", "9766", AddressUse::kListen,
                    "--metrics_listen needs HOST:PORT, e.g. 127.0.0.1:9766 or :9766; got "
                    "\"9766\": no port"},
        RefusedCase{"--metrics_listen", "localhost", AddressUse::kListen,
                    std::string(kMetricsNeeds) + "; got \"localhost\": no port"},
        RefusedCase{"--metrics_listen", "localhost:", AddressUse::kListen,
                    std::string(kMetricsNeeds) + "; got \"localhost:\": no port"},
        RefusedCase{"--metrics_listen", "", AddressUse::kListen,
                    std::string(kMetricsNeeds) + "; got an empty value"},
        RefusedCase{"--metrics_listen", "127.0.0.1:65536", AddressUse::kListen,
                    std::string(kMetricsNeeds) +
                        "; got \"127.0.0.1:65536\": port 65536 is out of range (0 to 65535; 0 "
                        "picks a free port)"},
        RefusedCase{"--target", "127.0.0.1:0", AddressUse::kConnect,
                    "--target needs HOST:PORT, e.g. 127.0.0.1:9464 or :9464; got "
                    "\"127.0.0.1:0\": port 0 is out of range (1 to 65535)"},
        RefusedCase{"--target", "127.0.0.1:99999999999", AddressUse::kConnect,
                    "--target needs HOST:PORT, e.g. 127.0.0.1:9464 or :9464; got "
                    "\"127.0.0.1:99999999999\": port \"99999999999\" is not a number"},
        RefusedCase{
            "--metrics_listen", "127.0.0.1:http", AddressUse::kListen,
            std::string(kMetricsNeeds) + "; got \"127.0.0.1:http\": port \"http\" is not a number"},
        RefusedCase{
            "--metrics_listen", "127.0.0.1:-1", AddressUse::kListen,
            std::string(kMetricsNeeds) + "; got \"127.0.0.1:-1\": port \"-1\" is not a number"},
        RefusedCase{"--metrics_listen", "::1:9464", AddressUse::kListen,
                    std::string(kMetricsNeeds) +
                        "; got \"::1:9464\": an IPv6 address needs brackets, e.g. [::1]:9464"},
        RefusedCase{
            "--metrics_listen", "[::1:9464", AddressUse::kListen,
            std::string(kMetricsNeeds) + "; got \"[::1:9464\": no ']' after the IPv6 address"},
        RefusedCase{"--metrics_listen", "[::1]9464", AddressUse::kListen,
                    std::string(kMetricsNeeds) + "; got \"[::1]9464\": no :PORT after ]"},
        RefusedCase{
            "--metrics_listen", "[nope]:9464", AddressUse::kListen,
            std::string(kMetricsNeeds) + "; got \"[nope]:9464\": not an IPv6 address in [ ]"},
        RefusedCase{"--metrics_listen", "http://x:9464", AddressUse::kListen,
                    std::string(kMetricsNeeds) +
                        "; got \"http://x:9464\": no scheme (such as http://), only HOST:PORT"},
        RefusedCase{
            "--metrics_listen", "a b:9464", AddressUse::kListen,
            std::string(kMetricsNeeds) + "; got \"a b:9464\": not a host name or IP address"}));

TEST(HostPortTest, WithPortKeepsTheHostAndItsBrackets) {
  EXPECT_EQ((HostPort{"::", 0}).WithPort(4242), "[::]:4242");
  EXPECT_EQ((HostPort{"0.0.0.0", 0}).WithPort(4242), "0.0.0.0:4242");
}

TEST(HostPortTest, OnlyLocalhost127SlashEightAndIpv6OneAreLoopback) {
  for (const char* host : {"localhost", "127.0.0.1", "127.1.2.3", "::1"}) {
    EXPECT_TRUE((HostPort{host, 1}).IsLoopback()) << host;
  }
  for (const char* host : {"0.0.0.0", "::", "10.0.0.1", "128.0.0.1", "127.example.com", "127.0.0",
                           "localhost.example.com", "::2", "ledger.internal"}) {
    EXPECT_FALSE((HostPort{host, 1}).IsLoopback()) << host;
  }
}

}  // namespace
}  // namespace ledger::cli
