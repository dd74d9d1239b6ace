// Defines ledgerctl's exit codes: each names a class of outcome a script can act on.
#ifndef LEDGER_CLIENT_EXIT_CODES_H_
#define LEDGER_CLIENT_EXIT_CODES_H_

#include "grpcpp/support/status_code_enum.h"

namespace ledger {

enum ExitCode : int {
  kExitOk = 0,
  kExitOther = 1,        // Any other failure (INTERNAL, UNKNOWN, CANCELLED, ...).
  kExitUsage = 2,        // The command line is wrong; nothing was sent.
  kExitRejected = 3,     // A ledger rule refused it (INVALID_ARGUMENT, FAILED_PRECONDITION,
                         // OUT_OF_RANGE, ALREADY_EXISTS); retrying the same call will not help.
  kExitNotFound = 4,     // NOT_FOUND: the account has never received a deposit (or, for
                         // get-transfer, the server has no record of the transfer_id).
  kExitUnavailable = 5,  // Overloaded or unavailable (RESOURCE_EXHAUSTED, UNAVAILABLE,
                         // DEADLINE_EXCEEDED; a cluster without a leader found: UNAVAILABLE,
                         // NOT_LEADER), or not SERVING: retry later, with a back-off (a write or
                         // transfer with the same request_id or transfer_id).
};

// The exit code for a call that ended with `code`.
ExitCode ExitCodeFor(grpc::StatusCode code);

// The worse of two outcome classes, for a command whose operations end in different classes
// (apply): the one a script must act on first. From least to most severe: OK, NOT_FOUND (4),
// rejected by a rule (3), overloaded or outcome unknown (5: retry), any other failure (1: not
// understood). Usage (2) never mixes with outcomes: it means nothing was sent.
ExitCode WorseExitCode(ExitCode a, ExitCode b);

}  // namespace ledger

#endif  // LEDGER_CLIENT_EXIT_CODES_H_
