#include "proto/backup_download.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/steady_wait.h"
#include "base/sync_directory.h"
#include "google/protobuf/util/json_util.h"
#include "ledger/v1/ledger_admin.grpc.pb.h"
#include "proto/backup_files.h"

namespace ledger {
namespace {

namespace fs = std::filesystem;

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, const std::string& path, const char* data, size_t size) {
  for (size_t written = 0; written < size;) {
    const ssize_t put = write(fd, data + written, size - written);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) return ErrnoError("cannot write", path);
    written += static_cast<size_t>(put);
  }
  return absl::OkStatus();
}

// Writes the files of one backup stream into a directory, one file at a time, in order.
class BackupWriter {
 public:
  explicit BackupWriter(std::string dir) : dir_(std::move(dir)) {}
  ~BackupWriter() {
    if (fd_ >= 0) close(fd_);
  }
  BackupWriter(const BackupWriter&) = delete;
  BackupWriter& operator=(const BackupWriter&) = delete;

  // Takes one chunk: a server's bytes never choose a path outside the directory, a file twice,
  // or a gap.
  absl::Status Add(const v1::BackupChunk& chunk) {
    if (absl::Status safe = CheckBackupPath(chunk.path()); !safe.ok()) {
      return absl::DataLossError(absl::StrCat("the server sent a bad file name: ", safe.message()));
    }
    if (chunk.path() != path_) {
      if (absl::Status closed = CloseFile(); !closed.ok()) return closed;
      if (received_.contains(chunk.path())) {
        return absl::DataLossError(absl::StrCat("the server sent ", chunk.path(), " twice"));
      }
      path_ = chunk.path();
      const std::string full = absl::StrCat(dir_, "/", path_);
      std::error_code error;
      fs::create_directories(fs::path(full).parent_path(), error);
      fd_ = open(full.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd_ < 0) return ErrnoError("cannot create", full);
      crc_ = crc32(0L, Z_NULL, 0);
      size_ = 0;
    }
    if (chunk.offset() != size_) {
      return absl::DataLossError(absl::StrCat("the server sent ", path_, " at offset ",
                                              chunk.offset(), " after ", size_, " bytes"));
    }
    crc_ = crc32(crc_, reinterpret_cast<const Bytef*>(chunk.data().data()),
                 static_cast<uInt>(chunk.data().size()));
    size_ += static_cast<int64_t>(chunk.data().size());
    bytes_ += static_cast<int64_t>(chunk.data().size());
    return WriteAll(fd_, path_, chunk.data().data(), chunk.data().size());
  }

  // Syncs the last file, checks every file against `manifest` and writes it, last and atomically.
  absl::Status Complete(const v1::BackupManifest& manifest) {
    if (absl::Status closed = CloseFile(); !closed.ok()) return closed;
    if (manifest.files_size() != static_cast<int>(received_.size())) {
      return absl::DataLossError(absl::StrCat("the manifest lists ", manifest.files_size(),
                                              " files; ", received_.size(), " came"));
    }
    for (const v1::BackupFile& file : manifest.files()) {
      const auto got = received_.find(file.path());
      if (got == received_.end() || got->second.first != file.size() ||
          got->second.second != file.crc32()) {
        return absl::DataLossError(absl::StrCat(file.path(),
                                                " did not arrive as the manifest says (",
                                                file.size(), " bytes, CRC-32 ", file.crc32(), ")"));
      }
    }
    for (const auto& [path, unused] : received_) {
      const std::string parent = fs::path(absl::StrCat(dir_, "/", path)).parent_path().string();
      if (parent != dir_) synced_dirs_.push_back(parent);
    }
    std::string json;
    google::protobuf::util::JsonPrintOptions options;
    options.add_whitespace = true;
    options.preserve_proto_field_names = true;
    if (!google::protobuf::util::MessageToJsonString(manifest, &json, options).ok()) {
      return absl::InternalError("the manifest cannot be written as JSON");
    }
    const std::string final_path = absl::StrCat(dir_, "/", kBackupManifestFile);
    const std::string temporary = absl::StrCat(final_path, ".tmp");
    const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoError("cannot create", temporary);
    absl::Status written = WriteAll(fd, temporary, json.data(), json.size());
    if (written.ok() && fsync(fd) != 0) written = ErrnoError("cannot sync", temporary);
    close(fd);
    if (!written.ok()) return written;
    for (const std::string& dir : synced_dirs_) {
      if (absl::Status synced = SyncDirectory(dir); !synced.ok()) return synced;
    }
    if (rename(temporary.c_str(), final_path.c_str()) != 0) {
      return ErrnoError("cannot rename to", final_path);
    }
    return SyncDirectory(dir_);
  }

