#include "server/transport_limits.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "grpcpp/resource_quota.h"

namespace ledger {
namespace {

// gRPC takes durations as int milliseconds.
int Milliseconds(absl::Duration duration) {
  const int64_t ms = absl::ToInt64Milliseconds(duration);
  return ms > std::numeric_limits<int>::max() ? std::numeric_limits<int>::max()
                                              : static_cast<int>(ms);
}

// The kernel's ceiling on a process's descriptors (/proc/sys/fs/nr_open; 1048576 when unreadable,
// the kernel's default).
rlim_t NrOpen() {
  std::ifstream file("/proc/sys/fs/nr_open");
  rlim_t value = 0;
  return (file >> value) && value > 0 ? value : rlim_t{1} << 20;
}

}  // namespace

absl::Status ValidateTransportLimits(const TransportLimits& limits) {
  for (const auto& [bound, value] :
       {std::pair<OptionBound, int64_t>{kMaxConcurrentStreamsBound, limits.max_concurrent_streams},
        {kTransportMemoryMbBound, limits.memory_mb},
        {kGrpcMaxThreadsBound, limits.max_threads},
        {kMaxReceiveMessageBytesBound, limits.max_receive_message_bytes}}) {
    if (absl::Status status = CheckOptionBound(bound, value); !status.ok()) return status;
  }
  for (const TransportDuration& duration : kTransportDurations) {
    if (absl::Status status =
            CheckDurationAtLeast(duration.flag, limits.*duration.field, kTransportDurationMin);
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

void ApplyTransportLimits(const TransportLimits& limits, grpc::ServerBuilder& builder) {
  LEDGER_CHECK(ValidateTransportLimits(limits).ok());
  grpc::ResourceQuota quota("ledgerd-transport");
  quota.Resize(static_cast<size_t>(limits.memory_mb) << 20);
  quota.SetMaxThreads(limits.max_threads);
  builder.SetResourceQuota(quota);
  builder.SetMaxReceiveMessageSize(limits.max_receive_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, limits.max_concurrent_streams);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             Milliseconds(limits.max_connection_idle));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                             Milliseconds(limits.max_connection_age));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                             Milliseconds(limits.max_connection_age_grace));
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             Milliseconds(limits.handshake_timeout));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, Milliseconds(limits.keepalive_time));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Milliseconds(limits.keepalive_timeout));
  // Keepalive enforcement: a client that pings more often than allowed gets two strikes, then
  // GOAWAY ENHANCE_YOUR_CALM.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             Milliseconds(limits.min_client_ping_interval));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2);
}

absl::StatusOr<OpenFileLimit> RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot read the open-file limit: ", std::strerror(errno)));
  }
  OpenFileLimit result{limit.rlim_cur, limit.rlim_cur, limit.rlim_max};
  rlim_t target = limit.rlim_max;
  // An unlimited hard limit cannot be the soft one: the kernel caps descriptors at nr_open.
  if (target == RLIM_INFINITY) target = NrOpen();
  if (limit.rlim_cur >= target) return result;
  limit.rlim_cur = target;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return absl::InternalError(absl::StrCat("cannot raise the open-file limit from ", result.before,
                                            " to ", result.hard, ": ", std::strerror(errno)));
  }
  result.after = limit.rlim_cur;
  return result;
}

uint64_t SoftOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024;
  return limit.rlim_cur == RLIM_INFINITY ? NrOpen() : limit.rlim_cur;
}

}  // namespace ledger
