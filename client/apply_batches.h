// Defines `ApplyInBatches`, how `ledgerctl apply` sends its operations: in Apply calls of at most
// `batch_size` operations, in input order, one call at a time, retrying what the server could
// not take with the same ids, and reporting one final outcome per operation in input order.
#ifndef LEDGER_CLIENT_APPLY_BATCHES_H_
#define LEDGER_CLIENT_APPLY_BATCHES_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "client/apply_input.h"
#include "grpcpp/support/status.h"
#include "ledger/v1/ledger.pb.h"

namespace ledger {

// The most operations per Apply request the server takes (ledger.proto: 8,192; more is
// INVALID_ARGUMENT for the whole call).
inline constexpr int32_t kMaxApplyBatchSize = 8192;

// What one Apply call came back with.
struct ApplyCallOutcome {
  // False when the call was not sent (no connection): nothing of it was applied.
  bool sent = true;
  grpc::Status status = {};
  v1::ApplyResponse response = {};
  // The server's grpc-retry-pushback-ms, when it sent a valid one (client/pushback.h).
  std::optional<std::chrono::milliseconds> pushback = std::nullopt;
};

// The final outcome of one operation.
struct ApplyOperationOutcome {
  // The server's result; or, when the call that carried the operation failed as a whole, that
  // call's code and message (the outcome is then unknown for a write, unless the code says
  // nothing was applied).
  v1::ApplyResult result = {};
  // False: never sent, because an earlier call failed as a whole and sending stopped there.
  bool sent = true;
};

// A retry, or a retry not made, for the caller to tell the user about.
struct ApplyRetryNote {
  bool shed = false;  // The server shed it (RESOURCE_EXHAUSTED).
  std::string text = "";
  std::optional<std::chrono::milliseconds> wait =
      std::nullopt;  // Set when retrying after that wait.
  int attempt = 0;   // The attempt about to start, when retrying.
  int attempts = 0;  // The most attempts allowed.
};

struct ApplyBatchOptions {
  int32_t batch_size = 1000;  // 1 to kMaxApplyBatchSize.
  int32_t retries = 3;        // Retries per batch (each attempt is one Apply call), >= 0.
  // A wait the server asks for longer than this is not waited for (the operations keep their
  // RESOURCE_EXHAUSTED): ledgerctl's --deadline, which bounds each call.
  std::chrono::milliseconds max_wait{5000};
  // The wait before retrying a call that failed UNAVAILABLE or DEADLINE_EXCEEDED without a
  // pushback: this, doubled on every further attempt of the batch, at most max_wait.
  std::chrono::milliseconds first_backoff{100};
};

// The hooks ApplyInBatches works through, so that it can be driven without a server.
struct ApplyBatchHooks {
  // Makes one Apply call (with its own deadline) and returns what came back.
  std::function<ApplyCallOutcome(const v1::ApplyRequest&)> call;
  // Waits before a retry.
  std::function<void(std::chrono::milliseconds)> wait;
  // Told of every retry and every retry not made.
  std::function<void(const ApplyRetryNote&)> note;
  // Given each operation's final outcome, in input order (index into the inputs), batch by
  // batch as each batch ends.
  std::function<void(size_t, const ApplyOperationOutcome&)> outcome;
};

// Sends `inputs` (ids assigned: a retry resends the same ids) in batches, one call at a time:
//  - A call that fails UNAVAILABLE or DEADLINE_EXCEEDED, or RESOURCE_EXHAUSTED with a pushback,
//    is sent again whole after the pushback (or the back-off), up to options.retries times.
//  - Operations whose result is RESOURCE_EXHAUSTED (their shard had no room; nothing of them
//    was applied) are sent again, in order, after the call's pushback, within the same bound;
//    without a pushback they keep their result, as a shed single command is not retried.
//  - A call that still fails ends sending: its operations get the call's code and message, the
//    ones after it are reported not sent. So is a response whose result count is wrong.
// Returns the number of Apply calls made.
int64_t ApplyInBatches(const std::vector<ApplyInput>& inputs, const ApplyBatchOptions& options,
                       const ApplyBatchHooks& hooks);

}  // namespace ledger

#endif  // LEDGER_CLIENT_APPLY_BATCHES_H_