  int64_t bytes() const { return bytes_; }
  int64_t files() const { return static_cast<int64_t>(received_.size()); }

 private:
  absl::Status CloseFile() {
    if (fd_ < 0) return absl::OkStatus();
    const int fd = fd_;
    fd_ = -1;
    const bool synced = fsync(fd) == 0;
    close(fd);
    if (!synced) return ErrnoError("cannot sync", absl::StrCat(dir_, "/", path_));
    received_[path_] = {size_, static_cast<uint32_t>(crc_)};
    return absl::OkStatus();
  }

  const std::string dir_;
  std::string path_;
  int fd_ = -1;
  uLong crc_ = 0;
  int64_t size_ = 0;
  int64_t bytes_ = 0;
  absl::flat_hash_map<std::string, std::pair<int64_t, uint32_t>> received_;
  std::vector<std::string> synced_dirs_;
};

// Removes what a failed backup wrote, leaving the directory empty.
void RemoveContents(const std::string& dir) {
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) fs::remove_all(entry.path(), error);
}

}  // namespace

BackupDownload DownloadBackup(const std::shared_ptr<grpc::Channel>& channel, const std::string& dir,
                              std::chrono::system_clock::time_point deadline,
                              const std::function<bool()>& keep_going) {
  BackupDownload download;
  grpc::ClientContext context;
  if (deadline != std::chrono::system_clock::time_point::max()) context.set_deadline(deadline);
  // Asks keep_going until the stream ends (the watcher is stopped and joined before `context`
  // goes: the Cleanup below is declared after it).
  SteadyNotification finished;
  std::thread watcher;
  if (keep_going) {
    watcher = std::thread([&] {
      while (!finished.WaitForNotificationWithTimeout(absl::Milliseconds(200))) {
        if (!keep_going()) {
          context.TryCancel();
          return;
        }
      }
    });
  }
  const absl::Cleanup stop_watching = [&] {
    finished.Notify();
    if (watcher.joinable()) watcher.join();
  };
  v1::BackupRequest request;
  std::unique_ptr<grpc::ClientReader<v1::BackupChunk>> reader =
      v1::LedgerAdmin::NewStub(channel)->Backup(&context, request);
  BackupWriter writer(dir);
  v1::BackupChunk chunk;
  std::optional<v1::BackupManifest> manifest;
  while (download.failure.ok() && reader->Read(&chunk)) {
    if (manifest.has_value()) {
      download.failure = absl::DataLossError("the server sent more after the manifest");
    } else if (chunk.has_manifest()) {
      manifest = chunk.manifest();
    } else {
      download.failure = writer.Add(chunk);
    }
  }
  if (!download.failure.ok()) context.TryCancel();
  download.rpc = reader->Finish();
  if (download.failure.ok() && download.rpc.ok() && !manifest.has_value()) {
    download.failure = absl::DataLossError("the stream ended without a manifest");
  }
  if (download.ok()) download.failure = writer.Complete(*manifest);
  if (!download.ok()) {
    RemoveContents(dir);
    return download;
  }
  download.manifest = *std::move(manifest);
  download.files = writer.files();
  download.bytes = writer.bytes();
  return download;
}

}  // namespace ledger
