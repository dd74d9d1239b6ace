// Defines what a backup directory holds, shared by its writer (`ledgerctl backup`) and its reader
// (`ledgerd restore`): the manifest's file name and which file paths a backup may name.
#ifndef LEDGER_PROTO_BACKUP_FILES_H_
#define LEDGER_PROTO_BACKUP_FILES_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ledger {

// ledger.v1.BackupManifest in protobuf's JSON mapping, written last: a directory without it is
// not a complete backup.
inline constexpr absl::string_view kBackupManifestFile = "backup_manifest.json";

// OK when `path` may name a file of a backup: one or two components ("000012.sst",
// "ledger_log/00000000000000000001.seg") of letters, digits, '.', '_' and '-', neither "." nor
// "..", and not the manifest's name. InvalidArgument naming the path otherwise: bytes from the
// network never choose where a file goes.
absl::Status CheckBackupPath(absl::string_view path);

}  // namespace ledger

#endif  // LEDGER_PROTO_BACKUP_FILES_H_
