// Defines `LocalLog`, the journal's log on this machine's disk: numbered, checksummed entries in
// preallocated segment files, one write and one sync per entry. It is the truth of a durable
// ledger: RocksDB holds state derived from it and records the position it has applied (see
// docs/architecture.md, "The journal as a log").
//
// Why a file of our own (measured side by side with libraft and RocksDB in make bench-log,
// docs/architecture.md): one pwrite and one fdatasync per group commit into a segment that was
// zero-filled and synced when it was made, so that the sync writes data blocks only, never
// metadata.
//
// On disk, in the log directory: segment files named by the position of their first entry
// (`00000000000000000001.seg`), each a 32-byte header followed by entries, each
//   [u32 payload length][u32 CRC-32 of length, position and payload][u64 position][payload]
// padded with zeros to a multiple of 8 bytes, all little-endian. Positions are 1, 2, 3, ... with
// no gap, across segments. What follows the last entry is zeros.
#ifndef LEDGER_STORAGE_LOCAL_LOG_H_
#define LEDGER_STORAGE_LOCAL_LOG_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/annotated_mutex.h"
#include "storage/replicated_log.h"

namespace ledger::storage {

inline constexpr int64_t kDefaultLogSegmentBytes = int64_t{64} << 20;

struct LocalLogOptions {
  std::string dir;
  // The size of a new segment; an entry larger than that gets a segment of its own size.
  int64_t segment_bytes = kDefaultLogSegmentBytes;
  // fdatasync every append (durability sync); false leaves the entry to the OS (async).
  bool sync = true;
  // Segments zero-filled and synced when made (what a log appended to after a crash needs);
  // false: sized as a hole, nothing synced, for a copy that is only read back (a backup's).
  bool durable_segments = true;
  // Tests only: called before each system call the log makes to write ("write", "sync",
  // "segment"); a non-OK status fails it as the system call would have.
  std::function<absl::Status(absl::string_view step)> fault;
};

// What Open found.
struct LogRecovery {
  uint64_t first_position = 0;  // The oldest entry kept; last_position + 1 when none.
  uint64_t last_position = 0;   // 0 when the log never held an entry.
  int64_t entries = 0;
  // A torn tail: the bytes of the unfinished last entry (never acknowledged) that were zeroed,
  // and where. 0 when the log ended cleanly.
  int64_t torn_bytes = 0;
  std::string torn_at;
};

// The single-node ReplicatedLog. Append and Repair from one thread (the journal thread), which
// does their I/O without holding the lock, so that ReadFrom, DropBefore and the accessors (any
// thread) never wait for a sync.
class LocalLog final : public ReplicatedLog {
 public:
  // Makes `dir` (which must not exist or be empty) a log whose first entry will be `next`.
  // `durable_segments`: as LocalLogOptions says.
  static absl::Status Create(const std::string& dir, uint64_t next_position,
                             int64_t segment_bytes = kDefaultLogSegmentBytes,
                             bool durable_segments = true);

  // Opens the log and recovers it:
  //  - a torn tail (the last entry cut at any byte, or its checksum wrong, with nothing valid
  //    after it) is the end of the log: it is zeroed and every entry before it is kept;
  //  - a bad entry with a valid entry after it is corruption: DataLoss naming the segment file
  //    and the offset, and nothing is changed.
  static absl::StatusOr<std::unique_ptr<LocalLog>> Open(const LocalLogOptions& options,
                                                        LogRecovery* recovery = nullptr);
  ~LocalLog() override;

  LocalLog(const LocalLog&) = delete;
  LocalLog& operator=(const LocalLog&) = delete;

  // Appends `payload` as the entry at last_position() + 1 and, with options.sync, makes it
  // durable. Returns its position. A failure of the write or of the sync poisons the log: the
  // entry may or may not be on disk, so every later Append fails with the same error until
  // Repair has made the disk definite again (PostgreSQL's lesson: a failed fsync is never
  // retried as if the data were safe).
  absl::StatusOr<uint64_t> Append(absl::string_view payload) override;

  // After a failed Append: zeroes the failed entry's bytes and syncs, so that it is on disk in
  // no form, and lifts the poison. OK at once when the log is not poisoned.
  absl::Status Repair() override;
  // Makes a spare segment (zero-filled and synced, under a temporary name) unless one is ready,
  // so that the append that fills the current segment takes it instead of filling 64 MiB with
  // zeros on the journal thread. Call from a thread other than the journal thread (the
  // applier); a no-op while a spare is ready or being made.
  absl::Status PrepareSpare() ABSL_LOCKS_EXCLUDED(spare_mu_);
  // Without options.sync: fdatasyncs the segment appended to (a roll syncs the one it leaves), so
  // that every entry appended before the call is durable. Any thread.
  absl::Status Sync() override ABSL_LOCKS_EXCLUDED(fd_mu_, mu_);
  absl::Status PrepareAhead() override { return PrepareSpare(); }
  // The poisoning error; OK while appends are allowed.
  absl::Status poisoned() const override ABSL_LOCKS_EXCLUDED(mu_);

