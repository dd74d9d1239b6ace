#include "client/call_outcome.h"

namespace ledger {
namespace {

using grpc::StatusCode;

// What ledgerd's reason means (ledger.proto, enum ErrorReason).
CallOutcome FromReason(CallOutcome outcome) {
  outcome.overloaded = outcome.reason == v1::MAILBOX_FULL ||
                       outcome.reason == v1::IN_FLIGHT_LIMIT || outcome.reason == v1::FAIR_SHARE;
  switch (outcome.reason) {
    case v1::MAILBOX_FULL:
    case v1::IN_FLIGHT_LIMIT:
    case v1::FAIR_SHARE:
    case v1::SHUTTING_DOWN:
    case v1::STORAGE_READ_FAILED:
    // A cluster's follower (or a leader still catching up): the leader its metadata names, or
    // this one after RetryInfo's delay, may take the same call.
    case v1::NOT_LEADER:
    // The shard skipped it (the caller was gone): the same call may succeed with a longer
    // deadline.
    case v1::CALLER_GONE:
      outcome.effect = CallEffect::kNotApplied;
      outcome.advice = CallAdvice::kRetryAfterDelay;
      return outcome;
    case v1::OUTCOME_UNKNOWN:
      outcome.effect = CallEffect::kUnknown;
      outcome.advice = CallAdvice::kRetrySameId;
      return outcome;
    case v1::TRANSFER_PENDING:
      outcome.effect = CallEffect::kPending;
      outcome.advice = CallAdvice::kRetrySameId;
      return outcome;
    case v1::ERROR_REASON_UNSPECIFIED:
      // A reason this build does not know (a newer server): nothing but the code to go by.
      break;
    default:
      // Every other reason is a refusal by a rule or by validation: nothing was applied, and the
      // same call is refused again (PART_TOO_LARGE included: split the call).
      outcome.effect = CallEffect::kNotApplied;
      outcome.advice = CallAdvice::kDone;
      return outcome;
  }
  return outcome;
}

// What the code alone says, for a status without a reason this build knows.
CallOutcome FromCode(CallOutcome outcome) {
  switch (outcome.code) {
    case StatusCode::OK:
      outcome.effect = CallEffect::kApplied;
      outcome.advice = CallAdvice::kDone;
      return outcome;
    // Codes that only a handler sends (gRPC's own library never generates them), each a
    // refusal by its definition; and refusals before any handler ran: no such method (an older
    // server), no credentials, or the authorization policy (gRPC's authorization hook carries a
    // message only, so its PERMISSION_DENIED has no reason).
    case StatusCode::INVALID_ARGUMENT:
    case StatusCode::NOT_FOUND:
    case StatusCode::ALREADY_EXISTS:
    case StatusCode::FAILED_PRECONDITION:
    case StatusCode::OUT_OF_RANGE:
    case StatusCode::UNIMPLEMENTED:
    case StatusCode::UNAUTHENTICATED:
    case StatusCode::PERMISSION_DENIED:
      outcome.effect = CallEffect::kNotApplied;
      outcome.advice = CallAdvice::kDone;
      return outcome;
    // Anything else may have reached the server and been applied: gRPC's own UNAVAILABLE,
    // DEADLINE_EXCEEDED, CANCELLED, INTERNAL or RESOURCE_EXHAUSTED (a message too large), or a
    // proxy's answer.
    default:
      outcome.effect = CallEffect::kUnknown;
      outcome.advice = CallAdvice::kRetrySameId;
      return outcome;
  }
}

}  // namespace

CallOutcome ReadCallOutcome(const grpc::Status& status) {
  CallOutcome outcome;
  outcome.code = status.error_code();
  if (status.ok()) return FromCode(outcome);
  if (std::optional<ErrorDetails> details = DecodeErrorDetails(status.error_details())) {
    outcome.from_ledgerd = true;
    outcome.reason = details->reason;
    outcome.retry_delay = details->retry_delay;
    outcome.metadata = std::move(details->metadata);
    if (outcome.reason != v1::ERROR_REASON_UNSPECIFIED) return FromReason(std::move(outcome));
  }
  return FromCode(std::move(outcome));
}

bool ServerAnswered(const CallOutcome& outcome) {
  return outcome.from_ledgerd ||
         (outcome.code != StatusCode::UNAVAILABLE &&
          outcome.code != StatusCode::DEADLINE_EXCEEDED && outcome.code != StatusCode::CANCELLED);
}

bool ServerAnswered(const grpc::Status& status) { return ServerAnswered(ReadCallOutcome(status)); }

CallOutcome ReadApplyResult(const v1::ApplyResult& result) {
  CallOutcome outcome;
  outcome.code = static_cast<StatusCode>(result.code());
  outcome.from_ledgerd = true;
  outcome.reason = result.reason();
  if (outcome.code == StatusCode::OK) return FromCode(std::move(outcome));
  if (outcome.reason != v1::ERROR_REASON_UNSPECIFIED) return FromReason(std::move(outcome));
  // A result without a reason (an older server) still came from ledgerd's handler: by the
  // contract, only UNAVAILABLE (storage failed, or a transfer pending) may have applied it.
  outcome.effect =
      outcome.code == StatusCode::UNAVAILABLE ? CallEffect::kUnknown : CallEffect::kNotApplied;
  outcome.overloaded = outcome.code == StatusCode::RESOURCE_EXHAUSTED;
  outcome.advice = outcome.code == StatusCode::UNAVAILABLE          ? CallAdvice::kRetrySameId
                   : outcome.code == StatusCode::RESOURCE_EXHAUSTED ? CallAdvice::kRetryAfterDelay
                                                                    : CallAdvice::kDone;
  return outcome;
}

}  // namespace ledger
