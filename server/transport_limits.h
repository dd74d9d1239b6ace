// Defines `TransportLimits`, the bounds gRPC 1.51 can enforce on what one client's connections
// cost the server (streams, memory, message size, connection lifetime, pings, handshake time),
// the function that applies them to a grpc::ServerBuilder, and the start-up step that raises the
// open-file limit. What gRPC 1.51 cannot bound itself (HTTP/2 rapid reset, accept() after the
// descriptors run out) needs the proxy in deploy/haproxy/: see docs/deployment.md, "Exposure",
// and for rapid reset what each of these options did against it.
#ifndef LEDGER_SERVER_TRANSPORT_LIMITS_H_
#define LEDGER_SERVER_TRANSPORT_LIMITS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/option_bound.h"
#include "grpcpp/server_builder.h"

namespace ledger {

// Bounds of each field, named by ledgerd's flag for it; checked by ValidateTransportLimits and
// by ledgerd on the flag (base/option_bound.h).
inline constexpr OptionBound kMaxConcurrentStreamsBound{"--max_concurrent_streams", 1, 100'000};
inline constexpr OptionBound kTransportMemoryMbBound{"--transport_memory_mb", 16, 64 << 10};
inline constexpr OptionBound kGrpcMaxThreadsBound{"--grpc_max_threads", 2, 10'000};
inline constexpr OptionBound kMaxReceiveMessageBytesBound{"--max_receive_message_bytes", 1 << 10,
                                                          64 << 20};
// Each duration is at least this long.
inline constexpr absl::Duration kTransportDurationMin = absl::Milliseconds(1);

// A plain options struct; each field names the gRPC 1.51 mechanism that enforces it.
struct TransportLimits {
  // Calls one HTTP/2 connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS). Beyond
  // it the client must wait; a client that ignores the setting has its streams refused. A stream
  // the client resets stops counting at once, even while its call is still queued.
  int32_t max_concurrent_streams = 100;
  // Memory gRPC's transports and calls may hold (a grpc::ResourceQuota). Near it gRPC slows its
  // reads, drops new connections ("high memory pressure"), sends GOAWAY to a connection with no
  // stream open and cancels open streams.
  // NOTE: gRPC 1.51 charges the quota for a call's arena beyond its first zone only (about a
  // tenth of a call's memory), so it is no bound on the number of calls: a rapid reset goes far
  // past it (docs/deployment.md, "Rapid reset").
  int64_t memory_mb = 128;
  // Threads gRPC's synchronous services may use (the reflection service; the ledger itself is
  // served on the callback API): ResourceQuota::SetMaxThreads.
  int32_t max_threads = 64;
  // Largest request message accepted. Single-operation requests are a few hundred bytes; an
  // Apply call of kMaxApplyOperations operations with every field at its largest is about
  // 3.3 MB, so 4 MiB admits any valid request and nothing much larger.
  int32_t max_receive_message_bytes = 4 << 20;
  // A connection with no call in flight for this long is closed with GOAWAY.
  absl::Duration max_connection_idle = absl::Minutes(5);
  // Every connection is closed (GOAWAY, then `max_connection_age_grace` for calls in flight)
  // after this long, so that no client holds one forever and load rebalances.
  absl::Duration max_connection_age = absl::Minutes(30);
  absl::Duration max_connection_age_grace = absl::Seconds(30);
  // A connection that has not finished its HTTP/2 handshake in this long is closed: an idle TCP
  // connection that never speaks holds a descriptor no longer than this.
  absl::Duration handshake_timeout = absl::Seconds(10);
  // The server pings an idle connection every `keepalive_time` and closes it when the answer
  // takes longer than `keepalive_timeout`: dead peers release their descriptors.
  absl::Duration keepalive_time = absl::Minutes(1);
  absl::Duration keepalive_timeout = absl::Seconds(20);
  // Clients may ping no more often than this; after two pings sooner the connection is closed
  // (GOAWAY ENHANCE_YOUR_CALM).
  absl::Duration min_client_ping_interval = absl::Seconds(10);
};

// The flag of each duration field, in the order ValidateTransportLimits checks them.
struct TransportDuration {
  absl::string_view flag;
  absl::Duration TransportLimits::*field;
};
inline constexpr TransportDuration kTransportDurations[] = {
    {"--max_connection_idle", &TransportLimits::max_connection_idle},
    {"--max_connection_age", &TransportLimits::max_connection_age},
    {"--max_connection_age_grace", &TransportLimits::max_connection_age_grace},
    {"--handshake_timeout", &TransportLimits::handshake_timeout},
    {"--keepalive_time", &TransportLimits::keepalive_time},
    {"--keepalive_timeout", &TransportLimits::keepalive_timeout},
    {"--min_client_ping_interval", &TransportLimits::min_client_ping_interval},
};

// InvalidArgument naming (by its flag) the first field out of its bounds.
absl::Status ValidateTransportLimits(const TransportLimits& limits);

// Sets `limits` on `builder` as channel arguments and a ResourceQuota. `limits` must be valid.
void ApplyTransportLimits(const TransportLimits& limits, grpc::ServerBuilder& builder);

// The soft open-file limit before and after RaiseOpenFileLimit.
struct OpenFileLimit {
  uint64_t before = 0;
  uint64_t after = 0;
  uint64_t hard = 0;
};

// Raises this process's soft RLIMIT_NOFILE to its hard limit (to the kernel's nr_open when the
// hard limit is unlimited): each connection is a descriptor (see connection_acceptor.h).
// Internal when the limit cannot be read or set.
absl::StatusOr<OpenFileLimit> RaiseOpenFileLimit();

// This process's soft RLIMIT_NOFILE now (1024, the usual default, when it cannot be read).
uint64_t SoftOpenFileLimit();

}  // namespace ledger

#endif  // LEDGER_SERVER_TRANSPORT_LIMITS_H_
