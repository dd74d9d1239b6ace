// Defines `ReplicatedLog`, the seam between the journal and its log (docs/replication.md, 6.2):
// everything RocksDbStore asks of the log it appends each group commit to, drops behind its
// checkpoints and replays at start-up. Implementations:
//  - LocalLog (storage/local_log.h): this machine's disk, the single-node default;
//  - SimLog (sim/sim_log.h): the simulator's, in memory, which fails writes and syncs and tears
//    the unfinished tail at seeded moments;
//  - RaftLog (storage/raft_log.h, issue 32): committed on a majority of three replicas, through
//    libraft; a cluster replica's (ledgerd --peers).
//
// Append is synchronous: it returns once the entry is committed (LocalLog: written and synced),
// and the journal thread that called it then releases the group's answers in order. That is
// what one node needs; a replicated log whose commits take a round trip also proposes without
// waiting (RaftLog::Propose), so that the journal keeps several group commits in flight
// (LedgerStore::StartGroupWrite, docs/replication.md 9.2).
//
// Header only (no I/O, no RocksDB), so that sim/ builds on it in every tree, the
// ThreadSanitizer one included.
#ifndef LEDGER_STORAGE_REPLICATED_LOG_H_
#define LEDGER_STORAGE_REPLICATED_LOG_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ledger::storage {

// A place in a log, followed forward (a watcher's: server/watch_feed.h). It keeps where it
// stopped, so that following the log costs a read of the new entries, never a search from the
// start of a segment, and it holds no file open between calls (thousands of watchers cost no
// descriptors). One thread at a time.
class LogReader {
 public:
  virtual ~LogReader() = default;
  // Calls `read` for the entries from next_position() up to `last` (at most the log's
  // last_position()), in order, and stops after the entry whose payload brings the bytes passed
  // in this call to `max_bytes` or more. Returns how many it passed (0 when next_position() is
  // past `last`). OutOfRange, naming the oldest entry kept, once the log no longer keeps
  // next_position() (DropBefore let it go); DataLoss for an entry that cannot be read back.
  virtual absl::StatusOr<int> Read(
      uint64_t last, int64_t max_bytes,
      const std::function<void(uint64_t position, absl::string_view payload)>& read) = 0;
  // The position of the next entry Read passes.
  virtual uint64_t next_position() const = 0;
};

// Append and Repair from one thread (the journal thread); the rest from any thread.
class ReplicatedLog {
 public:
  virtual ~ReplicatedLog() = default;

  // Appends `payload` as the entry at last_position() + 1 and commits it; returns its position.
  // A failure poisons the log: the entry may or may not survive a restart (its bytes reached the
  // disk in no known form), so every later Append fails with the same error until Repair has
  // made the log definite again. Never retried as if the data were safe.
  virtual absl::StatusOr<uint64_t> Append(absl::string_view payload) = 0;
  // After a failed Append: removes the failed entry for good (it is in the log in no form) and
  // lifts the poison. OK at once when the log is not poisoned. Until Repair, a restart decides
  // the failed entry: whole (it is kept) or torn (it is not).
  virtual absl::Status Repair() = 0;
  // The poisoning error; OK while appends are allowed.
  virtual absl::Status poisoned() const = 0;

  // Calls `read` for every entry from `from` (at least first_position()) to the last, in order.
  // Stops at `read`'s first error and returns it.
  virtual absl::Status ReadFrom(
      uint64_t from,
      const std::function<absl::Status(uint64_t position, absl::string_view payload)>& read)
      const = 0;
  // A reader whose first entry is `from` (which may be past the last entry: it waits there).
  // OutOfRange, naming the oldest entry kept, when `from` is below first_position(). The log
  // must outlive it.
  virtual absl::StatusOr<std::unique_ptr<LogReader>> NewReader(uint64_t from) const = 0;
  // Lets go of entries below `position` that the derived state has made durable (a checkpoint);
  // a log keeps whole segments, so some may stay. Returns how many segments went.
  virtual absl::StatusOr<int> DropBefore(uint64_t position) = 0;
  // The oldest entry kept (last_position() + 1 when none) and the newest committed.
  virtual uint64_t first_position() const = 0;
  virtual uint64_t last_position() const = 0;

  // Makes every entry appended so far durable; any thread. What a checkpoint calls before it
  // records the position it has applied, so that the log never ends before it after a crash. A
  // log that syncs each append (LocalLog in durability sync) has nothing to do. A failure
  // poisons the log for good: what the failed sync held may be lost, and only a restart (its
  // recovery) decides it.
  virtual absl::Status Sync() = 0;

  // Work an append would otherwise do on the journal thread (LocalLog: the next segment, made
  // and synced ahead of time), done from another thread (the applier). Cheap when done already.
  virtual absl::Status PrepareAhead() = 0;
  // The log's files, oldest first, how many, and what they take on disk. More than one segment
  // means a checkpoint can let the oldest go.
  virtual std::vector<std::string> SegmentPaths() const = 0;
  virtual size_t SegmentCount() const = 0;
  virtual int64_t DiskBytes() const = 0;
};

}  // namespace ledger::storage

#endif  // LEDGER_STORAGE_REPLICATED_LOG_H_
