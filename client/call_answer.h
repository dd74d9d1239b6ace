// Defines `ClassifyAnswer`, the load-test client's one rule for what a finished call's status
// says: whether the server answered it, and whether it applied the operation, did not, or may
// have. Every other classification in ledger-loadtest (ServerAnswered, the book's EffectOf, the
// settling of ambiguous calls) is derived from it, so that a classifier shared by all the
// clients can later replace this one function.
#ifndef LEDGER_CLIENT_CALL_ANSWER_H_
#define LEDGER_CLIENT_CALL_ANSWER_H_

#include "absl/strings/string_view.h"
#include "grpcpp/support/status_code_enum.h"

namespace ledger {

// What a finished call tells us about whether it changed a balance.
enum class Effect { kApplied, kNotApplied, kUnknown };

struct CallAnswer {
  // The status came from the server (any answer, refusals and shedding included), as opposed to
  // a call that never reached it or never came back.
  bool server_answered = false;
  // For a Deposit, Withdraw or Transfer (a Balance applies nothing whatever its code).
  Effect effect = Effect::kUnknown;
};

// Classifies a status by its code and message. The message matters in one case only: a retried
// Transfer still on its way between shards is answered UNAVAILABLE "... still pending ...", which
// the server sent (server_answered) though its outcome is not known yet (kUnknown).
CallAnswer ClassifyAnswer(grpc::StatusCode code, absl::string_view message);

// ClassifyAnswer(code, "").server_answered: for the callers that have only a code.
inline bool ServerAnswered(grpc::StatusCode code) {
  return ClassifyAnswer(code, "").server_answered;
}

}  // namespace ledger

#endif  // LEDGER_CLIENT_CALL_ANSWER_H_
