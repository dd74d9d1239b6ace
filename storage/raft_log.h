// Defines `RaftLog`, the ReplicatedLog of a three-node cluster (issue 32): an entry is committed
// once a majority of the replicas have written it durably, through canonical's libraft 0.15 and
// its libuv I/O (Debian's libraft-dev). One Raft group for the whole cluster, one entry per group
// commit: the shape docs/replication.md section 8 chose on measurements.
//
// How it maps onto the seam:
//  - Positions are Raft indexes. libraft's own log (in `raft_dir`, written through O_DSYNC) is
//    what makes an entry durable on a replica; every replica also keeps the committed entries in
//    a LocalLog (`log_dir`), the "mirror", at their Raft index, because libraft 0.15 has no call
//    that reads its log back. The mirror is what ReadFrom, DropBefore and recovery read, exactly
//    as they read the single-node log. Raft's own entries (the configuration, barriers) take an
//    index too and are mirrored as empty payloads, so that positions have no gaps.
//  - Append proposes on the leader and returns once the entry is committed and mirrored here
//    (Propose: the same, without waiting, so that several may be in flight).
//    On a follower it fails at once with FailedPrecondition naming the leader, and nothing is
//    proposed. An entry whose leadership is lost before it commits is outcome unknown: Append
//    returns Unavailable and poisons the log until Repair (the new leader's log decides whether
//    the entry survives, and `on_committed` says so if it does).
//  - Every replica, the leader included, sees every committed entry once through `on_committed`,
//    on the loop thread, right after it is mirrored: what a follower's applier will consume.
//  - A mirror that cannot be written (a full disk, a failed sync) holds the entry back: libraft
//    retries the apply with its next message, the mirror is repaired first, and the replica
//    catches up once the write works. On the leader, Append waits for that.
//  - Snapshots (libraft takes one every `snapshot_threshold` entries or `snapshot_bytes`) are a
//    manifest: the index they cover, which the mirror is synced through first. A replica so far
//    behind that the leader sends it a snapshot refuses it and says so in
//    Status().needs_state_through; ledgerd then fetches the leader's state and opens the replica
//    again (server/state_transfer.h).
//
// Threads: a loop thread of its own runs libraft. Append, Propose, Repair and the accessors may
// be called from any thread; Append blocks its caller until the entry's fate is known, Propose
// calls back with it.
#ifndef LEDGER_STORAGE_RAFT_LOG_H_
#define LEDGER_STORAGE_RAFT_LOG_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "storage/replicated_log.h"

namespace ledger::storage {

struct RaftPeer {
  uint64_t id = 0;      // 1, 2, 3: never 0.
  std::string address;  // host:port the other replicas reach it at.
};

struct RaftLogOptions {
  uint64_t node_id = 0;
  // Every member, this node included. The first start of an empty `raft_dir` bootstraps this
  // configuration; later starts keep the one in the log.
  std::vector<RaftPeer> peers;
  // Where this node listens (host:port); empty: its own address in `peers`.
  std::string bind_address;
  std::string raft_dir;                           // libraft's log, term and vote.
  std::string log_dir;                            // The mirror of committed entries (a LocalLog).
  int64_t log_segment_bytes = int64_t{64} << 20;  // The mirror's segment size.
  // libraft's own segment size (its default, 8 MiB; ledgerd passes --log_segment_mib). libraft
  // preallocates each (the one written and two ahead), and closing a full one stalls its loop on
  // every replica while the kernel destroys the segment's AIO context (io_destroy: 32 ms here,
  // docs/replication.md 9.6), so larger segments stall less often.
  int64_t libraft_segment_bytes = int64_t{8} << 20;
  absl::Duration election_timeout = absl::Milliseconds(300);
  absl::Duration heartbeat_interval = absl::Milliseconds(50);
  bool pre_vote = true;
  // libraft takes a snapshot once the entries since the last one number `snapshot_threshold`
  // or hold `snapshot_bytes` of payload, whichever comes first. Each costs libraft a stall of
  // its loop (it closes its open segment, whose io_destroy took 40 ms here), so they are spaced
  // by bytes; the bytes bound what libraft holds in memory (it keeps every entry since the last
  // snapshot).
  unsigned snapshot_threshold = 65536;
  int64_t snapshot_bytes = int64_t{64} << 20;
  // Entries libraft keeps behind a snapshot (its default, 128): a follower further behind than
  // that is sent the leader's snapshot and fetches its state. A follower sent one is then kept
  // more, up to `snapshot_bytes` of entries, until it catches up (storage/raft_catch_up.h).
  unsigned snapshot_trailing = 128;
  // Called on the loop thread for every entry committed after this node started, in order,
  // once it is in the mirror: (position, payload), an empty payload for Raft's own entries.
  std::function<void(uint64_t position, absl::string_view payload)> on_committed;
  // Tests only: the mirror's LocalLogOptions::fault (a failed write or sync of the mirror).
  std::function<absl::Status(absl::string_view step)> mirror_fault;
};

// What this node knows of the cluster, at one moment.
struct RaftStatus {
  bool leader = false;
  uint64_t term = 0;
  uint64_t leader_id = 0;  // 0 when no leader is known.
  std::string leader_address;
  uint64_t commit_position = 0;
  uint64_t applied_position = 0;
  // On the leader: each member's id and the newest position the leader knows its log holds
  // (Raft's match index; for the leader itself, what its own log has stored). Empty elsewhere.
  std::vector<std::pair<uint64_t, uint64_t>> replicated;
  // Above 0 once the leader has sent a snapshot through this position that this replica's mirror
  // does not reach (it was behind the leader's log): it cannot go on until it has the leader's
  // state up to there. Stays set until the replica is opened again.
  uint64_t needs_state_through = 0;
  // The oldest position libraft still holds in its log (in memory): a follower whose log ends
  // before it is sent a snapshot.
  uint64_t log_kept_from = 0;
  // Messages to a peer refused because too much was already queued for it (a peer the network
  // cut off: storage/raft_io_guard.h), since this log was opened.
  uint64_t sends_refused = 0;
  // Non-empty once a write to libraft's log failed (a full disk, an I/O error), naming the error.
  // libraft 0.15 keeps the entries it could not write in its memory as if written, and never
  // writes them again (a follower skips what its log already holds), so this replica can no
  // longer make progress: it must be opened again. Stays set until then.
  std::string log_write_failed;
};

class RaftLog final : public ReplicatedLog {
 public:
  // Opens (or, for an empty `raft_dir`, bootstraps) this node's replica and starts its loop
  // thread. InvalidArgument for a bad configuration (this node not among `peers`, an id of 0, a
  // duplicate id); the libraft error otherwise.
  static absl::StatusOr<std::unique_ptr<RaftLog>> Open(RaftLogOptions options);
  // Stops the replica (the others see it as down) and joins the loop thread.
  ~RaftLog() override;

