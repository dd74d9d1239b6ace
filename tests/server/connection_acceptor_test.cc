// ConnectionAcceptor, ledgerd's own accept loop: a LedgerServer in-process whose connections are
// bounded by --max_connections, real gRPC clients beside raw TCP connections that never speak,
// and the binding rules it shares with gRPC.
#include "server/connection_acceptor.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/test_server.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;
using testing_util::ContextWithDeadline;
using testing_util::LoopbackOptions;
using testing_util::TestServer;

// A TCP connection to `address`:`port` that sends nothing; -1 when it could not connect.
int ConnectSilently(const sockaddr* address, socklen_t length) {
  const int fd = socket(address->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, address, length) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int ConnectSilentlyToLoopback(int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return ConnectSilently(reinterpret_cast<const sockaddr*>(&address), sizeof(address));
}

// Whether the server ended `fd`'s connection: past what it sent first (its HTTP/2 settings), a
// read comes to end of file at once. (The server ends a connection when it accepts the next one,
// which the callers have waited for; on loopback the end of file is there by then.)
bool EndedByServer(int fd) {
  std::array<char, 4096> buffer{};
  for (int reads = 0; reads < 16; ++reads) {
    pollfd ready{.fd = fd, .events = POLLIN, .revents = 0};
    if (poll(&ready, 1, 200) != 1) return false;
    const ssize_t n = recv(fd, buffer.data(), buffer.size(), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN)) return true;
  }
  return false;
}

int CountEnded(const std::vector<int>& fds) {
  int ended = 0;
  for (int fd : fds) ended += EndedByServer(fd) ? 1 : 0;
  return ended;
}

class SilentConnections {
 public:
  ~SilentConnections() {
    for (int fd : fds_) close(fd);
  }
  // Opens `count` to `port`, waiting after each until the server has accepted it.
  void Open(int count, int port, const LedgerServer& server) {
    for (int i = 0; i < count; ++i) {
      const int64_t accepted = server.connections().accepted;
      const int fd = ConnectSilentlyToLoopback(port);
      ASSERT_GE(fd, 0) << std::strerror(errno);
      fds_.push_back(fd);
      ASSERT_TRUE(
          testing_util::WaitUntil([&] { return server.connections().accepted == accepted + 1; },
                                  "the server has accepted the connection"));
    }
  }
  const std::vector<int>& fds() const { return fds_; }

 private:
  std::vector<int> fds_;
};

v1::DepositResponse Deposit(v1::Ledger::Stub& stub, const std::string& account, int64_t amount,
                            grpc::Status& status) {
  v1::DepositRequest request;
  request.set_account_id(account);
  request.set_amount(amount);
  v1::DepositResponse response;
  status = stub.Deposit(ContextWithDeadline().get(), request, &response);
  return response;
}

TEST(ConnectionAcceptorTest, IdleConnectionsPastMaxConnectionsMakeRoomForAClientThatCalls) {
  ServerOptions options = LoopbackOptions();
  options.max_connections = 4;
  TestServer server(options);
  ASSERT_EQ(server.server().connections().max, 4);
  SilentConnections silent;
  silent.Open(10, server.server().port(), server.server());

  // The 11th connection is a real client's: the oldest silent one makes room for it.
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  grpc::Status status;
  EXPECT_EQ(Deposit(*stub, "alice", 70, status).balance(), 70);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(server.server().connections().accepted, 11);
  EXPECT_EQ(server.server().connections().closed_at_limit, 7);
  EXPECT_EQ(CountEnded(silent.fds()), 7);

  // Five more silent ones: each ends a silent connection, never the client's, which has spoken.
  silent.Open(5, server.server().port(), server.server());
  EXPECT_EQ(CountEnded(silent.fds()), 12);
  EXPECT_EQ(server.server().connections().closed_at_limit, 12);
  EXPECT_EQ(Deposit(*stub, "alice", 5, status).balance(), 75);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(server.server().connections().accepted, 16);  // The client did not reconnect.
}

TEST(ConnectionAcceptorTest, AfterShutdownNewConnectionsAreRefused) {
  TestServer server;
  const int port = server.server().port();
  const int before = ConnectSilentlyToLoopback(port);
  ASSERT_GE(before, 0);
  close(before);
  server.server().Shutdown();
  EXPECT_EQ(ConnectSilentlyToLoopback(port), -1);
  EXPECT_EQ(errno, ECONNREFUSED);
}

