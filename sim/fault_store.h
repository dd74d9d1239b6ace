// Defines `FaultStore`, the simulator's LedgerStore: kept in memory, single-threaded and
// deterministic, it fails writes and lookups as the simulator plans them, and reports what really
// happened (did the failed write land?) so the auditor can resolve ambiguous replies.
//
// It is shaped as RocksDbStore is (docs/architecture.md, "Durability"): a group write appends one
// entry to its log, a SimLog behind the same ReplicatedLog seam as LocalLog (sim/sim_log.h: failed
// writes and syncs, torn tails at a restart), and the state lookups read is derived from the log
// behind it, by an applier the simulator runs at seeded moments. The durable truth is what a
// restart's replay of that log gives. Lookups that must not wait (the ...InMemory ones) see the
// transfer records of entries the applier has not reached only when
// `storage::UnappliedRecords::Keeps` says it keeps them, exactly as the real store; the lookups
// that may block see them always, and never wait for the applier either; listings and account and
// History reads wait for it (they apply everything first). Idempotency records skip the applier:
// they are held in memory from their write until a checkpoint (storage::RecentRequests), which the
// simulator takes at seeded moments and at every clean stop and backup, and no lookup of them
// waits for the applier. A crash loses what is held in memory and replays the log from the last
// checkpoint.
//
// The simulator builds without storage/'s record encoding (protobuf), so that it runs in every
// tree: a log entry's payload names the group it holds, which the store keeps decoded beside it.
#ifndef LEDGER_SIM_FAULT_STORE_H_
#define LEDGER_SIM_FAULT_STORE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "shard/ledger_store.h"
#include "sim/sim_log.h"

namespace ledger::sim {

// What the next WriteGroup does.
enum class WriteFault : uint8_t {
  kNone,
  // The log's write fails part way: the entry is torn, and nothing of the group is ever stored.
  kFail,
  // The write finished but its sync failed: the entry is on disk in no known form until the next
  // write repairs the log (it is gone) or a restart comes first and finds it whole (it is kept)
  // or torn, as the seed says (SimLog::Reopen).
  kSyncFails,
  // A cluster replica stops leading with the group's entry sent: the next leader commits it or
  // not, which only the restart that follows learns (kept or dropped, as the seed says); no
  // write may come before that restart (sim/sim_log.h).
  kLeadershipLost,
};

// Test-only bugs of the store itself, to prove the auditor checks the durable state.
enum class StoreBugForTesting : uint8_t {
  kNone,
  kLoseAcknowledgedWrites,  // Every tenth successful write stores nothing but answers OK.
  // The lookups that must not wait miss the records the applier has not reached (as if the
  // store kept no UnappliedRecords): a retry may be decided as new.
  kLookupsMissUnappliedRecords,
  // A backup copies the applied tables but not the log entries after them (as if StageBackup
  // copied only RocksDB's checkpoint): its restore misses writes the log holds.
  kBackupMissesTheLogAfterTheTables,
  // A checkpoint drops the idempotency records held in memory instead of writing them to the
  // tables (as if it went on after their table failed to be ingested): retries after it are
  // decided as new.
  kCheckpointDropsRecentRequests,
  // The log's Repair keeps the failed entry (SimLogBugForTesting::kRepairKeepsTheFailedEntry):
  // a write the shards rolled back and answered outcome unknown comes back at a restart, behind
  // writes decided without it.
  kRepairKeepsTheFailedEntry,
  // A replica that lost its leadership with an entry in flight repairs its log as after a
  // failed sync and writes on (SimLogBugForTesting::kRepairsALostLeadership), as a ledgerd that
  // did not start again as a follower would: the next leader may still commit that entry, behind
  // writes decided without it.
  kRepairsALostLeadership,
  // A group write started behind one that failed repairs the log and lands, as
  // RocksDbStore::StartGroupWrite would if it ignored behind_writes_in_flight: the shards roll
  // it back with the failed one (it may hold batches decided on top of it), yet the log keeps it.
  kRepairsUnderWritesInFlight,
  // A snapshot of accounts (Watch with_balances) names the newest acknowledged position instead
  // of the one the applier reached, as ReadAccountsAtApplied would if it read applied_ and the
  // log's position apart: the entries in between are neither in the states nor in the stream.
  kSnapshotNamesTheAcknowledgedPosition,
};

// The fault plan of one group write (several sealed batches, one WriteGroup).
struct WritePlan {
  WriteFault write = WriteFault::kNone;
  // A slow write: the simulated clock advances by this much inside WriteGroup.
  absl::Duration write_delay = absl::ZeroDuration();
};

// The fault plan of the lookups one batch's Prefetch makes.
struct LookupPlan {
  // Each FindRequest/FindRequestInMemory/FindAccount fails with this probability (percent).
  int fail_percent = 0;
  // Each FindRequestInMemory that does not fail says "only on disk" with this probability, so
  // that the core must prefetch again from a thread that may block.
  int memory_miss_percent = 0;
};

// What the store did during one group write: the ground truth the auditor resolves ambiguity with.
struct WriteFacts {
  bool write_called = false;
  WriteFault write_result = WriteFault::kNone;
  // The write first repaired the log after an earlier failed append: that entry is gone for good.
  bool repaired = false;
};

// Not thread-safe: the simulator drives one core from one thread.
class FaultStore final : public LedgerStore {
 public:
  // `clock` and `rng` are the simulator's; not owned, must outlive the store.
  FaultStore(absl::Time* clock, std::mt19937_64* rng, StoreBugForTesting bug)
      : clock_(clock),
        rng_(rng),
        bug_(bug),
        log_(rng, bug == StoreBugForTesting::kRepairKeepsTheFailedEntry
                      ? SimLogBugForTesting::kRepairKeepsTheFailedEntry
                  : bug == StoreBugForTesting::kRepairsALostLeadership
                      ? SimLogBugForTesting::kRepairsALostLeadership
                      : SimLogBugForTesting::kNone) {}

