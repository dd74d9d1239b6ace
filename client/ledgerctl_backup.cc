// ledgerctl backup --to DIR: streams ledger.v1.LedgerAdmin/Backup into DIR, checks every file
// against the manifest that ends the stream, and writes the manifest last.
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/sync_directory.h"
#include "client/exit_codes.h"
#include "client/json_line.h"
#include "client/ledgerctl_commands.h"
#include "client/ledgerctl_output.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "ledger/v1/ledger_admin.grpc.pb.h"
#include "proto/backup_files.h"

namespace ledger::ctl {
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

// Removes what a failed backup wrote, leaving the directory empty.
void RemoveContents(const std::string& dir) {
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) fs::remove_all(entry.path(), error);
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
  grpc::ClientContext context;
  v1::BackupRequest request;
  std::unique_ptr<grpc::ClientReader<v1::BackupChunk>> reader =
      v1::LedgerAdmin::NewStub(session.channel())->Backup(&context, request);
  BackupWriter writer(dir);
  v1::BackupChunk chunk;
  std::optional<v1::BackupManifest> manifest;
  absl::Status failure;
  while (failure.ok() && reader->Read(&chunk)) {
    if (manifest.has_value()) {
      failure = absl::DataLossError("the server sent more after the manifest");
    } else if (chunk.has_manifest()) {
      manifest = chunk.manifest();
    } else {
      failure = writer.Add(chunk);
    }
  }
  if (!failure.ok()) context.TryCancel();
  const grpc::Status status = reader->Finish();
  if (failure.ok() && status.ok() && !manifest.has_value()) {
    failure = absl::DataLossError("the stream ended without a manifest");
  }
  if (failure.ok() && status.ok()) failure = writer.Complete(*manifest);
  if (!failure.ok() || !status.ok()) {
    RemoveContents(dir);
    if (!failure.ok()) {
      std::cerr << "ledgerctl: backup failed: " << failure.message() << "; nothing was kept in "
                << dir << "\n";
      return kExitOther;
    }
    return session.Failed(status);
  }
  if (session.options().json) {
    BackupLine line;
    line.set_ledger_id(manifest->ledger_id());
    line.set_last_position(manifest->last_position());
    line.set_dir(dir);
    line.set_files(writer.files());
    line.set_bytes(writer.bytes());
    std::cout << JsonLine(line);
  } else {
    std::cout << "backup of ledger " << manifest->ledger_id() << " as of log position "
              << manifest->last_position() << " in " << dir << ": " << writer.files() << " files, "
              << writer.bytes() << " bytes\n";
  }
  return kExitOk;
}

}  // namespace ledger::ctl
