// Defines how a cluster replica that fell behind the leader's log catches up (docs/replication.md
// 9.1). libraft sends such a replica the leader's snapshot, which is only a manifest (the position
// it covers), and its own log does not reach that position (storage::RaftStatus::
// needs_state_through). So it fetches the leader's state as a backup (LedgerAdmin/Backup: the
// leader's tables and its log after them, up to at least every write acknowledged), checks it and
// makes a data directory of it as `ledgerd restore` does; then, with the replica closed, that
// directory takes the place of its own, keeping its Raft directory (term, vote and log), and the
// replica is opened again. Its log then reaches the snapshot, and libraft goes on from there.
#ifndef LEDGER_SERVER_STATE_TRANSFER_H_
#define LEDGER_SERVER_STATE_TRANSFER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "storage/rocksdb_store.h"

namespace ledger {

struct FetchedState {
  std::string dir;             // A restored data directory inside the replica's own.
  uint64_t last_position = 0;  // Its log reaches this position.
  std::string ledger_id;
  int64_t bytes = 0;  // What the backup's files took.
};

// Fetches the state of the leader at `leader_address` (its gRPC address, reached with
// `credentials`: PeerChannelCredentials) into
// `options.data_dir`/storage::kStateTransferDirectory/restored, checked as `ledgerd restore` checks
// a backup. FailedPrecondition when the state does not reach `needed_through`; the fetch's or the
// restore's error otherwise. Whatever a failed attempt wrote is removed by the next one.
// `keep_going` (asked every 200 ms) false stops the fetch (Cancelled): the caller's way to give
// up on a source that no longer leads. A source that goes silent is given up within about 30 s.
absl::StatusOr<FetchedState> FetchLeaderState(
    const std::string& leader_address, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const storage::StoreOptions& options, uint64_t needed_through,
    const std::function<bool()>& keep_going = nullptr);

// With the replica closed: the contents of `restored` take the place of `data_dir`'s, all but
// its Raft directory (kRaftDirectory), which stays. Crash-safe: once the swap has begun, the
// next open of the store finishes it (storage/data_directory_swap.h); before that, the old
// contents are untouched.
absl::Status ReplaceDataDirectory(const std::string& data_dir, const std::string& restored);

}  // namespace ledger

#endif  // LEDGER_SERVER_STATE_TRANSFER_H_
