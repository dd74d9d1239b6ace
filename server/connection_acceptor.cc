#include "server/connection_acceptor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
// TCP_NODELAY from the kernel's header, as open_connections.cc needs it (glibc's <netinet/tcp.h>
// cannot be included beside it, and the unity build may put the two files together).
#include <linux/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/check.h"
#include "base/log_rate_limiter.h"
#include "cli/host_port.h"

namespace ledger {
namespace {

// How often, at most, running out of descriptors closes another batch of idle connections: gRPC
// needs a moment to close the last batch before their descriptors are free.
constexpr absl::Duration kOutOfDescriptorsCloseInterval = absl::Milliseconds(100);
// Accepts per wake-up and listener, so that one busy listener cannot starve the others or Stop.
constexpr int kAcceptsPerWake = 64;
// The descriptors kept from connections by DefaultMaxConnections: a quarter of the limit, and at
// least this many.
constexpr uint64_t kDescriptorsKeptMin = 64;
// The most connections one closing ends.
constexpr size_t kCloseBatchMax = 64;

// One socket address to listen on, and whether it takes IPv4 too (a dual-stack wildcard).
struct ListenAddress {
  sockaddr_storage address{};
  socklen_t length = 0;
  bool dual_stack = false;
};

void SetPort(ListenAddress& where, int port) {
  if (where.address.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&where.address)->sin6_port = htons(static_cast<uint16_t>(port));
  } else {
    reinterpret_cast<sockaddr_in*>(&where.address)->sin_port = htons(static_cast<uint16_t>(port));
  }
}

ListenAddress Wildcard(int family) {
  ListenAddress where;
  if (family == AF_INET6) {
    auto* ipv6 = reinterpret_cast<sockaddr_in6*>(&where.address);
    ipv6->sin6_family = AF_INET6;
    ipv6->sin6_addr = in6addr_any;
    where.length = sizeof(sockaddr_in6);
    where.dual_stack = true;
  } else {
    auto* ipv4 = reinterpret_cast<sockaddr_in*>(&where.address);
    ipv4->sin_family = AF_INET;
    ipv4->sin_addr.s_addr = htonl(INADDR_ANY);
    where.length = sizeof(sockaddr_in);
  }
  return where;
}

// Whether `where` is the any-address of its family (0.0.0.0, ::, however it was spelled).
bool IsWildcard(const ListenAddress& where) {
  if (where.address.ss_family == AF_INET6) {
    const in6_addr& ipv6 = reinterpret_cast<const sockaddr_in6*>(&where.address)->sin6_addr;
    return std::memcmp(&ipv6, &in6addr_any, sizeof(ipv6)) == 0;
  }
  return reinterpret_cast<const sockaddr_in*>(&where.address)->sin_addr.s_addr == htonl(INADDR_ANY);
}

// Every address `host` resolves to, once each (gRPC listens on all of them); a wildcard of
// either family becomes the one dual-stack wildcard.
absl::StatusOr<std::vector<ListenAddress>> Resolve(const std::string& host,
                                                   const std::string& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (const int error = getaddrinfo(host.c_str(), nullptr, &hints, &found); error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, ": ", gai_strerror(error)));
  }
  std::vector<ListenAddress> addresses;
  for (const addrinfo* each = found; each != nullptr; each = each->ai_next) {
    if (each->ai_family != AF_INET && each->ai_family != AF_INET6) continue;
    ListenAddress where;
    std::memcpy(&where.address, each->ai_addr, each->ai_addrlen);
    where.length = each->ai_addrlen;
    if (IsWildcard(where)) where = Wildcard(AF_INET6);
    const bool seen = std::any_of(addresses.begin(), addresses.end(), [&](const auto& other) {
      return other.length == where.length &&
             std::memcmp(&other.address, &where.address, where.length) == 0;
    });
    if (!seen) addresses.push_back(where);
  }
  freeaddrinfo(found);
  return addresses;
}

// TCP_USER_TIMEOUT as gRPC sets it on its listeners: unacknowledged data older than this ends
// the connection, so that a vanished peer releases its descriptor. Zero leaves it unset.
bool SetUserTimeout(int fd, absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) return true;
  const auto milliseconds = static_cast<unsigned int>(absl::ToInt64Milliseconds(timeout));
  return setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &milliseconds, sizeof(milliseconds)) == 0;
}

