// Defines `RestoreBackup`, what `ledgerd restore --from DIR --data_dir DIR2` does: it checks a
// backup written by `ledgerctl backup` and makes a data directory of it that ledgerd serves.
#ifndef LEDGER_SERVER_BACKUP_RESTORE_H_
#define LEDGER_SERVER_BACKUP_RESTORE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "storage/rocksdb_store.h"

namespace ledger {

struct RestoreReport {
  std::string ledger_id;
  uint64_t last_position = 0;  // The ledger as of this log position.
  int64_t accounts = 0;
  int64_t pending_transfers = 0;
  std::string created_at;  // When the backup was taken, as its manifest says.
};

// Restores the backup in `from` into `options.data_dir`, which must be missing or an empty
// directory. Refused, changing nothing, when the backup is incomplete (no manifest), a file is
// missing, of another size or checksum, or the format is not this ledgerd's (FailedPrecondition,
// naming what is wrong); DataLoss when the restored ledger fails its checks (an account that
// disagrees with its journal, a log entry that cannot be read).
// Crash-safe: the files go into a sibling directory, `options.data_dir` + ".restoring", which
// is synced, opened (the log replayed and every account checked), checkpointed and only then
// renamed into place; a run cut short leaves no data directory, and running it again starts over.
absl::StatusOr<RestoreReport> RestoreBackup(const std::string& from,
                                            const storage::StoreOptions& options);

}  // namespace ledger

#endif  // LEDGER_SERVER_BACKUP_RESTORE_H_
