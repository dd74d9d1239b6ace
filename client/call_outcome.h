// Defines `ReadCallOutcome`, the one place where a client of ledgerd decides what a call's status
// means: whether the operation was applied, not applied, may have been applied, or (a transfer)
// is pending between shards; whether a retry can help and after how long.
//
// It decides from the machine-readable reason ledgerd sends beside every error
// (proto/error_details.h: ErrorInfo in grpc-status-details-bin), never from the message, whose
// words are for people and may change in any release. A status without ledgerd's details came
// from gRPC itself (no connection, deadline, cancelled, message too large), from a proxy or from
// an older server: it is read by its code alone, and conservatively: unless the code says that
// nothing reached a handler, the operation may have been applied.
#ifndef LEDGER_CLIENT_CALL_OUTCOME_H_
#define LEDGER_CLIENT_CALL_OUTCOME_H_

#include <chrono>
#include <optional>

#include "grpcpp/support/status.h"
#include "ledger/v1/ledger.pb.h"
#include "proto/error_details.h"

namespace ledger {

// What a finished write (Deposit, Withdraw, Transfer, an Apply operation) did to the money.
enum class CallEffect {
  kApplied,     // OK: applied, or the recorded result of an earlier call with the same id.
  kNotApplied,  // Refused: nothing changed, and a retry with the same id cannot apply it twice.
  kUnknown,     // It may have been applied: retry with the same id, or look it up.
  kPending,     // A transfer debited and not yet credited: it ends COMMITTED or REFUSED itself.
};

// What a client should do next.
enum class CallAdvice {
  kDone,             // Applied, or refused for good: the same call gets the same answer.
  kRetryAfterDelay,  // Overload or shutdown refused it: the same call may succeed later.
  kRetrySameId,      // The outcome is unknown or pending: retry with the same id to settle it.
};

struct CallOutcome {
  grpc::StatusCode code = grpc::StatusCode::OK;
  // ledgerd's reason; ERROR_REASON_UNSPECIFIED for OK and for a status without its details.
  v1::ErrorReason reason = v1::ERROR_REASON_UNSPECIFIED;
  // Whether the status carried ledgerd's details (ErrorInfo of the domain "ledger.v1").
  bool from_ledgerd = false;
  CallEffect effect = CallEffect::kApplied;
  CallAdvice advice = CallAdvice::kDone;
  // Refused for overload (MAILBOX_FULL, IN_FLIGHT_LIMIT, FAIR_SHARE): retry after retry_delay.
  bool overloaded = false;
  // RetryInfo.retry_delay, when ledgerd sent one (an overload refusal).
  std::optional<std::chrono::milliseconds> retry_delay;
  // ErrorInfo.metadata (account_id, balance, overdraft_limit, shard, ...).
  ErrorMetadata metadata;
};

// What `status`, the answer to a write, means. Pure; thread-safe.
CallOutcome ReadCallOutcome(const grpc::Status& status);

// Whether `status` is the server's answer (refusals included) rather than gRPC's word for a call
// that never reached it or never came back: OK, ledgerd's details, or a code other than
// UNAVAILABLE, DEADLINE_EXCEEDED and CANCELLED. For watching whether the server is up; what the
// answer means for the money is ReadCallOutcome's.
bool ServerAnswered(const grpc::Status& status);
// The same, for a status already read.
bool ServerAnswered(const CallOutcome& outcome);

// The same for one operation of an Apply call: its ApplyResult's code and reason. An operation's
// result always comes from ledgerd, so a result without a reason is read by its code as above.
CallOutcome ReadApplyResult(const v1::ApplyResult& result);

}  // namespace ledger

#endif  // LEDGER_CLIENT_CALL_OUTCOME_H_
