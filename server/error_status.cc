#include "server/error_status.h"

#include <utility>

#include "base/check.h"

namespace ledger {

grpc::Status ErrorStatus(grpc::StatusCode code, v1::ErrorReason reason, const std::string& message,
                         ErrorMetadata metadata,
                         std::optional<std::chrono::milliseconds> retry_delay) {
  LEDGER_CHECK(code != grpc::StatusCode::OK);
  LEDGER_CHECK(reason != v1::ERROR_REASON_UNSPECIFIED);
  const std::string details = EncodeErrorDetails(
      static_cast<int>(code), message,
      ErrorDetails{.reason = reason, .metadata = std::move(metadata), .retry_delay = retry_delay});
  // grpc::Status copies both strings (its constructor takes them by const reference).
  return {code, message, details};
}

v1::ErrorReason ReasonOf(const grpc::Status& status) {
  std::optional<ErrorDetails> details = DecodeErrorDetails(status.error_details());
  return details.has_value() ? details->reason : v1::ERROR_REASON_UNSPECIFIED;
}

}  // namespace ledger
