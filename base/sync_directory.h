// Defines `SyncDirectory`: makes a directory's entries (files created, renamed or removed in it)
// durable, as a file's fsync makes its data durable.
#ifndef LEDGER_BASE_SYNC_DIRECTORY_H_
#define LEDGER_BASE_SYNC_DIRECTORY_H_

#include <string>

#include "absl/status/status.h"

namespace ledger {

// fsync of `dir`. Unavailable naming the directory and the errno's meaning when it fails.
absl::Status SyncDirectory(const std::string& dir);

}  // namespace ledger

#endif  // LEDGER_BASE_SYNC_DIRECTORY_H_
