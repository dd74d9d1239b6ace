#include "server/backup_service.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <thread>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/error_status.h"

namespace ledger {
namespace {

// A Backup call refused before anything was staged.
class RefusedBackup final : public grpc::ServerWriteReactor<v1::BackupChunk> {
 public:
  explicit RefusedBackup(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

// One Backup call: stages the copy and streams it on a thread of its own, one chunk at a time.
class BackupStream final : public grpc::ServerWriteReactor<v1::BackupChunk> {
 public:
  BackupStream(storage::LedgerStorage* store, std::string server_version,
               LedgerAdminService::Counters* counters)
      : store_(store), server_version_(std::move(server_version)), counters_(counters) {
    thread_ = std::thread([this] { Finish(Run()); });
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    write_ok_ = ok;
    write_done_ = true;
  }

  void OnDone() override {
    // The thread's last act was Finish; gRPC may even call this from inside it.
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();
    } else {
      thread_.join();
    }
    delete this;
  }

 private:
  grpc::Status Run() {
    absl::StatusOr<storage::StagedBackup> staged = store_->StageBackup();
    if (!staged.ok()) {
      if (absl::IsFailedPrecondition(staged.status())) {
        return ErrorStatus(grpc::StatusCode::FAILED_PRECONDITION, v1::BACKUP_IN_PROGRESS,
                           std::string(staged.status().message()));
      }
      counters_->failed.fetch_add(1, std::memory_order_relaxed);
      return ErrorStatus(grpc::StatusCode::UNAVAILABLE, v1::STORAGE_READ_FAILED,
                         absl::StrCat("the backup could not be made: ", staged.status().message(),
                                      "; nothing of it is kept. Retry later"));
    }
    absl::Cleanup discard = [this] { store_->DiscardStagedBackup(); };
    // Counted as failed unless it ends whole below.
    bool completed = false;
    absl::Cleanup count = [this, &completed] {
      if (!completed) counters_->failed.fetch_add(1, std::memory_order_relaxed);
    };
    v1::BackupManifest manifest;
    manifest.set_ledger_id(staged->ledger_id);
    manifest.set_format_version(staged->format_version);
    manifest.set_applied_position(staged->applied_position);
    manifest.set_last_position(staged->last_position);
    manifest.set_created_at(absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone()));
    manifest.set_server_version(server_version_);
    int64_t bytes = 0;
    for (const std::string& path : staged->files) {
      v1::BackupFile* file = manifest.add_files();
      file->set_path(path);
      absl::Status sent = SendFile(absl::StrCat(staged->dir, "/", path), *file);
      if (absl::IsCancelled(sent)) return grpc::Status(grpc::StatusCode::CANCELLED, "caller gone");
      if (!sent.ok()) {
        return ErrorStatus(grpc::StatusCode::UNAVAILABLE, v1::STORAGE_READ_FAILED,
                           absl::StrCat("the backup could not be read: ", sent.message(),
                                        "; nothing of it is kept. Retry later"));
      }
      bytes += file->size();
    }
    chunk_.Clear();
    *chunk_.mutable_manifest() = manifest;
    if (!Send()) return grpc::Status(grpc::StatusCode::CANCELLED, "caller gone");
    completed = true;
    counters_->completed.fetch_add(1, std::memory_order_relaxed);
    counters_->last_completed_unix_seconds.store(absl::ToUnixSeconds(absl::Now()),
                                                 std::memory_order_relaxed);
    std::cerr << "ledgerd: backup of ledger " << manifest.ledger_id() << " sent: log positions to "
              << manifest.last_position() << ", " << manifest.files_size() << " files, " << bytes
              << " bytes (" << staged->steps << ")\n";
    return grpc::Status::OK;
  }

  // Sends the file at `path` in chunks and fills in its size and checksum. Cancelled when the
  // caller is gone.
  absl::Status SendFile(const std::string& path, v1::BackupFile& file) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return absl::UnavailableError(absl::StrCat("opening ", path, ": ", strerror(errno)));
    absl::Cleanup close_fd = [fd] { close(fd); };
    uLong crc = crc32(0L, Z_NULL, 0);
    int64_t offset = 0;
    std::string buffer(static_cast<size_t>(kBackupChunkBytes), '\0');
    while (true) {
      const ssize_t got = pread(fd, buffer.data(), buffer.size(), offset);
      if (got < 0) {
        if (errno == EINTR) continue;
        return absl::UnavailableError(absl::StrCat("reading ", path, ": ", strerror(errno)));
      }
      // A file of size 0 still gets its one chunk, so that the caller makes it.
      if (got == 0 && offset > 0) break;
      crc = crc32(crc, reinterpret_cast<const Bytef*>(buffer.data()), static_cast<uInt>(got));
      chunk_.Clear();
      chunk_.set_path(file.path());
      chunk_.set_offset(offset);
      chunk_.set_data(buffer.data(), static_cast<size_t>(got));
      if (!Send()) return absl::CancelledError("caller gone");
      offset += got;
      if (got == 0) break;
    }
    file.set_size(offset);
    file.set_crc32(static_cast<uint32_t>(crc));
    return absl::OkStatus();
  }

  // Sends chunk_ and waits until gRPC is done with it; false when the call is gone.
  bool Send() {
    {
      absl::MutexLock lock(&mu_);
      write_done_ = false;
    }
    StartWrite(&chunk_);
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&write_done_));
    return write_ok_;
  }

  storage::LedgerStorage* const store_;
  const std::string server_version_;
  LedgerAdminService::Counters* const counters_;  // The service's: it outlives every call.
  v1::BackupChunk chunk_;                         // The one chunk in flight.
  absl::Mutex mu_;
  bool write_done_ ABSL_GUARDED_BY(mu_) = false;
  bool write_ok_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace

LedgerAdminService::LedgerAdminService(storage::LedgerStorage* store, bool authorized_by_policy,
                                       std::string server_version,
                                       std::vector<std::string> replica_hosts)
    : store_(store),
      authorized_by_policy_(authorized_by_policy),
      replica_hosts_(std::move(replica_hosts)),
      server_version_(std::move(server_version)) {}

bool LedgerAdminService::FromReplica(const std::string& peer) const {
  // gRPC's peer: "ipv4:10.0.0.2:41234" or "ipv6:[fd00::2]:41234".
  const size_t scheme = peer.find(':');
  const size_t port = peer.rfind(':');
  if (scheme == std::string::npos || port <= scheme) return false;
  std::string host = peer.substr(scheme + 1, port - scheme - 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::find(replica_hosts_.begin(), replica_hosts_.end(), host) != replica_hosts_.end();
}

grpc::ServerWriteReactor<v1::BackupChunk>* LedgerAdminService::Backup(
    grpc::CallbackServerContext* context, const v1::BackupRequest* /*request*/) {
  if (!authorized_by_policy_ && !FromReplica(context->peer())) {
    // With a policy, gRPC's authorization hook has already admitted the caller by name.
    return new RefusedBackup(grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        "admin methods are refused without an authorization policy that names their callers: "
        "run ledgerd with mutual TLS and --authz_policy_file (docs/operations.md, \"Backups\")"));
  }
  if (store_ == nullptr) {
    return new RefusedBackup(
        ErrorStatus(grpc::StatusCode::FAILED_PRECONDITION, v1::NOT_DURABLE,
                    "this server runs with --durability=none and keeps nothing to back up"));
  }
  return new BackupStream(store_, server_version_, &counters_);
}

}  // namespace ledger