  // The plan of the next group write; its facts are reset. One plan serves one WriteGroup.
  void PlanWrite(const WritePlan& plan) {
    write_plan_ = plan;
    write_facts_ = {};
  }
  const WriteFacts& write_facts() const { return write_facts_; }

  // The plan of the lookups from here on; the count of failed lookups is reset.
  void PlanLookups(const LookupPlan& plan) {
    lookup_plan_ = plan;
    lookup_failures_ = 0;
  }
  int lookup_failures() const { return lookup_failures_; }
  // A Prefetch that returned false discarded what it looked up: its failures explain no reply.
  void ForgetLookupFailures(int back_to) { lookup_failures_ = back_to; }

  // The applier: applies the oldest `count` log entries it has not reached (all when fewer) to
  // the derived state lookups read.
  void ApplyEntries(size_t count);
  void ApplyAll() { ApplyEntries(unapplied_.size()); }
  // A checkpoint (RocksDbStore::Checkpoint): the idempotency records held in memory reach the
  // tables, and a crash replays only the log after the applied position.
  void Checkpoint();
  // A restart, after a crash or a clean stop: what was held in memory is gone, the log decides
  // the entry of a failed append that no write repaired (SimLog::Reopen), and the open replays
  // the log after the last checkpoint over the tables (idempotency records among them). The
  // durable truth is what that replay gives.
  SimLogRecovery Reopen();
  const SimLog& log() const { return log_; }
  // The newest position acknowledged: appended by a write that succeeded, or found in the log
  // by the last Reopen. What RocksDbStore::log_position() gives a watcher to read up to.
  uint64_t acknowledged_position() const { return acknowledged_; }
  // RocksDbStore::ReadAccountsAtApplied (Watch with_balances): the states of `account_ids` in
  // the derived state the lookups read (nullopt: never opened there), and the position the
  // applier has reached, which they are exactly as of.
  struct AccountsAt {
    uint64_t position = 0;
    std::vector<std::optional<AccountState>> states;
  };
  AccountsAt AccountsAtApplied(const std::vector<std::string>& account_ids) const;
  // The journal entries of the log entry `payload` (one of this store's), in decided order: what
  // a watcher learns from it.
  std::vector<JournalEntry> JournalOf(absl::string_view payload) const;
  size_t unapplied_entries() const { return unapplied_.size(); }
  // Lookups answered from an entry the applier had not reached: what the lag exercised.
  int64_t unapplied_answers() const { return unapplied_answers_; }
  // Batches of request_id lookups that failed whole (FindRequests).
  int64_t failed_lookup_batches() const { return failed_lookup_batches_; }

