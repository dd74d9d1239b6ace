// OpenConnections and ChooseIdlest: which connections ledgerd's accept loop ends first when it
// must make room, checked on the pure choice and on real loopback TCP connections.
#include "server/open_connections.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/connection_acceptor.h"

namespace ledger {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

TEST(ChooseIdlestTest, ConnectionsThatNeverSpokeGoFirstOldestFirstThenTheLongestSilent) {
  const std::vector<ConnectionActivity> connections = {
      {.fd = 10, .spoke = true, .idle_ms = 9000},  {.fd = 11, .spoke = false, .idle_ms = 50},
      {.fd = 12, .spoke = true, .idle_ms = 2},     {.fd = 13, .spoke = false, .idle_ms = 700},
      {.fd = 14, .spoke = true, .idle_ms = 30000},
  };
  EXPECT_THAT(ChooseIdlest(connections, 1), ElementsAre(13));
  EXPECT_THAT(ChooseIdlest(connections, 3), ElementsAre(13, 11, 14));
  EXPECT_THAT(ChooseIdlest(connections, 5), ElementsAre(13, 11, 14, 10, 12));
}

TEST(ChooseIdlestTest, AskingForMoreThanThereAreGivesThemAllAndNoneGivesNone) {
  const std::vector<ConnectionActivity> connections = {{.fd = 3, .spoke = true, .idle_ms = 1},
                                                       {.fd = 4, .spoke = true, .idle_ms = 5}};
  EXPECT_THAT(ChooseIdlest(connections, 10), ElementsAre(4, 3));
  EXPECT_THAT(ChooseIdlest(connections, 0), IsEmpty());
  EXPECT_THAT(ChooseIdlest({}, 3), IsEmpty());
}

TEST(ChooseIdlestTest, TiesAreBrokenByDescriptorWhateverTheInputOrder) {
  const std::vector<ConnectionActivity> forward = {{.fd = 7, .spoke = true, .idle_ms = 100},
                                                   {.fd = 5, .spoke = true, .idle_ms = 100},
                                                   {.fd = 6, .spoke = true, .idle_ms = 100}};
  const std::vector<ConnectionActivity> backward(forward.rbegin(), forward.rend());
  EXPECT_THAT(ChooseIdlest(forward, 2), ElementsAre(5, 6));
  EXPECT_THAT(ChooseIdlest(backward, 2), ElementsAre(5, 6));
}

TEST(DefaultMaxConnectionsTest, KeepsAQuarterOfTheLimitAndAtLeast64DescriptorsForTheRest) {
  EXPECT_EQ(DefaultMaxConnections(1024), 768);
  EXPECT_EQ(DefaultMaxConnections(1048576), 786432);
  EXPECT_EQ(DefaultMaxConnections(200), 136);  // A quarter would be 50: 64 are kept.
  EXPECT_EQ(DefaultMaxConnections(64), 1);     // Nothing left: one connection still.
  EXPECT_EQ(DefaultMaxConnections(0), 1);
  EXPECT_EQ(DefaultMaxConnections(uint64_t{1} << 40), kMaxConnectionsBound.max);
}

// A loopback listener and connected pairs of TCP sockets: `client` is ours, `server` the
// accepted end that OpenConnections tracks.
class TcpPairs {
 public:
  TcpPairs() {
    listener_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    EXPECT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(listen(listener_, 64), 0);
    EXPECT_EQ(getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length), 0);
    address_ = address;
  }
  ~TcpPairs() {
    for (int fd : fds_) close(fd);
    close(listener_);
  }

  struct Pair {
    int client = -1;
    int server = -1;
  };
  Pair Connect() {
    Pair pair;
    pair.client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_EQ(connect(pair.client, reinterpret_cast<sockaddr*>(&address_), sizeof(address_)), 0);
    pair.server = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    EXPECT_GE(pair.server, 0);
    fds_.push_back(pair.client);
    fds_.push_back(pair.server);
    return pair;
  }
  void Forget(int fd) { std::erase(fds_, fd); }