TEST(ConnectionAcceptorTest, APortInUseIsRefusedNamingTheCause) {
  TestServer first;
  absl::StatusOr<std::unique_ptr<ConnectionAcceptor>> second = ConnectionAcceptor::Listen(
      absl::StrCat("127.0.0.1:", first.server().port()), /*max_connections=*/8);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("cannot listen on 127.0.0.1:", first.server().port(),
                                     ": the port is in use")));
}

// Every address `host` resolves to, with `port`.
std::vector<sockaddr_storage> AddressesOf(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::vector<sockaddr_storage> addresses;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) {
    return addresses;
  }
  for (const addrinfo* each = found; each != nullptr; each = each->ai_next) {
    sockaddr_storage address{};
    std::memcpy(&address, each->ai_addr, each->ai_addrlen);
    addresses.push_back(address);
  }
  freeaddrinfo(found);
  return addresses;
}

socklen_t LengthOf(const sockaddr_storage& address) {
  return address.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

// Whether a socket can be bound to `address` with any port: this machine has that address.
bool CanBind(sockaddr_storage address) {
  if (address.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&address)->sin6_port = 0;
  } else {
    reinterpret_cast<sockaddr_in*>(&address)->sin_port = 0;
  }
  const int fd = socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool bound =
      fd >= 0 && bind(fd, reinterpret_cast<const sockaddr*>(&address), LengthOf(address)) == 0;
  if (fd >= 0) close(fd);
  return bound;
}

TEST(ConnectionAcceptorTest, LocalhostListensOnEveryAddressItResolvesToWithOnePort) {
  absl::StatusOr<std::unique_ptr<ConnectionAcceptor>> acceptor =
      ConnectionAcceptor::Listen("localhost:0", /*max_connections=*/8);
  ASSERT_TRUE(acceptor.ok()) << acceptor.status();
  const std::vector<sockaddr_storage> addresses = AddressesOf("localhost", (*acceptor)->port());
  ASSERT_FALSE(addresses.empty());
  int reachable = 0;
  for (const sockaddr_storage& address : addresses) {
    // An address this machine does not have (::1 in a container without IPv6) is skipped by
    // Listen, as by gRPC.
    if (!CanBind(address)) continue;
    // Not yet accepting: the kernel completes the connection into the listen queue.
    const int fd = ConnectSilently(reinterpret_cast<const sockaddr*>(&address), LengthOf(address));
    EXPECT_GE(fd, 0) << "family " << address.ss_family << ": " << std::strerror(errno);
    if (fd >= 0) close(fd);
    ++reachable;
  }
  EXPECT_GE(reachable, 1);
}

class WildcardTest : public testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(Spellings, WildcardTest,
                         testing::Values("0.0.0.0:0", "[::]:0", "[::0]:0"));

TEST_P(WildcardTest, TakesIpv4AndIpv6ConnectionsOnOneSocketAsGrpcDoes) {
  TestServer server([] {
    ServerOptions options = LoopbackOptions();
    options.listen_address = GetParam();
    return options;
  }());
  const int ipv4 = ConnectSilentlyToLoopback(server.server().port());
  EXPECT_GE(ipv4, 0) << std::strerror(errno);
  if (ipv4 >= 0) close(ipv4);
  sockaddr_in6 loopback6{};
  loopback6.sin6_family = AF_INET6;
  loopback6.sin6_port = htons(static_cast<uint16_t>(server.server().port()));
  loopback6.sin6_addr = in6addr_loopback;
  // Whether this machine has ::1 (a container may not).
  sockaddr_storage as_storage{};
  std::memcpy(&as_storage, &loopback6, sizeof(loopback6));
  const bool has_ipv6 = CanBind(as_storage);
  const int ipv6 =
      ConnectSilently(reinterpret_cast<const sockaddr*>(&loopback6), sizeof(loopback6));
  // Where this machine has IPv6, 0.0.0.0 is dual-stack, as with gRPC's own listener.
  EXPECT_EQ(ipv6 >= 0, has_ipv6) << std::strerror(errno);
  if (ipv6 >= 0) close(ipv6);
}

}  // namespace
}  // namespace ledger