// A listening socket on `where`; -1 with `error` set when it cannot be had.
int ListenOn(const ListenAddress& where, absl::Duration user_timeout, int& error) {
  const int fd = socket(where.address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = errno;
    return -1;
  }
  const int one = 1;
  const int v6_only = where.dual_stack ? 0 : 1;
  // TCP_NODELAY as gRPC sets it; accepted sockets inherit it.
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0 ||
      !SetUserTimeout(fd, user_timeout) ||
      (where.address.ss_family == AF_INET6 &&
       setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6_only, sizeof(v6_only)) != 0) ||
      bind(fd, reinterpret_cast<const sockaddr*>(&where.address), where.length) != 0 ||
      listen(fd, SOMAXCONN) != 0) {
    error = errno;
    close(fd);
    return -1;
  }
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) return 0;
  return ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

std::string Printable(const ListenAddress& where) {
  char text[INET6_ADDRSTRLEN] = "?";
  const void* raw = where.address.ss_family == AF_INET6
                        ? static_cast<const void*>(
                              &reinterpret_cast<const sockaddr_in6*>(&where.address)->sin6_addr)
                        : static_cast<const void*>(
                              &reinterpret_cast<const sockaddr_in*>(&where.address)->sin_addr);
  inet_ntop(where.address.ss_family, raw, text, sizeof(text));
  return where.address.ss_family == AF_INET6 ? absl::StrCat("[", text, "]") : std::string(text);
}

std::string ListenError(int error) {
  switch (error) {
    case EADDRINUSE:
      return "the port is in use";
    case EADDRNOTAVAIL:
      return "the address is not one of this machine's";
    case EACCES:
      return "permission denied (ports below 1024 need root)";
    default:
      return std::strerror(error);
  }
}

LogRateLimiter& AcceptLogs() {
  static LogRateLimiter* const limiter = new LogRateLimiter(1);
  return *limiter;
}

}  // namespace

int64_t DefaultMaxConnections(uint64_t open_file_limit) {
  const uint64_t kept = std::max(kDescriptorsKeptMin, open_file_limit / 4);
  const uint64_t connections = open_file_limit > kept ? open_file_limit - kept : 0;
  const auto most = static_cast<uint64_t>(kMaxConnectionsBound.max);
  return static_cast<int64_t>(std::clamp<uint64_t>(connections, 1, most));
}

absl::StatusOr<std::unique_ptr<ConnectionAcceptor>> ConnectionAcceptor::Listen(
    const std::string& address, int64_t max_connections, absl::Duration tcp_user_timeout) {
  LEDGER_CHECK(max_connections >= 1 && max_connections <= kMaxConnectionsBound.max);
  absl::StatusOr<cli::HostPort> parsed =
      cli::ParseHostPort("--listen", address, cli::AddressUse::kListen, 0);
  if (!parsed.ok()) return parsed.status();
  absl::StatusOr<std::vector<ListenAddress>> addresses = Resolve(parsed->host, address);
  if (!addresses.ok()) return addresses.status();
  std::vector<int> listeners;
  std::vector<std::string> unbound;
  int port = parsed->port;
  int error = 0;
  for (ListenAddress& where : *addresses) {
    SetPort(where, port);
    int fd = ListenOn(where, tcp_user_timeout, error);
    if (fd < 0 && where.dual_stack) {  // No IPv6 here, or [::] taken: IPv4 alone, as gRPC does.
      ListenAddress ipv4 = Wildcard(AF_INET);
      SetPort(ipv4, port);
      fd = ListenOn(ipv4, tcp_user_timeout, error);
    }
    if (fd < 0) {  // As gRPC: serve on the addresses that could be bound, and say which not.
      unbound.push_back(absl::StrCat(Printable(where), ": ", ListenError(error)));
      continue;
    }
    listeners.push_back(fd);
    if (port == 0) port = BoundPort(fd);  // The others share the port chosen for the first.
  }
  if (listeners.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", address, ": ",
        addresses->empty() ? "the host has no IPv4 or IPv6 address" : ListenError(error)));
  }
  if (!unbound.empty()) {
    std::cerr << "ledgerd: --listen=" << address << " listens on " << listeners.size() << " of the "
              << addresses->size() << " addresses it names; not on " << absl::StrJoin(unbound, ", ")
              << "\n";
  }
  const int wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    const int wake_error = errno;
    for (int fd : listeners) close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, ": eventfd: ", std::strerror(wake_error)));
  }
  return std::unique_ptr<ConnectionAcceptor>(new ConnectionAcceptor(
      std::move(listeners), port, wake_fd, max_connections, tcp_user_timeout));
}