  // A backup as RocksDbStore::StageBackup makes one (docs/operations.md, "Backing up and
  // restoring"): the derived state at the applied position (the tables of its checkpoint) and
  // the log entries after it, up to the newest.
  struct Backup;
  Backup TakeBackup();
  // Restores `backup` as `ledgerd restore` does (the tables, then the log replayed over them)
  // and compares it with the durable truth at the moment it was taken: "" when equal, else the
  // first difference.
  std::string CheckBackup(const Backup& backup) const;

  using LedgerStore::Write;
  absl::Status WriteGroup(absl::Span<const BatchWrite* const> group) override;
  // A group whose write started behind one that failed, and ends after it (a replica's writes in
  // flight, RocksDbStore::StartGroupWrite): it fails too. After a lost leadership its entry had
  // been sent, so the next leader decides it with the lost one (SimLog::
  // AppendBehindLostLeadership, facts kLeadershipLost); after any other failure it never
  // reached the log (kFail). Its facts replace the plan's.
  absl::Status WriteGroupBehindFailure(absl::Span<const BatchWrite* const> group);
  absl::StatusOr<std::optional<RequestRecord>> FindRequest(absl::string_view account_id,
                                                           absl::string_view request_id) override;
  absl::StatusOr<MemoryLookup> FindRequestInMemory(absl::string_view account_id,
                                                   absl::string_view request_id) override;
  // As RocksDbStore: a batch that may block is one read (MultiGet) for the keys not held in
  // memory, and when that read fails, every one of them fails with it.
  std::vector<absl::StatusOr<MemoryLookup>> FindRequests(absl::Span<const RequestKeyRef> keys,
                                                         bool may_block) override;
  absl::StatusOr<std::optional<AccountState>> FindAccount(absl::string_view account_id) override;
  absl::StatusOr<std::optional<TransferRecord>> FindTransfer(absl::string_view transfer_id,
                                                             absl::string_view from) override;
  absl::StatusOr<std::optional<CreditReceipt>> FindCredit(absl::string_view transfer_id) override;
  absl::StatusOr<std::vector<TransferRecord>> FindPendingTransfers(
      absl::string_view transfer_id) override;
  absl::StatusOr<TransferLookup> FindTransferInMemory(absl::string_view transfer_id,
                                                      absl::string_view from) override;
  absl::StatusOr<CreditLookup> FindCreditInMemory(absl::string_view transfer_id) override;
  // The final transfer records by transfer_id.
  const std::map<std::string, TransferRecord>& transfers() const { return truth_.transfers; }
  // The credit receipts by transfer_id, and the pending records by (transfer_id, source): what
  // recovery resumes, and what the transfer auditor checks the journal against.
  const std::map<std::string, CreditReceipt>& credits() const { return truth_.credits; }
  const std::map<std::pair<std::string, std::string>, TransferRecord>& pending() const {
    return truth_.pending;
  }

  // The durable state (every log entry applied), as a restart or the auditor reads it.
  const std::map<std::string, AccountState>& accounts() const { return truth_.accounts; }
  const std::map<std::pair<std::string, std::string>, RequestRecord>& requests() const {
    return truth_.requests;
  }
  const std::vector<JournalEntry>& journal() const { return truth_.journal; }
  // Grows with every change of the durable state (the journal only grows).
  uint64_t version() const { return version_; }

