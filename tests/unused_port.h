// Test helper: a loopback port nobody listens on now, for a process or a replica that must be
// told its address before it starts (a cluster's --peers). It is released for the caller to
// take, so it is chosen where little else can take it first: at random below Linux's ephemeral
// range (32768 and up), from which the kernel gives out every outgoing connection's local port
// and every bind to port 0. Picked by the kernel instead, a replica's Raft port was taken by a
// load test's connection before the replica bound it (raft_start: I/O error, under ASan in CI).
#ifndef LEDGER_TESTS_UNUSED_PORT_H_
#define LEDGER_TESTS_UNUSED_PORT_H_

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <random>
#include <set>
#include <string>

#include "gtest/gtest.h"

namespace ledger::testing_util {

inline constexpr int kUnusedPortLow = 20000;
inline constexpr int kUnusedPortHigh = 32767;  // The ephemeral range starts above.

// Whether `port` on loopback can be bound now.
inline bool PortIsFree(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  close(fd);
  return bound;
}

// Whether this process now holds `port` against every other test process: an exclusive lock on
// a file named after it, kept until the process exits (the kernel drops it then, however it
// ends). Two test programs running at once (ctest -j) would otherwise pick the same port now and
// then, and a replica would find another test's ledgerd where its peer should be (a replica
// checks, at its start, that its peers hold its ledger: CI under ASan).
inline bool ReservePortForThisProcess(int port) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "ledger-test-ports";
  std::error_code ignored;
  std::filesystem::create_directories(dir, ignored);
  const int fd = open((dir / std::to_string(port)).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return true;  // No lock to be had here: the port check alone decides.
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return false;
  }
  return true;  // The descriptor stays open: the lock lasts as long as the process.
}

// Never the same port twice in one process (a cluster's three are picked before any is bound),
// nor one another test process holds.
inline int UnusedPort() {
  static std::mutex mu;
  static std::mt19937 random{std::random_device{}()};
  static std::set<int> given;
  const std::lock_guard<std::mutex> lock(mu);
  std::uniform_int_distribution<int> pick(kUnusedPortLow, kUnusedPortHigh);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = pick(random);
    if (given.count(port) == 0 && PortIsFree(port) && ReservePortForThisProcess(port)) {
      given.insert(port);
      return port;
    }
  }
  ADD_FAILURE() << "no free loopback port in " << kUnusedPortLow << "-" << kUnusedPortHigh;
  return 0;
}

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_UNUSED_PORT_H_
