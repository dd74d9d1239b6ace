// Defines `ListenerWatchdog`, which notices when nothing accepts connections on the listening
// port while clients wait to be accepted.
//
// Why: a listener that stops accepting leaves every new connection waiting in the kernel's accept
// queue while health still answers SERVING on the connections that exist. gRPC 1.51's own did so
// for good after accept() failed once with EMFILE (CVE-2023-4785); ledgerd's accept loop
// (connection_acceptor.h) serves through that, and this watchdog remains the last resort should
// the loop itself stop. The watchdog reads the accept queue of the listening socket from
// /proc/net/tcp{,6} (the kernel reports it as the LISTEN socket's rx_queue) once a second: a queue
// that stays non-empty for `stuck_for` means nobody is accepting. Descriptor-free at check time:
// the two /proc files are opened once at start and re-read from offset 0.
#ifndef LEDGER_SERVER_LISTENER_WATCHDOG_H_
#define LEDGER_SERVER_LISTENER_WATCHDOG_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/steady_wait.h"

namespace ledger {

// How many connections wait in the accept queue of the TCP socket listening on `port`, read from
// the /proc/net/tcp or /proc/net/tcp6 text in `table`; nullopt when no socket listens on `port`.
// Pure: exposed for tests.
std::optional<int64_t> AcceptQueueLength(const std::string& table, int port);

// Thread-safe: Start and the destructor from one controlling thread; `on_stuck` and `accepted`
// run on the watchdog's own thread.
class ListenerWatchdog {
 public:
  // Opens /proc/net/tcp and /proc/net/tcp6 (Unavailable when neither can be read) and checks the
  // socket listening on `port` every `interval`; calls `on_stuck` once when connections have
  // waited unaccepted at every check for `stuck_for` while `accepted` (how many connections the
  // listener has accepted so far; null when unknown) has not moved: a loop that accepts slowly,
  // behind a flood, is not stuck.
  static absl::StatusOr<std::unique_ptr<ListenerWatchdog>> Start(
      int port, absl::Duration interval, absl::Duration stuck_for, std::function<void()> on_stuck,
      std::function<int64_t()> accepted = nullptr);

  ~ListenerWatchdog();

  ListenerWatchdog(const ListenerWatchdog&) = delete;
  ListenerWatchdog& operator=(const ListenerWatchdog&) = delete;

 private:
  ListenerWatchdog(int port, absl::Duration interval, absl::Duration stuck_for,
                   std::function<void()> on_stuck, std::function<int64_t()> accepted, int tcp_fd,
                   int tcp6_fd);

  // The accept queue length of our listening socket now; nullopt when it cannot be read.
  std::optional<int64_t> ReadQueue() const;
  void Run();

  const int port_;
  const absl::Duration interval_;
  const absl::Duration stuck_for_;
  const std::function<void()> on_stuck_;
  const std::function<int64_t()> accepted_;
  const int tcp_fd_;
  const int tcp6_fd_;
  SteadyNotification stop_;
  std::thread thread_;
};

}  // namespace ledger

#endif  // LEDGER_SERVER_LISTENER_WATCHDOG_H_
