// delay_proxy: a TCP relay that delivers every byte a fixed delay after it was read, in both
// directions. It stands in for `tc qdisc add ... netem delay` on a kernel built without
// sch_netem (this project's machines), so that the replication spike of issue 17, the cluster
// benchmarks and the cluster fault schedule see a network round trip between replicas instead
// of loopback's few microseconds.
//
//   delay_proxy LISTEN_HOST:PORT TARGET_HOST:PORT DELAY_US [COUNT]
//
// With COUNT (default 1) it relays COUNT consecutive ports: LISTEN PORT + i to TARGET PORT + i,
// for a replica that runs one Raft group per partition, each on a port of its own (shape_bench).
//
// Each accepted connection opens one to the target and gets two directions; each direction is a
// reader thread (timestamps chunks as they arrive) and a writer thread (sends each chunk once its
// time has come). The delay is added to the network's own, never instead of it; there is no loss,
// reordering or rate limit. Thread-per-direction is fine for the handful of long-lived connections
// a three-replica cluster opens; it is not a general-purpose proxy.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Endpoint {
  std::string host;
  std::string port;
};

bool ParseEndpoint(const std::string& text, Endpoint* out) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return false;
  out->host = text.substr(0, colon);
  out->port = text.substr(colon + 1);
  return true;
}

int64_t MonotonicNanos() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

void SleepUntil(int64_t deadline_ns) {
  const timespec deadline{static_cast<time_t>(deadline_ns / 1'000'000'000),
                          static_cast<long>(deadline_ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nullptr) == EINTR) {
  }
}

void SetNoDelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

struct Chunk {
  int64_t due_ns;
  std::string bytes;
};

// One direction of a connection: bytes read from `from` are written to `to` at due time. When
// either side ends, both sockets are shut down so that the peer direction ends too.
class Direction {
 public:
  Direction(int from, int to, int64_t delay_ns) : from_(from), to_(to), delay_ns_(delay_ns) {}

  void Run() {
    std::thread writer([this] { WriteLoop(); });
    ReadLoop();
    writer.join();
  }

 private:
  void ReadLoop() {
    char buffer[64 * 1024];
    while (true) {
      const ssize_t n = read(from_, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      const int64_t due = MonotonicNanos() + delay_ns_;
      std::lock_guard<std::mutex> lock(mu_);
      if (n <= 0) {
        done_ = true;
        cv_.notify_one();
        return;
      }
      queue_.push_back(Chunk{due, std::string(buffer, static_cast<size_t>(n))});
      cv_.notify_one();
    }
  }

  void WriteLoop() {
    while (true) {
      Chunk chunk;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty() || done_; });
        if (queue_.empty()) break;  // done_ and nothing left to deliver
        chunk = std::move(queue_.front());
        queue_.pop_front();
      }
      SleepUntil(chunk.due_ns);
      size_t sent = 0;
      while (sent < chunk.bytes.size()) {
        const ssize_t n = write(to_, chunk.bytes.data() + sent, chunk.bytes.size() - sent);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          shutdown(from_, SHUT_RDWR);  // the reader sees the end and stops
          return;
        }
        sent += static_cast<size_t>(n);
      }
    }
    shutdown(to_, SHUT_WR);  // pass the end of stream on, after the last delayed byte
  }

  const int from_;
  const int to_;
  const int64_t delay_ns_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Chunk> queue_;
  bool done_ = false;
};

int ConnectTo(const Endpoint& target) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (getaddrinfo(target.host.c_str(), target.port.c_str(), &hints, &result) != 0) return -1;
  int fd = -1;
  for (addrinfo* ai = result; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(result);
  return fd;
}

int ListenOn(const Endpoint& listen_at) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* result = nullptr;
  if (getaddrinfo(listen_at.host.c_str(), listen_at.port.c_str(), &hints, &result) != 0) {
    return -1;
  }
  int fd = socket(result->ai_family, result->ai_socktype, result->ai_protocol);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (fd < 0 || bind(fd, result->ai_addr, result->ai_addrlen) != 0 || listen(fd, 64) != 0) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
  freeaddrinfo(result);
  return fd;
}

void Relay(int client, const Endpoint& target, int64_t delay_ns) {
  const int upstream = ConnectTo(target);
  if (upstream < 0) {
    std::fprintf(stderr, "delay_proxy: cannot connect to %s:%s: %s\n", target.host.c_str(),
                 target.port.c_str(), std::strerror(errno));
    close(client);
    return;
  }
  SetNoDelay(client);
  SetNoDelay(upstream);
  Direction forward(client, upstream, delay_ns);
  Direction backward(upstream, client, delay_ns);
  std::thread back([&backward] { backward.Run(); });
  forward.Run();
  back.join();
  close(client);
  close(upstream);
}

}  // namespace

// Accepts on `listener` for ever, relaying each connection to `target`.
void AcceptLoop(int listener, const Endpoint& target, int64_t delay_ns) {
  while (true) {
    const int client = accept(listener, nullptr, nullptr);
    if (client < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      std::fprintf(stderr, "delay_proxy: accept: %s\n", std::strerror(errno));
      std::exit(1);
    }
    std::thread([client, target, delay_ns] { Relay(client, target, delay_ns); }).detach();
  }
}

int main(int argc, char** argv) {
  Endpoint listen_at;
  Endpoint target;
  if ((argc != 4 && argc != 5) || !ParseEndpoint(argv[1], &listen_at) ||
      !ParseEndpoint(argv[2], &target)) {
    std::fprintf(stderr, "usage: delay_proxy LISTEN_HOST:PORT TARGET_HOST:PORT DELAY_US [COUNT]\n");
    return 2;
  }
  char* end = nullptr;
  const long delay_us = std::strtol(argv[3], &end, 10);
  if (*end != '\0' || delay_us < 0 || delay_us > 10'000'000) {
    std::fprintf(stderr, "delay_proxy: DELAY_US must be 0..10000000, got '%s'\n", argv[3]);
    return 2;
  }
  long count = 1;
  if (argc == 5) {
    count = std::strtol(argv[4], &end, 10);
    if (*end != '\0' || count < 1 || count > 1024) {
      std::fprintf(stderr, "delay_proxy: COUNT must be 1..1024, got '%s'\n", argv[4]);
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);  // a vanished peer is a write error, not the end of the proxy
  const int64_t delay_ns = int64_t{delay_us} * 1000;
  std::vector<std::thread> acceptors;
  for (long i = 0; i < count; ++i) {
    Endpoint from = listen_at;
    Endpoint to = target;
    from.port = std::to_string(std::stol(listen_at.port) + i);
    to.port = std::to_string(std::stol(target.port) + i);
    const int listener = ListenOn(from);
    if (listener < 0) {
      std::fprintf(stderr, "delay_proxy: cannot listen on %s:%s: %s\n", from.host.c_str(),
                   from.port.c_str(), std::strerror(errno));
      return 1;
    }
    acceptors.emplace_back(AcceptLoop, listener, to, delay_ns);
  }
  for (std::thread& acceptor : acceptors) acceptor.join();
  return 0;
}
