#include "client/call_answer.h"

#include "absl/strings/match.h"

namespace ledger {

CallAnswer ClassifyAnswer(grpc::StatusCode code, absl::string_view message) {
  CallAnswer answer;
  // Only these never reached the server or never came back from it; every other code is its.
  answer.server_answered = code != grpc::StatusCode::UNAVAILABLE &&
                           code != grpc::StatusCode::DEADLINE_EXCEEDED &&
                           code != grpc::StatusCode::CANCELLED;
  // "Still pending" is the server's answer to a Transfer's retry, though its code says
  // UNAVAILABLE.
  if (absl::StrContains(message, "still pending")) answer.server_answered = true;
  switch (code) {
    case grpc::StatusCode::OK:
      answer.effect = Effect::kApplied;
      break;
    // The contract (ledger.proto) says each of these applied nothing.
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::INTERNAL:
    // The server has no such method (a Transfer against a ledgerd older than transfers).
    case grpc::StatusCode::UNIMPLEMENTED:
      answer.effect = Effect::kNotApplied;
      break;
    // The caller gave up or lost the connection: the server may or may not have applied it.
    default:
      answer.effect = Effect::kUnknown;
      break;
  }
  return answer;
}

}  // namespace ledger