 private:
  // The state derived from the log: all of it (the truth), or what the applier has reached.
  struct State {
    std::map<std::string, AccountState> accounts;
    std::map<std::pair<std::string, std::string>, RequestRecord> requests;
    std::vector<JournalEntry> journal;
    std::map<std::string, TransferRecord> transfers;
    std::map<std::string, CreditReceipt> credits;
    std::map<std::pair<std::string, std::string>, TransferRecord> pending;
  };
  // Where two states first differ, or "".
  static std::string FirstDifference(const State& restored, const State& truth);
  bool LookupFails();
  // `with_requests` false: as the applier, which leaves idempotency records to checkpoints.
  static void Apply(const BatchWrite& batch, State& state, bool with_requests = true);
  // The group appended at `position`: to the truth and the records held in memory.
  void Append(const std::vector<BatchWrite>& batches, uint64_t position);
  // Keeps a copy of `group` under a new group id, which its log entry's payload names.
  uint64_t KeepGroup(absl::Span<const BatchWrite* const> group);
  uint64_t acknowledged_ = 0;
  // The group a log entry's payload names.
  const std::vector<BatchWrite>& GroupOf(absl::string_view payload) const;
  // Whether a lookup that must not wait sees the unapplied entries of records of this kind.
  bool SeesUnapplied(bool request_record) const;
  // The newest unapplied change of a record, searched newest entry first.
  const TransferWrite* UnappliedTransfer(absl::string_view transfer_id,
                                         absl::string_view from) const;
  const CreditWrite* UnappliedCredit(absl::string_view transfer_id) const;
  // A transfer's record or a credit's receipt as the store reads it, never waiting for the
  // applier: from the unapplied entries when `sees` them, else from what the applier reached.
  TransferLookup LookUpTransfer(absl::string_view transfer_id, absl::string_view from, bool sees);
  CreditLookup LookUpCredit(absl::string_view transfer_id, bool sees);

  absl::Time* const clock_;
  std::mt19937_64* const rng_;
  const StoreBugForTesting bug_;
  WritePlan write_plan_;
  WriteFacts write_facts_;
  // The last WriteGroup sent its entry and then lost the leadership: the writes started behind
  // it were sent too (WriteGroupBehindFailure).
  bool sent_before_leadership_lost_ = false;
  // The group of the last append that failed (the first a restart may keep, while the log is
  // poisoned).
  uint64_t failed_group_id_ = 0;
  LookupPlan lookup_plan_;
  int lookup_failures_ = 0;
  int64_t successful_writes_ = 0;
  uint64_t version_ = 0;
  int64_t unapplied_answers_ = 0;
  int64_t failed_lookup_batches_ = 0;
  State truth_;
  State applied_;
  SimLog log_;
  // Every group appended or tried, by the id its log entry's payload names; those behind the
  // log's first kept entry are let go at checkpoints.
  std::map<uint64_t, std::vector<BatchWrite>> groups_;
  uint64_t next_group_id_ = 1;
  // The log position the tables hold everything up to.
  uint64_t checkpoint_position_ = 0;
  struct LoggedGroup {
    uint64_t position = 0;
    const std::vector<BatchWrite>* batches = nullptr;  // In groups_.
  };
  // Log entries the applier has not reached, oldest first.
  std::deque<LoggedGroup> unapplied_;
  // Entries the applier reached since the last checkpoint, which wrote all but their idempotency
  // records: a restart replays those records (and the whole of unapplied_).
  std::deque<LoggedGroup> applied_since_checkpoint_;
  // Idempotency records written since the last checkpoint (storage::RecentRequests).
  std::map<std::pair<std::string, std::string>, RequestRecord> recent_requests_;
};

struct FaultStore::Backup {
  State tables;
  std::vector<std::vector<BatchWrite>> log;
  State truth;  // What the log held when it was taken: what its restore must equal.
};

}  // namespace ledger::sim

#endif  // LEDGER_SIM_FAULT_STORE_H_
