// Defines `DownloadBackup`: streams ledger.v1.LedgerAdmin/Backup from a server into a directory,
// checks every file against the manifest that ends the stream, and writes the manifest last.
// What `ledgerctl backup` does, and what a cluster replica that fell behind the leader's log does
// to fetch the leader's state (server/state_transfer.h). Here in proto/ because both the clients
// and the server use it.
#ifndef LEDGER_PROTO_BACKUP_DOWNLOAD_H_
#define LEDGER_PROTO_BACKUP_DOWNLOAD_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "ledger/v1/ledger_admin.pb.h"

namespace ledger {

struct BackupDownload {
  grpc::Status rpc;             // The call's status.
  absl::Status failure;         // What went wrong on this side (a bad chunk, a write), else OK.
  v1::BackupManifest manifest;  // The server's, when both are OK.
  int64_t files = 0;
  int64_t bytes = 0;
  bool ok() const { return rpc.ok() && failure.ok(); }
};

// Downloads a backup into `dir`, which must exist and be empty; on any failure `dir` is left
// empty again. `deadline` bounds the whole stream (a backup takes as long as its copy).
// `keep_going`, when set, is asked about every 200 ms from another thread while the stream
// runs: false cancels it (CANCELLED), as when the source is no longer the one to copy.
BackupDownload DownloadBackup(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& dir,
    std::chrono::system_clock::time_point deadline = std::chrono::system_clock::time_point::max(),
    const std::function<bool()>& keep_going = nullptr);

}  // namespace ledger

#endif  // LEDGER_PROTO_BACKUP_DOWNLOAD_H_
