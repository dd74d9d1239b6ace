// ListenerWatchdog: reads the accept queue from the kernel's socket table, and calls back when
// connections wait unaccepted, never when they are accepted.
#include "server/listener_watchdog.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace ledger {
namespace {

constexpr char kTable[] =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout "
    "inode\n"
    "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000003 00:00000000 00000000     0        0 "
    "11 1 0 100 0 0 10 0\n"
    "   1: 0100007F:1F91 0100007F:9C40 01 00000000:00000007 00:00000000 00000000     0        0 "
    "12 1 0 100 0 0 10 0\n";

TEST(AcceptQueueLengthTest, ReadsTheRxQueueOfTheListeningSocketOnThePort) {
  EXPECT_EQ(AcceptQueueLength(kTable, 0x1F90), 3);
}

TEST(AcceptQueueLengthTest, IgnoresSocketsThatAreNotListening) {
  EXPECT_EQ(AcceptQueueLength(kTable, 0x1F91), std::nullopt);
}

TEST(AcceptQueueLengthTest, IsEmptyForAPortNobodyListensOn) {
  EXPECT_EQ(AcceptQueueLength(kTable, 80), std::nullopt);
}

// A loopback socket listening on an ephemeral port; it never accepts unless told to.
struct Listener {
  Listener() {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (bind(fd, reinterpret_cast<sockaddr*>(&address), length) != 0 || listen(fd, 16) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      return;
    }
    port = ntohs(address.sin_port);
  }
  ~Listener() { close(fd); }
  int Connect() const {
    const int client = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(port));
    EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    return client;
  }
  int fd = -1;
  int port = 0;
};

TEST(ListenerWatchdogTest, CallsBackWhenAConnectionWaitsUnacceptedLongerThanTheLimit) {
  Listener listener;
  ASSERT_GT(listener.port, 0);
  const int client = listener.Connect();  // Never accepted.
  absl::Notification stuck;
  auto watchdog = ListenerWatchdog::Start(listener.port, absl::Milliseconds(20),
                                          absl::Milliseconds(100), [&stuck] { stuck.Notify(); });
  ASSERT_TRUE(watchdog.ok()) << watchdog.status();
  EXPECT_TRUE(stuck.WaitForNotificationWithTimeout(absl::Seconds(10)));
  close(client);
}

TEST(ListenerWatchdogTest, StaysSilentWhileEveryConnectionIsAccepted) {
  Listener listener;
  ASSERT_GT(listener.port, 0);
  std::atomic<int> calls{0};
  auto watchdog = ListenerWatchdog::Start(listener.port, absl::Milliseconds(20),
                                          absl::Milliseconds(100), [&calls] { ++calls; });
  ASSERT_TRUE(watchdog.ok()) << watchdog.status();
  for (int i = 0; i < 10; ++i) {  // 10 connections over 500 ms, each accepted at once.
    const int client = listener.Connect();
    const int accepted = accept(listener.fd, nullptr, nullptr);
    EXPECT_GE(accepted, 0);
    close(accepted);
    close(client);
    absl::SleepFor(absl::Milliseconds(50));
  }
  *watchdog = nullptr;  // Joins its thread.
  EXPECT_EQ(calls.load(), 0);
}

TEST(ListenerWatchdogTest, StaysSilentWhileConnectionsWaitButTheListenerKeepsAccepting) {
  Listener listener;
  ASSERT_GT(listener.port, 0);
  const int client = listener.Connect();  // Waits in the queue for the whole test.
  std::atomic<int64_t> accepted{0};
  std::atomic<int> calls{0};
  auto watchdog = ListenerWatchdog::Start(
      listener.port, absl::Milliseconds(20), absl::Seconds(1), [&calls] { ++calls; },
      [&accepted] { return accepted.load(); });
  ASSERT_TRUE(watchdog.ok()) << watchdog.status();
  for (int i = 0; i < 150; ++i) {  // 1.5 s, past the 1 s limit, of a loop accepting others.
    accepted.fetch_add(1);
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(calls.load(), 0);
  // Then it stops accepting: the same watchdog calls back.
  for (int i = 0; i < 500 && calls.load() == 0; ++i) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(calls.load(), 1);
  close(client);
}

}  // namespace
}  // namespace ledger
