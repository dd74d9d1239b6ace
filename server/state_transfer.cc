#include "server/state_transfer.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "base/sync_directory.h"
#include "grpcpp/grpcpp.h"
#include "proto/backup_download.h"
#include "server/backup_restore.h"

namespace ledger {
namespace {

namespace fs = std::filesystem;

absl::Status FilesystemError(absl::string_view what, const std::error_code& error) {
  return absl::UnavailableError(absl::StrCat(what, ": ", error.message()));
}

// `data_dir` with `suffix` on its last component ("d/" and "d" alike give "d.transfer"): beside
// it, never inside.
std::string Beside(const std::string& data_dir, absl::string_view suffix) {
  fs::path path = fs::path(data_dir).lexically_normal();
  if (!path.has_filename()) path = path.parent_path();
  return absl::StrCat(path.string(), suffix);
}

}  // namespace

absl::StatusOr<FetchedState> FetchLeaderState(const std::string& leader_address,
                                              const storage::StoreOptions& options,
                                              uint64_t needed_through) {
  const std::string transfer = Beside(options.data_dir, ".transfer");
  const std::string backup = transfer + "/backup";
  std::error_code error;
  fs::remove_all(transfer, error);
  fs::create_directories(backup, error);
  if (error) return FilesystemError(absl::StrCat("cannot make ", backup), error);
  const BackupDownload download = DownloadBackup(
      grpc::CreateChannel(leader_address, grpc::InsecureChannelCredentials()), backup);
  if (!download.rpc.ok()) {
    return absl::UnavailableError(absl::StrCat("fetching the leader's state from ", leader_address,
                                               " failed: ", download.rpc.error_message()));
  }
  if (!download.failure.ok()) return download.failure;
  if (download.manifest.last_position() < needed_through) {
    return absl::FailedPreconditionError(
        absl::StrCat("the leader's state reaches log position ", download.manifest.last_position(),
                     ", short of its snapshot at ", needed_through));
  }
  storage::StoreOptions restored_options = options;
  restored_options.cluster.reset();  // Restored as a ledger; it becomes a replica's once in place.
  restored_options.data_dir = transfer + "/restored";
  absl::StatusOr<RestoreReport> restored = RestoreBackup(backup, restored_options);
  if (!restored.ok()) return restored.status();
  fs::remove_all(backup, error);
  return FetchedState{.dir = restored_options.data_dir,
                      .last_position = restored->last_position,
                      .ledger_id = restored->ledger_id,
                      .bytes = download.bytes};
}

absl::Status ReplaceDataDirectory(const std::string& data_dir, const std::string& restored) {
  std::error_code error;
  const std::string raft = absl::StrCat(data_dir, "/", storage::kRaftDirectory);
  if (fs::exists(raft, error)) {
    fs::rename(raft, absl::StrCat(restored, "/", storage::kRaftDirectory), error);
    if (error) return FilesystemError(absl::StrCat("cannot move ", raft), error);
  }
  const std::string replaced = Beside(data_dir, ".replaced");
  fs::remove_all(replaced, error);
  fs::rename(data_dir, replaced, error);
  if (error) return FilesystemError(absl::StrCat("cannot move ", data_dir, " aside"), error);
  fs::rename(restored, data_dir, error);
  if (error) return FilesystemError(absl::StrCat("cannot move ", restored, " in place"), error);
  const fs::path parent = fs::absolute(data_dir).parent_path();
  if (absl::Status synced = SyncDirectory(parent.string()); !synced.ok()) return synced;
  fs::remove_all(replaced, error);
  fs::remove_all(Beside(data_dir, ".transfer"), error);
  return absl::OkStatus();
}

}  // namespace ledger
