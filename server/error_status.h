// Defines `ErrorStatus`, how every non-OK status ledgerd sends is built: the code, a message for
// people, and beside it, for machines, the reason (a ledger.v1.ErrorReason) with its metadata and,
// for an overload refusal, the delay to wait, as google.rpc details in grpc-status-details-bin
// (proto/error_details.h). Clients decide by the reason; the message may be reworded freely.
#ifndef LEDGER_SERVER_ERROR_STATUS_H_
#define LEDGER_SERVER_ERROR_STATUS_H_

#include <chrono>
#include <optional>
#include <string>

#include "grpcpp/support/status.h"
#include "proto/error_details.h"

namespace ledger {

// A status with `code`, `message` and the details of `reason` (never ERROR_REASON_UNSPECIFIED).
grpc::Status ErrorStatus(grpc::StatusCode code, v1::ErrorReason reason, const std::string& message,
                         ErrorMetadata metadata = {},
                         std::optional<std::chrono::milliseconds> retry_delay = std::nullopt);

// The reason a status built by ErrorStatus carries; ERROR_REASON_UNSPECIFIED for OK.
v1::ErrorReason ReasonOf(const grpc::Status& status);

}  // namespace ledger

#endif  // LEDGER_SERVER_ERROR_STATUS_H_
