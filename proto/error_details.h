// Defines the wire form of a ledgerd error's machine-readable details, for the server that
// writes them and the clients that read them: a google.rpc.Status in the trailer
// grpc-status-details-bin, holding a google.rpc.ErrorInfo (domain "ledger.v1", reason: one
// ledger.v1.ErrorReason name, metadata) and, for an overload refusal, a google.rpc.RetryInfo.
//
// Free of gRPC's types (codes are ints, the trailer is bytes), so that any layer can use it.
#ifndef LEDGER_PROTO_ERROR_DETAILS_H_
#define LEDGER_PROTO_ERROR_DETAILS_H_

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "ledger/v1/ledger.pb.h"

namespace ledger {

// ErrorInfo.domain of every reason ledgerd sends.
inline constexpr char kErrorDomain[] = "ledger.v1";

// ErrorInfo.metadata, in the order the message names the values.
using ErrorMetadata = std::vector<std::pair<std::string, std::string>>;

// What the details say.
struct ErrorDetails {
  v1::ErrorReason reason = v1::ERROR_REASON_UNSPECIFIED;
  ErrorMetadata metadata;
  // RetryInfo.retry_delay, when the details hold one.
  std::optional<std::chrono::milliseconds> retry_delay;
};

// The bytes of grpc-status-details-bin for a status with `code` and `message` (google.rpc.Status
// repeats both) and `details`.
std::string EncodeErrorDetails(int code, absl::string_view message, const ErrorDetails& details);

// What `bytes` (grpc-status-details-bin) say, or nullopt when they are empty, do not parse, or
// hold no ErrorInfo of the domain "ledger.v1". A reason name this build does not know (from a newer
// server) reads as ERROR_REASON_UNSPECIFIED, with its metadata.
std::optional<ErrorDetails> DecodeErrorDetails(absl::string_view bytes);

// The value of `key` in `metadata`, or empty.
absl::string_view MetadataValue(const ErrorMetadata& metadata, absl::string_view key);

}  // namespace ledger

#endif  // LEDGER_PROTO_ERROR_DETAILS_H_