ConnectionAcceptor::ConnectionAcceptor(std::vector<int> listeners, int port, int wake_fd,
                                       int64_t max_connections, absl::Duration tcp_user_timeout)
    : listeners_(std::move(listeners)),
      port_(port),
      wake_fd_(wake_fd),
      max_connections_(max_connections),
      tcp_user_timeout_(tcp_user_timeout),
      close_batch_(
          std::clamp<size_t>(static_cast<size_t>(max_connections / 256), 1, kCloseBatchMax)) {
  TakeReserve();
}

ConnectionAcceptor::~ConnectionAcceptor() { Stop(); }

void ConnectionAcceptor::Start(
    std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> handoff) {
  LEDGER_CHECK(!thread_.joinable() && !stopped_ && handoff != nullptr);
  handoff_ = std::move(handoff);
  thread_ = std::thread([this] { Run(); });
}

void ConnectionAcceptor::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (thread_.joinable()) {
    const uint64_t one = 1;
    LEDGER_CHECK(write(wake_fd_, &one, sizeof(one)) == sizeof(one));
    thread_.join();
  }
  for (int fd : listeners_) close(fd);
  open_.CloseSilent();
  if (reserve_fd_ >= 0) close(reserve_fd_);
  reserve_fd_ = -1;
  close(wake_fd_);
  handoff_.reset();
}

ConnectionCounts ConnectionAcceptor::counts() const {
  return ConnectionCounts{
      .open = open_count_.load(std::memory_order_relaxed),
      .max = max_connections_,
      .accepted = accepted_.load(std::memory_order_relaxed),
      .closed_at_limit = closed_at_limit_.load(std::memory_order_relaxed),
      .closed_out_of_descriptors = closed_out_of_descriptors_.load(std::memory_order_relaxed),
      .out_of_descriptors = out_of_descriptors_.load(std::memory_order_relaxed)};
}

bool ConnectionAcceptor::TakeReserve() {
  if (reserve_fd_ < 0) reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  return reserve_fd_ >= 0;
}

void ConnectionAcceptor::Run() {
  std::vector<pollfd> polled;
  polled.push_back(pollfd{.fd = wake_fd_, .events = POLLIN, .revents = 0});
  for (int fd : listeners_) polled.push_back(pollfd{.fd = fd, .events = POLLIN, .revents = 0});
  SteadyTime next_prune = SteadyNow() + SteadyTimeout(kConnectionPruneInterval);
  while (true) {
    // Out of descriptors with the reserve spent, or out of kernel memory: a waiting connection
    // would wake every poll at once and fail accept() again. Wait on Stop alone for a moment,
    // then look at the listeners without waiting.
    const bool starved = !TakeReserve();
    const bool backing_off = starved || SteadyNow() < back_off_until_;
    // The reserve cannot be taken back until a descriptor is free. Closing only when accept()
    // fails would wait for the next client, and leave the storage and /metrics without any.
    if (starved) CloseIdlestToFreeDescriptors();
    const absl::Duration wait =
        backing_off ? kOutOfDescriptorsRetry
                    : std::max(absl::ZeroDuration(), absl::FromChrono(next_prune - SteadyNow()));
    for (pollfd& each : polled) each.revents = 0;
    const int ready = poll(polled.data(), backing_off ? 1 : polled.size(),
                           static_cast<int>(absl::ToInt64Milliseconds(wait)) + 1);
    if (ready < 0 && errno != EINTR) {  // ENOMEM: nothing to do but wait.
      back_off_until_ = SteadyNow() + SteadyTimeout(kOutOfDescriptorsRetry);
      continue;
    }
    if (polled[0].revents != 0) return;  // Stop.
    if (backing_off && SteadyNow() >= back_off_until_) {
      poll(polled.data() + 1, polled.size() - 1, 0);
    }
    for (size_t i = 1; i < polled.size(); ++i) {
      if ((polled[i].revents & (POLLIN | POLLERR)) != 0) AcceptFrom(polled[i].fd);
    }
    if (SteadyNow() >= next_prune) {
      open_count_.store(static_cast<int64_t>(open_.Prune()), std::memory_order_relaxed);
      next_prune = SteadyNow() + SteadyTimeout(kConnectionPruneInterval);
    }
  }
}

