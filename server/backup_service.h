// Defines `LedgerAdminService`, ledger.v1.LedgerAdmin on gRPC's callback API: Backup streams a
// consistent copy of the ledger (LedgerStorage::StageBackup) to the caller while the ledger serves.
#ifndef LEDGER_SERVER_BACKUP_SERVICE_H_
#define LEDGER_SERVER_BACKUP_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "ledger/v1/ledger_admin.grpc.pb.h"
#include "metrics/ledger_metrics.h"
#include "storage/ledger_storage.h"

namespace ledger {

// The most bytes of a file one BackupChunk carries.
inline constexpr int64_t kBackupChunkBytes = int64_t{1} << 20;

// Thread-safe. Each Backup runs on a thread of its own (it reads the disk, which a gRPC thread
// never does), sending one chunk at a time: the caller's pace is the backup's pace, and a caller
// that stops reading holds one chunk of memory.
class LedgerAdminService final : public v1::LedgerAdmin::CallbackService {
 public:
  // `store` is null when the server keeps no journal (--durability=none); not owned, it must
  // outlive the gRPC server. `authorized_by_policy`: an authorization policy checks every call
  // (mutual TLS and --authz_policy_file), which is the only way an admin method is allowed.
  // `replica_hosts`: a cluster replica's peers' IP addresses (--peers); without a policy, Backup is
  // allowed from them alone, so that a replica that fell behind can fetch this one's state
  // (server/state_transfer.h). Empty on a single node.
  LedgerAdminService(storage::LedgerStorage* store, bool authorized_by_policy,
                     std::string server_version, std::vector<std::string> replica_hosts = {});

  grpc::ServerWriteReactor<v1::BackupChunk>* Backup(grpc::CallbackServerContext* context,
                                                    const v1::BackupRequest* request) override;

  // Backups since start (refusals before one began are not counted). Any thread.
  BackupStats stats() const {
    return {.completed = counters_.completed.load(std::memory_order_relaxed),
            .failed = counters_.failed.load(std::memory_order_relaxed),
            .last_completed_unix_seconds =
                counters_.last_completed_unix_seconds.load(std::memory_order_relaxed)};
  }

  struct Counters {
    std::atomic<uint64_t> completed{0};
    std::atomic<uint64_t> failed{0};
    std::atomic<int64_t> last_completed_unix_seconds{0};
  };

 private:
  // Whether gRPC's `peer` (of a call) is at one of replica_hosts_.
  bool FromReplica(const std::string& peer) const;

  Counters counters_;
  storage::LedgerStorage* const store_;
  const bool authorized_by_policy_;
  const std::vector<std::string> replica_hosts_;
  const std::string server_version_;
};

}  // namespace ledger

#endif  // LEDGER_SERVER_BACKUP_SERVICE_H_