  // Calls `read` for every entry from `from` (at least first_position()) to the last, in order.
  // Stops at `read`'s first error and returns it.
  absl::Status ReadFrom(
      uint64_t from,
      const std::function<absl::Status(uint64_t position, absl::string_view payload)>& read)
      const override ABSL_LOCKS_EXCLUDED(mu_);

  // A LocalLogReader (storage/local_log_reader.h).
  absl::StatusOr<std::unique_ptr<LogReader>> NewReader(uint64_t from) const override;
  // Where a reader finds `position`: the segment holding it, the position at which the
  // segment's next entries end there (0 while it is the one appended to) and the nearest known
  // entry at or before `position` (a mark of the segment appended to, else its first entry).
  // OutOfRange, naming the oldest entry kept, below first_position().
  struct SegmentPlace {
    std::string path;
    uint64_t end_position = 0;
    uint64_t start_position = 0;
    int64_t start_offset = 0;
    // The segment appended to: where its entries end now (0 for the others, or not known).
    int64_t written_end = 0;
  };
  absl::StatusOr<SegmentPlace> Locate(uint64_t position) const ABSL_LOCKS_EXCLUDED(mu_);

  // Deletes the segments whose every entry is below `position` (never the one being written).
  // Returns how many were deleted.
  absl::StatusOr<int> DropBefore(uint64_t position) override ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t first_position() const override ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t last_position() const override ABSL_LOCKS_EXCLUDED(mu_);
  // The segment files, oldest first (for tests and backups), and how many there are.
  std::vector<std::string> SegmentPaths() const override ABSL_LOCKS_EXCLUDED(mu_);
  size_t SegmentCount() const override ABSL_LOCKS_EXCLUDED(mu_);
  // Bytes the segment files take on disk.
  int64_t DiskBytes() const override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Segment {
    uint64_t first_position = 0;
    std::string path;
    int64_t size = 0;  // The file's size: preallocated.
  };
  LocalLog(LocalLogOptions options, std::vector<Segment> segments, int active_fd,
           int64_t write_offset, uint64_t first_position, uint64_t last_position);

  // Makes a new, zero-filled, synced segment for entries from `first` holding at least
  // `min_bytes` of entries, and makes it the one appended to. Journal thread.
  absl::Status Roll(uint64_t first, int64_t min_bytes) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Fault(absl::string_view step) const;
  // The fd of the spare segment, renamed to `path` and given the header of `first`; -1 when no
  // spare of at least `size` bytes is ready. Journal thread.
  int TakeSpare(uint64_t first, int64_t size, const std::string& path, absl::Status& failure)
      ABSL_LOCKS_EXCLUDED(spare_mu_);

  const LocalLogOptions options_;
  mutable ::ledger::Mutex mu_;
  std::vector<Segment> segments_ ABSL_GUARDED_BY(mu_);
  uint64_t first_position_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t last_position_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status poison_ ABSL_GUARDED_BY(mu_);
  // The segment appended to: (position, offset) of every kMarkEvery-th entry appended since it
  // was made, and where its last entry ends (0: not known, after Open), so that ReadFrom reads
  // only the part it needs (a backup reads the newest entries).
  static constexpr uint64_t kMarkEvery = 64;
  std::vector<std::pair<uint64_t, int64_t>> active_marks_ ABSL_GUARDED_BY(mu_);
  int64_t active_end_ ABSL_GUARDED_BY(mu_) = 0;
  // The journal thread's alone (Append, Repair, Roll): the segment appended to, its path and size
  // (the last of segments_, which DropBefore never deletes), and where the next entry goes.
  // Roll changes active_fd_ and active_path_ under fd_mu_ too, under which Sync (any thread)
  // reads them.
  ::ledger::Mutex fd_mu_;
  int active_fd_ = -1;
  std::string active_path_;
  int64_t active_size_ = 0;
  int64_t write_offset_ = 0;
  int64_t poisoned_offset_ = 0;
  int64_t poisoned_bytes_ = 0;
  // A Sync failed: Repair cannot make the log definite (the entries it covered may be lost in
  // any part), so the poison stays until a restart recovers the log.
  bool sync_failed_ ABSL_GUARDED_BY(mu_) = false;

  // The spare segment: PrepareSpare makes it, TakeSpare renames it into the log.
  enum class Spare : uint8_t { kNone, kMaking, kReady, kTaking };
  ::ledger::Mutex spare_mu_;
  Spare spare_ ABSL_GUARDED_BY(spare_mu_) = Spare::kNone;
  int64_t spare_size_ ABSL_GUARDED_BY(spare_mu_) = 0;
};

// The name of the segment whose first entry is `first_position`.
std::string LogSegmentName(uint64_t first_position);

// Writes the entries `first` to `last` of `log` (every one of them must be kept there: see
// DropBefore) into a new log in `dir`, which must not exist, with segments of `segment_bytes`:
// the log part of a backup. Every entry's checksum is verified as it is read (DataLoss names
// one that fails). Not synced: the copy is read back at once and streamed, never relied on.
absl::Status CopyLogEntries(const ReplicatedLog& log, uint64_t first, uint64_t last,
                            const std::string& dir, int64_t segment_bytes);

}  // namespace ledger::storage

#endif  // LEDGER_STORAGE_LOCAL_LOG_H_
