// Defines how Watch's messages are made: each log position's operations are encoded once, as
// the bytes of WatchResponse's repeated `events` field (each event its tag, its length and the
// WatchEvent), so that a message to any watcher is those bytes concatenated (what protobuf's wire
// format makes of a repeated field), filtered by account when it asks, then its position fields.
// Many watchers of one position share one decoding of the log entry and one encoding of it.
#ifndef LEDGER_SERVER_WATCH_ENCODING_H_
#define LEDGER_SERVER_WATCH_ENCODING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ledger {

// The operations of one log position, encoded.
struct EncodedPosition {
  struct Event {
    std::string account_id;
    uint32_t offset = 0;  // Where its field's bytes start in `events`, and how many.
    uint32_t length = 0;
  };
  uint64_t position = 0;
  std::string events;  // Every event's field of WatchResponse, in commit order.
  std::vector<Event> index;

  // About what it holds in memory.
  int64_t bytes() const;
};

// The operations of the log entry `payload` at `position`; DataLoss when it does not decode.
absl::StatusOr<EncodedPosition> EncodePosition(uint64_t position, absl::string_view payload);

// Appends the events of `encoded` whose account is in `accounts` (every event when it is empty)
// to `message`; returns how many.
int AppendEvents(const EncodedPosition& encoded, const absl::flat_hash_set<std::string>& accounts,
                 std::string& message);

// Appends WatchResponse's `position` and `committed_position` fields to `message`.
void AppendPositions(uint64_t position, uint64_t committed, std::string& message);

}  // namespace ledger

#endif  // LEDGER_SERVER_WATCH_ENCODING_H_
