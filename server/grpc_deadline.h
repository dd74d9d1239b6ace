// Defines `GrpcDeadlineIn`: a deadline for gRPC's APIs (Server::Shutdown, ClientContext,
// Alarm) on gRPC's own monotonic clock. A std::chrono::system_clock time point is a wall-clock
// one, which gRPC turns into its monotonic time by reading the wall clock again: a clock step
// in between, or a wall clock gRPC reads otherwise than this process does (the tests'
// clock-shift library, tests/clock_shift/), moves the deadline by as much.
#ifndef LEDGER_SERVER_GRPC_DEADLINE_H_
#define LEDGER_SERVER_GRPC_DEADLINE_H_

#include "absl/time/time.h"
#include "grpc/support/time.h"

namespace ledger {

inline gpr_timespec GrpcDeadlineIn(absl::Duration timeout) {
  const int64_t millis = timeout <= absl::ZeroDuration() ? 0 : absl::ToInt64Milliseconds(timeout);
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(millis, GPR_TIMESPAN));
}

}  // namespace ledger

#endif  // LEDGER_SERVER_GRPC_DEADLINE_H_
