// ledgerctl backup --to DIR: streams ledger.v1.LedgerAdmin/Backup into DIR
// (proto/backup_download.h).
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/exit_codes.h"
#include "client/json_line.h"
#include "client/ledgerctl_commands.h"
#include "client/ledgerctl_output.pb.h"
#include "ledger/v1/ledger_admin.pb.h"
#include "proto/backup_download.h"

namespace ledger::ctl {
namespace {

namespace fs = std::filesystem;

// The backup's directory must be missing (it is made) or empty: a backup never mixes with files.
absl::Status PrepareDirectory(const std::string& dir) {
  std::error_code error;
  if (!fs::exists(dir, error)) {
    fs::create_directories(dir, error);
    if (error)
      return absl::UnavailableError(absl::StrCat("cannot create ", dir, ": ", error.message()));
    return absl::OkStatus();
  }
  if (!fs::is_directory(dir, error) || !fs::is_empty(dir, error)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--to ", dir, " is not an empty directory; name a missing or empty one"));
  }
  return absl::OkStatus();
}

}  // namespace

int RunBackup(LedgerctlSession& session, const std::vector<char*>& args) {
  const std::string& dir = session.options().backup_to;
  if (args.size() != 2)
    return UsageError("backup takes no arguments; name the directory with --to");
  if (dir.empty()) return UsageError("backup needs --to=DIR, a missing or empty directory");
  if (absl::Status prepared = PrepareDirectory(dir); !prepared.ok()) {
    std::cerr << "ledgerctl: " << prepared.message() << "\n";
    return absl::IsFailedPrecondition(prepared) ? kExitUsage : kExitOther;
  }
  // No deadline: a backup takes as long as its copy; it ends when the server ends the stream.
  const BackupDownload download = DownloadBackup(session.channel(), dir);
  if (!download.ok()) {
    if (!download.failure.ok()) {
      std::cerr << "ledgerctl: backup failed: " << download.failure.message()
                << "; nothing was kept in " << dir << "\n";
      return kExitOther;
    }
    return session.Failed(download.rpc);
  }
  const v1::BackupManifest* manifest = &download.manifest;
  if (session.options().json) {
    BackupLine line;
    line.set_ledger_id(manifest->ledger_id());
    line.set_last_position(manifest->last_position());
    line.set_dir(dir);
    line.set_files(download.files);
    line.set_bytes(download.bytes);
    std::cout << JsonLine(line);
  } else {
    std::cout << "backup of ledger " << manifest->ledger_id() << " as of log position "
              << manifest->last_position() << " in " << dir << ": " << download.files << " files, "
              << download.bytes << " bytes\n";
  }
  return kExitOk;
}

}  // namespace ledger::ctl
