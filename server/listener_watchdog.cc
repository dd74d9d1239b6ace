#include "server/listener_watchdog.h"

#include <fcntl.h>
#include <unistd.h>

#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "base/check.h"

namespace ledger {
namespace {

constexpr char kListenState[] = "0A";  // TCP_LISTEN in /proc/net/tcp's `st` column.

// The whole of a /proc file through a descriptor kept open: seq_file files are read again from
// offset 0 with fresh contents.
std::optional<std::string> ReadAgain(int fd) {
  if (fd < 0) return std::nullopt;
  std::string text;
  char buffer[16384];
  off_t offset = 0;
  for (int reads = 0; reads < 4096; ++reads) {  // Bound: 64 MiB of socket table.
    const ssize_t n = pread(fd, buffer, sizeof(buffer), offset);
    if (n < 0) return std::nullopt;
    if (n == 0) return text;
    text.append(buffer, static_cast<size_t>(n));
    offset += n;
  }
  return text;
}

}  // namespace

std::optional<int64_t> AcceptQueueLength(const std::string& table, int port) {
  for (absl::string_view line : absl::StrSplit(table, '\n')) {
    // sl local_address rem_address st tx_queue:rx_queue ...
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (fields.size() < 5 || fields[3] != kListenState) continue;
    const size_t colon = fields[1].rfind(':');
    uint32_t local_port = 0;
    if (colon == absl::string_view::npos ||
        !absl::SimpleHexAtoi(fields[1].substr(colon + 1), &local_port) ||
        local_port != static_cast<uint32_t>(port)) {
      continue;
    }
    const size_t queues_colon = fields[4].find(':');
    int64_t rx_queue = 0;
    if (queues_colon == absl::string_view::npos ||
        !absl::SimpleHexAtoi(fields[4].substr(queues_colon + 1), &rx_queue)) {
      return std::nullopt;
    }
    return rx_queue;
  }
  return std::nullopt;
}

absl::StatusOr<std::unique_ptr<ListenerWatchdog>> ListenerWatchdog::Start(
    int port, absl::Duration interval, absl::Duration stuck_for, std::function<void()> on_stuck,
    std::function<int64_t()> accepted) {
  LEDGER_CHECK(port > 0);
  LEDGER_CHECK(interval > absl::ZeroDuration());
  const int tcp_fd = open("/proc/net/tcp", O_RDONLY | O_CLOEXEC);
  const int tcp6_fd = open("/proc/net/tcp6", O_RDONLY | O_CLOEXEC);
  if (tcp_fd < 0 && tcp6_fd < 0) {
    return absl::UnavailableError(
        "cannot read /proc/net/tcp or /proc/net/tcp6: the listener watchdog is off");
  }
  std::unique_ptr<ListenerWatchdog> watchdog(new ListenerWatchdog(
      port, interval, stuck_for, std::move(on_stuck), std::move(accepted), tcp_fd, tcp6_fd));
  watchdog->thread_ = std::thread([w = watchdog.get()] { w->Run(); });
  return watchdog;
}

ListenerWatchdog::ListenerWatchdog(int port, absl::Duration interval, absl::Duration stuck_for,
                                   std::function<void()> on_stuck,
                                   std::function<int64_t()> accepted, int tcp_fd, int tcp6_fd)
    : port_(port),
      interval_(interval),
      stuck_for_(stuck_for),
      on_stuck_(std::move(on_stuck)),
      accepted_(std::move(accepted)),
      tcp_fd_(tcp_fd),
      tcp6_fd_(tcp6_fd) {}

ListenerWatchdog::~ListenerWatchdog() {
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
  if (tcp_fd_ >= 0) close(tcp_fd_);
  if (tcp6_fd_ >= 0) close(tcp6_fd_);
}

std::optional<int64_t> ListenerWatchdog::ReadQueue() const {
  for (int fd : {tcp_fd_, tcp6_fd_}) {
    std::optional<std::string> table = ReadAgain(fd);
    if (!table.has_value()) continue;
    if (std::optional<int64_t> queue = AcceptQueueLength(*table, port_)) return queue;
  }
  return std::nullopt;
}

void ListenerWatchdog::Run() {
  bool waiting = false;  // Connections wait in the accept queue, since `waiting_since`.
  SteadyTime waiting_since;
  int64_t accepted_then = 0;
  while (!stop_.WaitForNotificationWithTimeout(interval_)) {
    const std::optional<int64_t> queue = ReadQueue();
    if (!queue.has_value() || *queue == 0) {
      waiting = false;
      continue;
    }
    const SteadyTime now = SteadyNow();
    const int64_t accepted = accepted_ ? accepted_() : 0;
    // Connections wait, but some were accepted since the last check: a slow loop, not a dead one.
    if (!waiting || accepted != accepted_then) {
      waiting = true;
      waiting_since = now;
      accepted_then = accepted;
    }
    if (absl::FromChrono(now - waiting_since) >= stuck_for_) {
      on_stuck_();
      return;
    }
  }
}

}  // namespace ledger
