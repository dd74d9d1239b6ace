// Defines the pieces of the load test's batched calls (--batch): an Apply request from planned
// operations, and the final code of each operation from the call's status and response.
#ifndef LEDGER_CLIENT_BATCH_CALL_H_
#define LEDGER_CLIENT_BATCH_CALL_H_

#include <cstddef>
#include <string>
#include <vector>

#include "client/call_outcome.h"
#include "client/workload.h"
#include "grpcpp/support/status.h"
#include "ledger/v1/ledger.pb.h"

namespace ledger {

// The most operations one Apply call may carry: the server refuses more (INVALID_ARGUMENT for the
// whole call), so --batch stops here.
inline constexpr size_t kMaxBatchOperations = 8192;

// Appends `plan` to `request` as one operation: its accounts by name (`names`, index: account),
// its amount, and `id` as its request_id (a transfer's transfer_id). A Balance carries no id.
// Pure; thread-compatible.
void AddApplyOperation(const PlannedCall& plan, const std::string& id,
                       const std::vector<std::string>& names, v1::ApplyRequest* request);

// The code of each of the `count` operations an Apply call carried: the code of its own result
// when the call was answered OK; else the call's code for every one (a call refused or lost as a
// whole says the same of each operation). An OK call without exactly one result per operation is
// a broken server: every operation is then UNKNOWN, an outcome not known, to be settled by a
// retry with its id. Pure.
std::vector<grpc::StatusCode> ApplyOperationCodes(const grpc::Status& status,
                                                  const v1::ApplyResponse& response, size_t count);

// What each of those operations' outcome means (client/call_outcome.h), by the same rules:
// `call` (the call's own status, read) for every one when the call failed as a whole, else each
// result's reason.
std::vector<CallOutcome> ApplyOperationOutcomes(const CallOutcome& call,
                                                const v1::ApplyResponse& response, size_t count);

}  // namespace ledger

#endif  // LEDGER_CLIENT_BATCH_CALL_H_
