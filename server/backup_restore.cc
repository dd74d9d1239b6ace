#include "server/backup_restore.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "base/sync_directory.h"
#include "google/protobuf/util/json_util.h"
#include "ledger/v1/ledger_admin.pb.h"
#include "proto/backup_files.h"
#include "storage/data_directory.h"

namespace ledger {
namespace {

namespace fs = std::filesystem;

constexpr size_t kCopyBufferBytes = size_t{1} << 20;
// A manifest is a list of files: far below this.
constexpr uintmax_t kManifestBytesMax = uintmax_t{16} << 20;

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::FailedPreconditionError(
      absl::StrCat(what, " ", path, ": ", storage::DescribeErrno(errno)));
}

absl::StatusOr<v1::BackupManifest> ReadManifest(const std::string& from) {
  const std::string path = absl::StrCat(from, "/", kBackupManifestFile);
  std::error_code error;
  if (!fs::is_directory(from, error)) {
    return absl::FailedPreconditionError(absl::StrCat(from, " is not a directory"));
  }
  const uintmax_t size = fs::file_size(path, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat(from, " is not a complete backup: it has no ", kBackupManifestFile,
                     " (a backup cut short never writes it; take the backup again)"));
  }
  if (size > kManifestBytesMax) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is too large to be a manifest"));
  }
  std::ifstream file(path);
  std::stringstream json;
  json << file.rdbuf();
  v1::BackupManifest manifest;
  const auto parsed = google::protobuf::util::JsonStringToMessage(json.str(), &manifest);
  if (!parsed.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not a backup manifest: ", parsed.message().as_string()));
  }
  if (manifest.format_version() != storage::kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the backup in ", from, " is of data format version ", manifest.format_version(),
        "; this ledgerd restores version ", storage::kFormatVersion));
  }
  if (manifest.ledger_id().empty() || manifest.files().empty() ||
      manifest.last_position() < manifest.applied_position()) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a complete manifest"));
  }
  for (const v1::BackupFile& file_entry : manifest.files()) {
    if (absl::Status safe = CheckBackupPath(file_entry.path()); !safe.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(path, ": ", safe.message()));
    }
  }
  return manifest;
}

// Copies `from` to `to` (a new file) and syncs it; checks its size and CRC-32 on the way.
absl::Status CopyChecked(const std::string& from, const std::string& to,
                         const v1::BackupFile& expected) {
  const int in = open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return ErrnoError("the backup's file cannot be opened:", from);
  absl::Cleanup close_in = [in] { close(in); };
  const int out = open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) return ErrnoError("cannot create", to);
  absl::Cleanup close_out = [out] { close(out); };
  std::vector<char> buffer(kCopyBufferBytes);
  uLong crc = crc32(0L, Z_NULL, 0);
  int64_t size = 0;
  while (true) {
    const ssize_t got = read(in, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return ErrnoError("cannot read", from);
    if (got == 0) break;
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buffer.data()), static_cast<uInt>(got));
    size += got;
    for (ssize_t written = 0; written < got;) {
      const ssize_t put = write(out, buffer.data() + written, static_cast<size_t>(got - written));
      if (put < 0 && errno == EINTR) continue;
      if (put < 0) return ErrnoError("cannot write", to);
      written += put;
    }
  }
  if (size != expected.size() || static_cast<uint32_t>(crc) != expected.crc32()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the backup's file ", from, " is damaged: ", size, " bytes with CRC-32 ",
                     static_cast<uint32_t>(crc), ", the manifest says ", expected.size(),
                     " bytes with ", expected.crc32(), ". Nothing was restored"));
  }
  if (fsync(out) != 0) return ErrnoError("cannot sync", to);
  return absl::OkStatus();
}

