// Defines `SimLog`, the simulator's storage::ReplicatedLog: entries held in memory, whose appends
// fail at seeded moments as a disk fails them, and whose unfinished tail a restart keeps whole or
// finds torn, as LocalLog's recovery would (docs/architecture.md, "Faults of the log").
//
// A failed append poisons the log, as LocalLog's does. Its entry is then on disk in no known form:
//  - Repair (the journal's next write) removes it for good;
//  - a restart before that (a crash, or a clean stop: the store's destructor does not repair)
//    decides it: when its write had finished and only the sync failed, the seed says whether its
//    bytes all reached the disk (the entry is kept, at the next position) or not (a torn tail,
//    dropped); an entry whose write failed is always torn.
// A lost leadership (a cluster replica's RaftLog: the entry was sent, and the replica stopped
// leading before a majority acknowledged it) poisons the log too, but nothing here can take the
// entry back: the next leader commits it or not. So Repair refuses (ledgerd drains and starts
// again as a follower before it writes anything more, and the simulator restarts at once), and
// the restart learns its fate, kept or dropped as the seed says. A replica keeps several entries
// in flight (ledgerd --raft_writes_in_flight): those sent behind the lost one
// (AppendBehindLostLeadership) are undecided with it, and the next leader keeps a prefix of them
// (Raft commits in order), as long as the seed says.
// Entries live in segments of kEntriesPerSegment, and DropBefore lets go only of whole segments
// behind the one appended to, so that a replay after a checkpoint meets entries it already holds.
#ifndef LEDGER_SIM_SIM_LOG_H_
#define LEDGER_SIM_SIM_LOG_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "storage/replicated_log.h"

namespace ledger::sim {

// What the next Append does.
enum class AppendFault : uint8_t {
  kNone,
  kWriteFails,      // The write fails part way: what reached the disk is a torn entry.
  kSyncFails,       // The write finished but the sync failed: the entry may be whole on disk.
  kLeadershipLost,  // Sent, then the replica stopped leading: the next leader decides it.
};

// What a restart found at the end of the log.
struct SimLogRecovery {
  bool had_failed_entry = false;  // An append had failed, and no Repair had removed its entry.
  bool kept = false;              // It was whole on disk: the log keeps it, at the next position.
  int64_t torn_bytes = 0;         // Otherwise the bytes of it a restart found and dropped.
  bool leadership_lost = false;   // It was in flight when leadership was lost.
  // Entries undecided at the restart: the failed one and those sent behind it at the loss of
  // leadership; and how many of them, from the first, the log kept.
  size_t undecided_entries = 0;
  size_t kept_entries = 0;
};

// Test-only bugs, to prove the simulator's auditor sees what the log does to entries.
enum class SimLogBugForTesting : uint8_t {
  kNone,
  // Repair lifts the poison without removing the failed entry (as a LocalLog::Repair that skipped
  // zeroing it and wrote on after it): the entry stays in the log, ahead of writes decided
  // without it, and the next restart's replay brings it back.
  kRepairKeepsTheFailedEntry,
  // Repair after a lost leadership lifts the poison as after a failed sync, and the entry's fate
  // stays the next leader's: a restart may still find it committed, at the end of the log.
  kRepairsALostLeadership,
};

// Not thread-safe: the simulator drives it from one thread.
class SimLog final : public storage::ReplicatedLog {
 public:
  static constexpr uint64_t kEntriesPerSegment = 8;

  // `rng` is the simulator's (not owned); it decides what a restart finds.
  explicit SimLog(std::mt19937_64* rng, SimLogBugForTesting bug = SimLogBugForTesting::kNone)
      : rng_(rng), bug_(bug) {}

  // The fault of the next Append (one plan, one append).
  void PlanAppend(AppendFault fault) { planned_ = fault; }
  // The process stops and the log is opened again: the poison is gone, and a failed entry not yet
  // repaired is kept or dropped as the class comment says.
  SimLogRecovery Reopen();
  // Restarts that found a torn tail, and that kept a failed entry whole.
  int64_t torn_tails() const { return torn_tails_; }
  int64_t kept_failed_entries() const { return kept_failed_entries_; }

  absl::StatusOr<uint64_t> Append(absl::string_view payload) override;
  // After a lost leadership (the log is poisoned by it): `payload`'s entry had been sent behind
  // the lost one before the loss was known, so it is undecided with it (a restart keeps a prefix
  // of them). Returns the poison. Any other poison: the entry was never sent, and the poison is
  // returned with nothing kept.
  absl::Status AppendBehindLostLeadership(absl::string_view payload);
  absl::Status Repair() override;
  absl::Status poisoned() const override { return poison_; }
  absl::Status ReadFrom(
      uint64_t from,
      const std::function<absl::Status(uint64_t position, absl::string_view payload)>& read)
      const override;
  // Entries as they are at each Read (what a restart tore is no longer there).
  absl::StatusOr<std::unique_ptr<storage::LogReader>> NewReader(uint64_t from) const override;
  absl::StatusOr<int> DropBefore(uint64_t position) override;
  uint64_t first_position() const override { return first_position_; }
  uint64_t last_position() const override { return first_position_ + entries_.size() - 1; }
  // Every SimLog append is synced (or fails) as it is made.
  absl::Status Sync() override { return absl::OkStatus(); }
  absl::Status PrepareAhead() override { return absl::OkStatus(); }
  std::vector<std::string> SegmentPaths() const override;
  size_t SegmentCount() const override;
  int64_t DiskBytes() const override { return bytes_; }

 private:
  struct FailedEntry {
    std::string payload;
    bool written = false;  // The write finished (only the sync failed), or it was sent.
    bool leadership_lost = false;
  };
  // The first position of the segment holding `position`.
  static uint64_t SegmentStart(uint64_t position) {
    return position - (position - 1) % kEntriesPerSegment;
  }
  void Commit(std::string payload);

  std::mt19937_64* const rng_;
  const SimLogBugForTesting bug_;
  AppendFault planned_ = AppendFault::kNone;
  std::deque<std::string> entries_;  // Positions first_position_, first_position_ + 1, ...
  uint64_t first_position_ = 1;
  int64_t bytes_ = 0;
  absl::Status poison_;
  // The failed entry, then those sent behind it at a loss of leadership.
  std::vector<FailedEntry> failed_;
  int64_t torn_tails_ = 0;
  int64_t kept_failed_entries_ = 0;
};

}  // namespace ledger::sim

#endif  // LEDGER_SIM_SIM_LOG_H_
