// Defines the canonical names of gRPC's status codes, the one table that metric labels and the
// command-line clients print. Header-only and free of gRPC types (codes are plain ints 0-16), so
// it lives in base/, which both the server's metrics and the clients may include.
#ifndef LEDGER_BASE_STATUS_CODE_NAMES_H_
#define LEDGER_BASE_STATUS_CODE_NAMES_H_

#include <array>
#include <cstddef>

namespace ledger {

inline constexpr size_t kStatusCodeCount = 17;

inline constexpr std::array<const char*, kStatusCodeCount> kStatusCodeNames = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

// "FAILED_PRECONDITION" for 9; "UNKNOWN" for a value outside 0-16.
inline constexpr const char* StatusCodeName(int code) {
  return code >= 0 && code < static_cast<int>(kStatusCodeCount) ? kStatusCodeNames[code]
                                                                : "UNKNOWN";
}

}  // namespace ledger

#endif  // LEDGER_BASE_STATUS_CODE_NAMES_H_
