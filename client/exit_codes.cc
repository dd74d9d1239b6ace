#include "client/exit_codes.h"

namespace ledger {

ExitCode ExitCodeFor(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return kExitOk;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::ALREADY_EXISTS:
      return kExitRejected;
    case grpc::StatusCode::NOT_FOUND:
      return kExitNotFound;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return kExitUnavailable;
    default:
      return kExitOther;
  }
}

namespace {

int Severity(ExitCode code) {
  switch (code) {
    case kExitOk:
      return 0;
    case kExitNotFound:
      return 1;
    case kExitRejected:
      return 2;
    case kExitUnavailable:
      return 3;
    case kExitUsage:
      return 4;
    case kExitOther:
      return 5;
  }
  return 5;  // Not one of the classes: treat it as the least understood.
}

}  // namespace

ExitCode WorseExitCode(ExitCode a, ExitCode b) { return Severity(b) > Severity(a) ? b : a; }

}  // namespace ledger
