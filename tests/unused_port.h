// Test helper: a loopback port nobody listens on now, for a process or a replica that must be
// told its address before it starts (a cluster's --peers). The kernel picks it; it is released
// for the caller to take, so another process could take it first: rare on a test machine.
#ifndef LEDGER_TESTS_UNUSED_PORT_H_
#define LEDGER_TESTS_UNUSED_PORT_H_

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace ledger::testing_util {

inline int UnusedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  close(fd);
  return ntohs(address.sin_port);
}

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_UNUSED_PORT_H_
