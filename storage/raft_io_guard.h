// Defines `RaftIoGuard`: what RaftLog puts between libraft 0.15 and its libuv I/O (raft_io), for
// two bugs of that version (Debian 12's; both fixed upstream in 2023, after 0.17.1) and one
// unbounded queue:
//
// - **One barrier at a time.** A truncation (a follower replacing entries that conflict with the
//   leader's) and a snapshot's write both ask the I/O for a barrier (close the open segment,
//   wait for the writes in flight). 0.15 keeps one barrier: a second, asked while the first is
//   pending, is lost or fires early, and the log on disk can end with a hole that the next start
//   refuses ("closed segment ... is past last snapshot"; upstream canonical/raft#431, fixed by
//   "UvBarrier: A barrier can have multiple barrier requests"). The fault schedule's cut-off
//   leaders hit it: a replica refused to start. So the guard holds a truncation (and the writes
//   after it, in order) while a snapshot is being written, and a snapshot's write while a
//   truncation is not known done. A truncation is done once a write sent after it completes:
//   the I/O holds such writes behind the truncation's barrier, and libraft always follows a
//   truncation with the write of the entries that replace it.
//   What is held is sent from `SendHeld`, which the loop calls once per iteration (its check
//   phase), never from inside the I/O's callback that freed it: 0.15 calls a snapshot's
//   callback before it clears that snapshot's barrier (uvSnapshotPutAfterWorkCb, then
//   UvUnblock), so a truncation sent from the callback would be the second barrier again. That
//   is how a replica's log still ended with a hole once in a dozen runs of the fault schedule
//   after the guard was first built (session 13).
// - **No write after a failed one.** A failed write (a full disk) leaves its entries in libraft's
//   memory as if written, and a later write could succeed after it, leaving a hole on disk. After
//   the first failure every write is refused at once (libraft takes back what it put in memory
//   for it), and `on_write_failed` says so: the replica must be opened again.
// - **A bounded queue per peer.** libraft hands every message to libuv, which queues what the
//   socket cannot take yet in memory; to a follower cut off by the network that is everything
//   the leader replicates until TCP gives the connection up, 15 minutes by Linux's default
//   (1.2 MiB/s at 2,000 Deposits/s, docs/replication.md 9.2 item 3). So a message to a peer
//   that already has `max_queued_bytes` of entries, or `max_queued_messages` messages, waiting
//   is refused (RAFT_NOCONNECTION): libraft takes it as lost, which Raft allows, and sends again
//   from where that peer's log ends once it answers.
//
// Loop thread only. Standard layout, with the raft_io first: libraft sees only that member, and
// the wrappers find the rest from it (as storage/raft_nodelay.h does for the transport).
#ifndef LEDGER_STORAGE_RAFT_IO_GUARD_H_
#define LEDGER_STORAGE_RAFT_IO_GUARD_H_

// libraft 0.15's headers lack extern "C" guards.
extern "C" {
#include <raft.h>
}

#include <cstdint>
#include <deque>
#include <functional>
#include <type_traits>
#include <unordered_map>

namespace ledger::storage {

struct RaftIoGuard {
  raft_io io{};  // First: what libraft is given, and what the wrappers are called with.

  // What the guard keeps: the I/O's own methods and the requests it holds.
  struct State {
    int (*append)(raft_io*, raft_io_append*, const raft_entry[], unsigned,
                  raft_io_append_cb) = nullptr;
    int (*truncate)(raft_io*, raft_index) = nullptr;
    int (*snapshot_put)(raft_io*, unsigned, raft_io_snapshot_put*, const raft_snapshot*,
                        raft_io_snapshot_put_cb) = nullptr;
    void (*close)(raft_io*, raft_io_close_cb) = nullptr;
    int (*send)(raft_io*, raft_io_send*, const raft_message*, raft_io_send_cb) = nullptr;
    // What each peer has queued: messages sent whose callback has not come, and their entries'
    // bytes; and the limits past which a message to it is refused.
    struct Queued {
      int64_t bytes = 0;
      int64_t messages = 0;
    };
    std::unordered_map<raft_id, Queued> queued;
    int64_t max_queued_bytes = int64_t{16} << 20;
    int64_t max_queued_messages = 4096;
    uint64_t sends_refused = 0;
    std::function<void(int code)> on_write_failed;
    bool write_failed = false;
    bool closing = false;
    bool snapshot_in_flight = false;
    bool truncating = false;  // A truncation sent, and no write sent after it has completed.
    uint64_t sent = 0;        // Requests sent to the I/O, numbered.
    uint64_t truncation_sent = 0;
    // Requests waiting, in libraft's order: each sends itself when what it waits for is done.
    struct Held {
      enum Kind { kAppend, kTruncate, kSnapshotPut } kind;
      std::function<void(int refusal)> send;  // refusal != 0: fail it (the I/O is closing).
    };
    std::deque<Held> held;
  };
  State* state = new State;  // Owned; a pointer keeps the guard standard layout.

  RaftIoGuard() = default;
  ~RaftIoGuard() { delete state; }
  RaftIoGuard(const RaftIoGuard&) = delete;
  RaftIoGuard& operator=(const RaftIoGuard&) = delete;

  // After the I/O is initialised (raft_uv_init on `io`), before libraft uses it.
  void Install(std::function<void(int code)> on_write_failed);

  // Sends, in order, what is held and may go now. The loop's check phase calls it each
  // iteration, after the I/O's callbacks of that iteration have returned (and the I/O has
  // cleared the barrier they completed).
  void SendHeld();

  // Messages refused because their peer's queue was full, since Install. Loop thread.
  uint64_t sends_refused() const { return state->sends_refused; }

  // For tests: whether requests are held.
  size_t held() const { return state->held.size(); }
};
static_assert(std::is_standard_layout_v<RaftIoGuard>);

}  // namespace ledger::storage

#endif  // LEDGER_STORAGE_RAFT_IO_GUARD_H_
