// Defines how `ledgerctl apply` reads its input: JSON Lines, one ledger.v1.ApplyOperation per
// non-blank line in protobuf's JSON mapping, every line checked before anything is sent, and
// an idempotency key for every write that has none.
#ifndef LEDGER_CLIENT_APPLY_INPUT_H_
#define LEDGER_CLIENT_APPLY_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <istream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ledger/v1/ledger.pb.h"

namespace ledger {

// The most operations one apply reads: all are held in memory until the last line is checked.
// A bigger import is split into files of at most this many lines.
inline constexpr size_t kMaxApplyInputOperations = 1'000'000;
// The longest line read, in bytes: an operation with every id at its 128-byte maximum is under
// 1 KiB, so a longer line is not an operation.
inline constexpr size_t kMaxApplyInputLineBytes = size_t{64} * 1024;
// How many bad lines an error lists (the count of the others follows).
inline constexpr int kMaxReportedBadLines = 10;

// One operation and the input line it came from (1 is the first line; blank lines count).
struct ApplyInput {
  int32_t line = 0;
  v1::ApplyOperation operation = {};
};

// Reads every line of `in`. A line that is empty or only whitespace is skipped; any other must
// be one ApplyOperation in protobuf's JSON mapping (unknown fields refused) that sets one of its
// operations. Returns the operations in input order, or InvalidArgument listing the first
// kMaxReportedBadLines bad lines as "line N: what is wrong" (one per line of the message) and
// how many more there were; also when there are more than kMaxApplyInputOperations operations
// or a line longer than kMaxApplyInputLineBytes.
absl::StatusOr<std::vector<ApplyInput>> ReadApplyInput(std::istream& in);

// Gives every deposit and withdraw without a request_id, and every transfer without a
// transfer_id, one from `new_id`, so that a retry of the operation cannot apply it twice.
// Returns how many ids were given.
size_t AssignMissingIds(std::vector<ApplyInput>& inputs,
                        const std::function<std::string()>& new_id);

// The operation's request_id or transfer_id; empty for a balance read or when it has none.
const std::string& IdOf(const v1::ApplyOperation& operation);

}  // namespace ledger

#endif  // LEDGER_CLIENT_APPLY_INPUT_H_