// The target must be missing or an empty directory: a restore never writes over a ledger.
absl::Status CheckTarget(const std::string& data_dir) {
  std::error_code error;
  const fs::file_status status = fs::symlink_status(data_dir, error);
  if (!fs::exists(status)) return absl::OkStatus();
  if (!fs::is_directory(status) || !fs::is_empty(data_dir, error) || error) {
    return absl::FailedPreconditionError(
        absl::StrCat("--data_dir ", data_dir,
                     " is not empty: a restore makes a new data directory and never writes over "
                     "one. Name a missing or empty directory"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RestoreReport> RestoreBackup(const std::string& from,
                                            const storage::StoreOptions& options) {
  absl::StatusOr<v1::BackupManifest> manifest = ReadManifest(from);
  if (!manifest.ok()) return manifest.status();
  const std::string& data_dir = options.data_dir;
  if (absl::Status target = CheckTarget(data_dir); !target.ok()) return target;
  const std::string staging = absl::StrCat(data_dir, ".restoring");
  std::error_code error;
  fs::remove_all(staging, error);  // What a restore cut short left.
  if (error) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot remove ", staging, " (left by a restore cut short): ", error.message()));
  }
  if (absl::Status prepared = storage::PrepareDirectoryForInit(staging); !prepared.ok()) {
    return prepared;
  }
  auto remove_staging = absl::MakeCleanup([&staging] {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
  });
  for (const v1::BackupFile& file : manifest->files()) {
    const std::string to = absl::StrCat(staging, "/", file.path());
    fs::create_directories(fs::path(to).parent_path(), error);
    if (error) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create the directory of ", to, ": ", error.message()));
    }
    if (absl::Status copied = CopyChecked(absl::StrCat(from, "/", file.path()), to, file);
        !copied.ok()) {
      return copied;
    }
  }
  for (const std::string& dir : {absl::StrCat(staging, "/", storage::kLogDirectory), staging}) {
    if (fs::exists(dir, error)) {
      if (absl::Status synced = SyncDirectory(dir); !synced.ok()) return synced;
    }
  }

  RestoreReport report{.ledger_id = manifest->ledger_id(),
                       .last_position = manifest->last_position(),
                       .created_at = manifest->created_at()};
  {
    // Opened as ledgerd opens it: the log is replayed and, below, every account checked against
    // its journal. Its destructor checkpoints, so that the first start replays nothing.
    storage::StoreOptions staged_options = options;
    staged_options.data_dir = staging;
    absl::StatusOr<std::unique_ptr<storage::RocksDbStore>> store =
        storage::RocksDbStore::Open(staged_options);
    if (!store.ok()) return store.status();
    if ((*store)->ledger_id() != manifest->ledger_id() ||
        (*store)->log_position() != manifest->last_position()) {
      return absl::DataLossError(absl::StrCat("the restored ledger is ", (*store)->ledger_id(),
                                              " at log position ", (*store)->log_position(),
                                              ", the manifest says ", manifest->ledger_id(), " at ",
                                              manifest->last_position()));
    }
    absl::Status accounts =
        (*store)->ForEachAccount([&report](const std::string& /*account_id*/,
                                           const AccountState& /*state*/) { ++report.accounts; });
    if (!accounts.ok()) return accounts;
    absl::Status transfers = (*store)->ForEachPendingTransfer(
        [&report](const std::string& /*transfer_id*/, const TransferRecord& /*record*/) {
          ++report.pending_transfers;
        });
    if (!transfers.ok()) return transfers;
  }
  if (fs::exists(data_dir, error)) {
    fs::remove(data_dir, error);  // Checked empty above.
    if (error) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot replace the empty ", data_dir, ": ", error.message()));
    }
  }
  fs::rename(staging, data_dir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot rename ", staging, " to ", data_dir, ": ", error.message()));
  }
  std::move(remove_staging).Cancel();
  const std::string parent = fs::absolute(data_dir).parent_path().string();
  if (absl::Status synced = SyncDirectory(parent); !synced.ok()) return synced;
  return report;
}

}  // namespace ledger
