#include "server/open_connections.h"

// The kernel's struct tcp_info, which has tcpi_bytes_received; glibc's <netinet/tcp.h> stops
// before it (and the two headers cannot be included together: no file of server/ may include
// glibc's).
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <optional>
#include <utility>

namespace ledger {
namespace {

// What TCP_INFO says about `fd`; nullopt when it is not a TCP socket any more.
std::optional<ConnectionActivity> ActivityOf(int fd) {
  tcp_info info{};
  socklen_t length = sizeof(info);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) return std::nullopt;
  const bool has_bytes_received =
      length >= offsetof(tcp_info, tcpi_bytes_received) + sizeof(info.tcpi_bytes_received);
  // A kernel too old to count bytes (before 4.1): every connection counts as having spoken.
  return ConnectionActivity{.fd = fd,
                            .spoke = !has_bytes_received || info.tcpi_bytes_received > 0,
                            .idle_ms = info.tcpi_last_data_recv};
}

}  // namespace

std::vector<int> ChooseIdlest(std::vector<ConnectionActivity> connections, size_t count) {
  count = std::min(count, connections.size());
  const auto idler = [](const ConnectionActivity& a, const ConnectionActivity& b) {
    if (a.spoke != b.spoke) return !a.spoke;
    if (a.idle_ms != b.idle_ms) return a.idle_ms > b.idle_ms;
    return a.fd < b.fd;  // A total order, so that the choice does not depend on the input order.
  };
  std::partial_sort(connections.begin(), connections.begin() + static_cast<std::ptrdiff_t>(count),
                    connections.end(), idler);
  std::vector<int> chosen;
  chosen.reserve(count);
  for (size_t i = 0; i < count; ++i) chosen.push_back(connections[i].fd);
  return chosen;
}

void OpenConnections::Add(int fd) {
  struct stat status {};
  if (fstat(fd, &status) != 0) return;  // Not a descriptor: nothing to track.
  inodes_[fd] = status.st_ino;
}

bool OpenConnections::StillOpen(int fd, ino_t inode) {
  struct stat status {};
  return fstat(fd, &status) == 0 && S_ISSOCK(status.st_mode) && status.st_ino == inode;
}

size_t OpenConnections::Prune() {
  absl::erase_if(inodes_, [](const auto& entry) { return !StillOpen(entry.first, entry.second); });
  return inodes_.size();
}

std::vector<ConnectionActivity> OpenConnections::ActivityOfOpen() {
  std::vector<ConnectionActivity> activity;
  activity.reserve(inodes_.size());
  for (auto it = inodes_.begin(); it != inodes_.end();) {
    std::optional<ConnectionActivity> known =
        StillOpen(it->first, it->second) ? ActivityOf(it->first) : std::nullopt;
    if (!known.has_value()) {
      inodes_.erase(it++);
      continue;
    }
    activity.push_back(*known);
    ++it;
  }
  return activity;
}

size_t OpenConnections::Close(const std::vector<int>& fds) {
  size_t closed = 0;
  for (int fd : fds) {
    const auto entry = inodes_.find(fd);
    if (entry == inodes_.end()) continue;
    if (StillOpen(fd, entry->second) && shutdown(fd, SHUT_RDWR) == 0) ++closed;
    inodes_.erase(entry);
  }
  return closed;
}

size_t OpenConnections::CloseIdlest(size_t count, size_t open_at_least) {
  if (count == 0) return 0;
  std::vector<ConnectionActivity> activity = ActivityOfOpen();
  if (activity.size() < open_at_least) return 0;
  return Close(ChooseIdlest(std::move(activity), count));
}

size_t OpenConnections::CloseSilent() {
  std::vector<int> silent;
  for (const ConnectionActivity& each : ActivityOfOpen()) {
    if (!each.spoke) silent.push_back(each.fd);
  }
  return Close(silent);
}

}  // namespace ledger
