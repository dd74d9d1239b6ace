#include "server/state_transfer.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "base/status_code_names.h"
#include "grpcpp/grpcpp.h"
#include "proto/backup_download.h"
#include "server/backup_restore.h"
#include "storage/data_directory_swap.h"

namespace ledger {
namespace {

namespace fs = std::filesystem;

absl::Status FilesystemError(absl::string_view what, const std::error_code& error) {
  return absl::UnavailableError(absl::StrCat(what, ": ", error.message()));
}

// A member that stops answering mid-fetch is given up within about 30 s. Twice ledgerd's
// default --min_client_ping_interval (10 s): a source that is slow to send its first chunk (a
// large checkpoint) must not take the pings for abuse and close the connection.
constexpr int kFetchKeepaliveTimeMs = 20'000;
constexpr int kFetchKeepaliveTimeoutMs = 10'000;

}  // namespace

absl::StatusOr<FetchedState> FetchLeaderState(
    const std::string& leader_address, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const storage::StoreOptions& options, uint64_t needed_through,
    const std::function<bool()>& keep_going) {
  // Inside the data directory, on its filesystem: what is fetched is renamed into place.
  const std::string transfer =
      absl::StrCat(options.data_dir, "/", storage::kStateTransferDirectory);
  const std::string backup = transfer + "/backup";
  std::error_code error;
  fs::remove_all(transfer, error);
  fs::create_directories(backup, error);
  if (error) return FilesystemError(absl::StrCat("cannot make ", backup), error);
  // No deadline: a large state takes as long as it takes. But a member that goes silent mid-way
  // (cut off, paused) must not hold this replica for good: an idle stream on a silent peer sends
  // nothing TCP could time out on. So the channel pings it, and the fetch fails once a ping goes
  // unanswered; the caller then tries another member.
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kFetchKeepaliveTimeMs);
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kFetchKeepaliveTimeoutMs);
  const BackupDownload download =
      DownloadBackup(grpc::CreateCustomChannel(leader_address, credentials, arguments), backup,
                     std::chrono::system_clock::time_point::max(), keep_going);
  if (!download.rpc.ok()) {
    // PERMISSION_DENIED: the member's authorization policy does not admit this replica's
    // certificate to the backup; the operator must add it (docs/replication.md).
    const bool refused = download.rpc.error_code() == grpc::StatusCode::PERMISSION_DENIED;
    return absl::UnavailableError(absl::StrCat(
        "fetching the leader's state from ", leader_address,
        " failed: ", StatusCodeName(download.rpc.error_code()), ": ", download.rpc.error_message(),
        refused ? " (its --authz_policy_file must allow this replica's certificate "
                  "/ledger.v1.LedgerAdmin/Backup)"
                : ""));
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
  // libraft's term, vote and log stay: the replica's own.
  if (absl::Status swapped = storage::SwapDataDirectoryContents(
          data_dir, restored, {std::string(storage::kRaftDirectory)});
      !swapped.ok()) {
    return swapped;
  }
  std::error_code error;
  fs::remove_all(absl::StrCat(data_dir, "/", storage::kStateTransferDirectory), error);
  return absl::OkStatus();
}

}  // namespace ledger