  RaftLog(const RaftLog&) = delete;
  RaftLog& operator=(const RaftLog&) = delete;

  // The outcome of a proposal: its position once committed and mirrored here, or why not.
  using Decided = std::function<void(absl::StatusOr<uint64_t> outcome)>;

  // Propose and wait for the outcome.
  absl::StatusOr<uint64_t> Append(absl::string_view payload) override;
  // Appends without waiting: `decided` is called once with what Append would return, on the
  // loop thread (or on this one, when refused before anything is queued). Entries take
  // positions in the order they are proposed, and are decided in that order, so a caller may
  // have several in flight: the leader sends the next while a majority writes the one before
  // (docs/replication.md 9.3). An entry whose outcome is unknown (Unavailable) poisons the
  // log: every entry proposed after it is refused, not proposed, until Repair.
  void Propose(absl::string_view payload, Decided decided);
  // On the leader: commits a barrier (an entry of Raft's own) and returns its position once
  // every entry before it is committed and mirrored here, and on_committed has seen them: what a
  // new leader waits for before it decides anything (docs/replication.md 9.1). On a follower
  // FailedPrecondition naming the leader, as Append; Unavailable when leadership is lost before
  // the barrier commits. Never poisons the log.
  absl::StatusOr<uint64_t> Barrier();
  // Lifts the poison of a lost leadership. The entry's fate is the cluster's: if the new leader
  // kept it, it arrives through `on_committed` like any other.
  absl::Status Repair() override;
  absl::Status poisoned() const override;

  absl::Status ReadFrom(
      uint64_t from,
      const std::function<absl::Status(uint64_t position, absl::string_view payload)>& read)
      const override;
  // The mirror's reader: committed entries only.
  absl::StatusOr<std::unique_ptr<LogReader>> NewReader(uint64_t from) const override;
  absl::StatusOr<int> DropBefore(uint64_t position) override;
  uint64_t first_position() const override;
  uint64_t last_position() const override;
  absl::Status Sync() override;
  absl::Status PrepareAhead() override;
  std::vector<std::string> SegmentPaths() const override;
  size_t SegmentCount() const override;
  int64_t DiskBytes() const override;

  RaftStatus Status() const;

  struct Replica;  // The loop thread's state (raft_log.cc).

 private:
  explicit RaftLog(std::unique_ptr<Replica> replica);
  std::unique_ptr<Replica> replica_;
};

// Parses "1=host:port,2=host:port,3=host:port".
absl::StatusOr<std::vector<RaftPeer>> ParseRaftPeers(absl::string_view text);

}  // namespace ledger::storage

#endif  // LEDGER_STORAGE_RAFT_LOG_H_