size_t ConnectionAcceptor::CloseIdlestToFreeDescriptors() {
  const SteadyTime now = SteadyNow();
  if (last_out_of_descriptors_close_.has_value() &&
      now - *last_out_of_descriptors_close_ < SteadyTimeout(kOutOfDescriptorsCloseInterval)) {
    return 0;
  }
  last_out_of_descriptors_close_ = now;
  const size_t closed = open_.CloseIdlest(close_batch_);
  closed_out_of_descriptors_.fetch_add(static_cast<int64_t>(closed), std::memory_order_relaxed);
  return closed;
}

void ConnectionAcceptor::AcceptFrom(int listener) {
  for (int accepts = 0; accepts < kAcceptsPerWake; ++accepts) {
    const int fd = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      Admit(listener, fd);
      continue;
    }
    switch (errno) {
      case EINTR:
      case ECONNABORTED:  // That client gave up; the next may be waiting.
      case EPROTO:
        continue;
      case EMFILE:
      case ENFILE:
        OnOutOfDescriptors(listener, errno);
        return;
      case ENOBUFS:
      case ENOMEM:
        // Kernel memory, not descriptors: closing connections or the reserve would not help.
        out_of_descriptors_.fetch_add(1, std::memory_order_relaxed);
        back_off_until_ = SteadyNow() + SteadyTimeout(kOutOfDescriptorsRetry);
        LogAcceptFailure(errno);
        return;
      case EAGAIN:
        return;
      default:
        if (std::optional<int64_t> dropped = AcceptLogs().Admit(); dropped.has_value()) {
          std::cerr << "ledgerd: accept() on the gRPC port failed: " << std::strerror(errno)
                    << (*dropped > 0 ? absl::StrCat(" (", *dropped, " lines like it dropped)") : "")
                    << "\n";
        }
        return;
    }
  }
}

void ConnectionAcceptor::LogAcceptFailure(int error) {
  if (std::optional<int64_t> dropped = AcceptLogs().Admit(); dropped.has_value()) {
    std::cerr << "ledgerd: accept() on the gRPC port failed: " << std::strerror(error)
              << (*dropped > 0 ? absl::StrCat(" (", *dropped, " lines like it dropped)") : "")
              << "\n";
  }
}

void ConnectionAcceptor::Admit(int listener, int fd) {
  SetUserTimeout(fd, tcp_user_timeout_);  // Inherited from the listener too; kept explicit.
  const auto max = static_cast<size_t>(max_connections_);
  if (open_.size() >= max) {  // Some may be closed already: CloseIdlest counts them first.
    closed_at_limit_.fetch_add(static_cast<int64_t>(open_.CloseIdlest(close_batch_, max)),
                               std::memory_order_relaxed);
  }
  open_.Add(fd);
  open_count_.store(static_cast<int64_t>(open_.size()), std::memory_order_relaxed);
  accepted_.fetch_add(1, std::memory_order_relaxed);
  grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters connection;
  connection.listener_fd = listener;
  connection.fd = fd;  // gRPC's from here on: it closes it.
  handoff_->HandleNewConnection(&connection);
}

void ConnectionAcceptor::OnOutOfDescriptors(int listener, int error) {
  out_of_descriptors_.fetch_add(1, std::memory_order_relaxed);
  const size_t closed = CloseIdlestToFreeDescriptors();
  bool used_reserve = false;
  if (reserve_fd_ >= 0) {
    close(reserve_fd_);
    reserve_fd_ = -1;
    used_reserve = true;
    const int fd = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) Admit(listener, fd);
  }
  if (std::optional<int64_t> dropped = AcceptLogs().Admit(); dropped.has_value()) {
    std::cerr << "ledgerd: accept() on the gRPC port failed: " << std::strerror(error) << " with "
              << open_.size() << " client connections open (--max_connections=" << max_connections_
              << "); closed the " << closed << " idlest"
              << (used_reserve ? " and accepted the waiting one with the reserve descriptor" : "")
              << (*dropped > 0 ? absl::StrCat(" (", *dropped, " lines like it dropped)") : "")
              << "\n";
  }
}

}  // namespace ledger
