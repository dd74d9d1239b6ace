// Defines how ledgerd reads --watch_retention: the log it keeps behind its checkpoints for
// watchers, by size ("512MiB", "20GiB") or by age ("24h", "90m"), or "0" for none.
#ifndef LEDGER_SERVER_WATCH_RETENTION_H_
#define LEDGER_SERVER_WATCH_RETENTION_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ledger {

struct WatchRetention {
  int64_t bytes = 0;                          // Keep the newest segments holding this much.
  absl::Duration age = absl::ZeroDuration();  // Keep every segment written this recently.
};

// "0"; a whole number of B, KiB, MiB, GiB or TiB (at most 1 PiB); or a duration of
// absl::ParseDuration ("24h", "90m", "1h30m") from 1s to 10 years. InvalidArgument naming
// --watch_retention and the accepted forms otherwise.
absl::StatusOr<WatchRetention> ParseWatchRetention(absl::string_view text);

}  // namespace ledger

#endif  // LEDGER_SERVER_WATCH_RETENTION_H_
