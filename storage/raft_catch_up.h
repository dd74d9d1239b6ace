// Defines `CatchUpWindow`: how many entries libraft keeps behind each snapshot (its "trailing"
// count), so that a follower that took the leader's state catches up from the leader's log
// instead of chasing it (docs/replication.md 9.2, item 9).
//
// libraft 0.15 keeps a fixed count behind a snapshot (128 by default) and sends a follower that
// is further behind its newest snapshot, which for ledgerd is only a manifest: the follower
// fetches the leader's state (server/state_transfer.h) and starts again with libraft's log at
// the index of the snapshot it was sent. By then a busy leader has snapshotted again and
// dropped more than 128 entries past that index, so it sends the follower a snapshot once more:
// seen six times in a row under ASan, where a fetch and restart take 5 s. So, while a follower
// is being caught up, the leader keeps every entry from the newest index such a follower
// holds, up to `max_bytes` of payload (libraft holds those entries in memory); beyond that, the
// fixed count again, and the follower fetches the state once more.
//
// Loop thread only: plain data, no libraft.
#ifndef LEDGER_STORAGE_RAFT_CATCH_UP_H_
#define LEDGER_STORAGE_RAFT_CATCH_UP_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <utility>

namespace ledger::storage {

class CatchUpWindow {
 public:
  // `floor`: the count kept behind every snapshot. `max_bytes`: the most payload kept for a
  // follower being caught up.
  CatchUpWindow(unsigned floor, int64_t max_bytes) : floor_(floor), max_bytes_(max_bytes) {}

  // The entry at `position` (each one after the last) was committed with `bytes` of payload.
  // Positions may skip (Raft's own entries carry no payload); a position at or before the last
  // one is ignored (replayed after a restart).
  void Committed(uint64_t position, int64_t bytes);

  // How many entries to keep behind a snapshot through `snapshot_position`, when the lowest of
  // the newest positions the followers being caught up hold is `slowest` (none: nullopt).
  // Forgets what it no longer needs: positions before what the answer keeps.
  unsigned TrailingFor(uint64_t snapshot_position, std::optional<uint64_t> slowest);

  // For tests: how many positions it remembers.
  size_t remembered() const { return cumulative_.size(); }

 private:
  // Payload bytes committed through `position` since this window began, or nullopt when it
  // began after `position`.
  std::optional<int64_t> BytesThrough(uint64_t position) const;

  const unsigned floor_;
  const int64_t max_bytes_;
  // What is known: every position after `known_after_` (none before the first commit). For
  // each committed one, ascending, (position, payload bytes from the window's start through
  // it); `base_`: those bytes through `known_after_`.
  bool started_ = false;
  uint64_t known_after_ = 0;
  int64_t base_ = 0;
  std::deque<std::pair<uint64_t, int64_t>> cumulative_;
};

}  // namespace ledger::storage

#endif  // LEDGER_STORAGE_RAFT_CATCH_UP_H_
