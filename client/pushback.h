// Defines `RetryPushback`, which reads the server's `grpc-retry-pushback-ms` trailing metadata:
// how long a client should wait before retrying a call the server shed.
#ifndef LEDGER_CLIENT_PUSHBACK_H_
#define LEDGER_CLIENT_PUSHBACK_H_

#include <chrono>
#include <map>
#include <optional>

#include "grpcpp/support/string_ref.h"

namespace ledger {

// The trailing-metadata key, as gRPC's retry design (A6) names it.
inline constexpr char kRetryPushbackKey[] = "grpc-retry-pushback-ms";

// The wait the server asked for, or nullopt when the client must not retry: the key is absent,
// or its value is not a non-negative decimal integer (a negative value is how a server says
// "do not retry"; anything malformed is read the same way, as gRPC does). The first value counts
// when there are several. Pure; thread-safe.
std::optional<std::chrono::milliseconds> RetryPushback(
    const std::multimap<grpc::string_ref, grpc::string_ref>& trailing_metadata);

}  // namespace ledger

#endif  // LEDGER_CLIENT_PUSHBACK_H_