 private:
  int listener_ = -1;
  sockaddr_in address_{};
  std::vector<int> fds_;
};

// Whether the peer of `client` ended the connection: a read returns end of file within a second.
bool EndedByPeer(int client) {
  pollfd ready{.fd = client, .events = POLLIN, .revents = 0};
  if (poll(&ready, 1, 1000) != 1) return false;
  std::array<char, 64> buffer{};
  while (true) {
    const ssize_t n = recv(client, buffer.data(), buffer.size(), MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0) return errno != EAGAIN;
  }
}

TEST(OpenConnectionsTest, ClosesTheSilentConnectionFirstAndLeavesTheDescriptorOpen) {
  TcpPairs pairs;
  OpenConnections open;
  const TcpPairs::Pair silent = pairs.Connect();
  const TcpPairs::Pair spoke_long_ago = pairs.Connect();
  const TcpPairs::Pair busy = pairs.Connect();
  for (const TcpPairs::Pair& each : {silent, spoke_long_ago, busy}) open.Add(each.server);
  ASSERT_EQ(send(spoke_long_ago.client, "x", 1, 0), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(send(busy.client, "y", 1, 0), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));

  EXPECT_EQ(open.CloseIdlest(1), 1U);
  EXPECT_TRUE(EndedByPeer(silent.client));
  EXPECT_EQ(open.size(), 2U);
  // shutdown(), not close(): the descriptor is still the owner's to close.
  EXPECT_EQ(fcntl(silent.server, F_GETFD), FD_CLOEXEC);

  EXPECT_EQ(open.CloseIdlest(1), 1U);
  EXPECT_TRUE(EndedByPeer(spoke_long_ago.client));
  EXPECT_EQ(open.size(), 1U);
  EXPECT_EQ(open.Prune(), 1U);
}

TEST(OpenConnectionsTest, CloseSilentEndsOnlyTheConnectionsWhoseClientsNeverSentAByte) {
  TcpPairs pairs;
  OpenConnections open;
  const TcpPairs::Pair silent_one = pairs.Connect();
  const TcpPairs::Pair spoke = pairs.Connect();
  const TcpPairs::Pair silent_two = pairs.Connect();
  for (const TcpPairs::Pair& each : {silent_one, spoke, silent_two}) open.Add(each.server);
  ASSERT_EQ(send(spoke.client, "PRI", 3, 0), 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));

  EXPECT_EQ(open.CloseSilent(), 2U);
  EXPECT_TRUE(EndedByPeer(silent_one.client));
  EXPECT_TRUE(EndedByPeer(silent_two.client));
  EXPECT_FALSE(EndedByPeer(spoke.client));
  EXPECT_EQ(open.Prune(), 1U);
}

TEST(OpenConnectionsTest, PruneForgetsClosedDescriptorsAndOnesReusedForAnotherSocket) {
  TcpPairs pairs;
  OpenConnections open;
  const TcpPairs::Pair first = pairs.Connect();
  const TcpPairs::Pair second = pairs.Connect();
  open.Add(first.server);
  open.Add(second.server);
  EXPECT_EQ(open.Prune(), 2U);

  close(first.server);  // As gRPC does when a connection ends.
  pairs.Forget(first.server);
  EXPECT_EQ(open.Prune(), 1U);

  // The number of a closed connection taken by another socket: tracked under its old inode, it
  // is not the connection it was, and must not be ended. (dup2 closes the old socket and gives
  // its number to the new one in one step.)
  open.Add(first.client);  // A connection that is still what it was, for contrast.
  const TcpPairs::Pair third = pairs.Connect();
  const int number = second.server;
  ASSERT_EQ(dup2(third.server, number), number);
  EXPECT_EQ(open.CloseIdlest(5), 1U);  // first.client only: `number` is another socket now.
  EXPECT_FALSE(EndedByPeer(third.client));
}

}  // namespace
}  // namespace ledger
