// Defines `Auditor`, the simulator's reference model of a shard: plain maps and the ledger rules
// rewritten independently of shard/, that knows for every reply the set of answers that would be
// legal, and after every step checks the store against the money the replies acknowledged.
//
// It follows the commit pipeline: a batch is decided on top of batches whose writes are still in
// flight (Decide checks its decisions), written with other batches as one group (GroupWritten),
// rolled back with every batch decided after it when that write fails (RolledBack), and only
// then released (Released checks each completion: after its batch's write is durable or its
// rollback is done, in the order the batches were decided, exactly once, with the reply the model
// allows).
//
// Why not client/LedgerBook: it bounds balances from gRPC status codes at the end of a load test
// (it links gRPC; the simulator builds with shard/ only, also under TSan). The auditor does the
// same bookkeeping (acknowledged net, ambiguous operations) but resolves every ambiguous call
// against the store's ground truth, so it can demand exact balances after each step.
#ifndef LEDGER_SIM_AUDITOR_H_
#define LEDGER_SIM_AUDITOR_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "shard/ledger_rules.h"
#include "shard/ledger_store.h"
#include "shard/message.h"
#include "sim/fault_store.h"

namespace ledger::sim {

// Sums of balances and amounts: four accounts near INT64_MAX must not overflow the bookkeeping.
__extension__ using Wide = __int128;

// One message of a batch as the simulator sent it, and what came back.
struct AuditedCall {
  Op op = Op::kBalance;
  int64_t amount = 0;
  std::string account_id;
  std::string request_id;  // Empty: not deduplicated. Transfer ops: the transfer_id.
  bool caller_gone = false;
  bool abandoned = false;       // Decided while the shard was abandoning undecided messages.
  bool handler_throws = false;  // The handler faults (an injected exception): kInternal.
  Reply decided;                // What the core decided, before a rollback could rewrite it.
  int completions = 0;
  Reply reply;  // What was released (the last completion).
  // Transfer ops (the fields of their kinds of Message; see shard/message.h). The Auditor leaves
  // these calls to the TransferAuditor (sim/transfer_auditor.h): they touch only the transfer
  // accounts.
  std::string counterparty = {};
  bool local_transfer = false;
  bool resume_only = false;
  Outcome credit_outcome = Outcome::kOk;
  int64_t credit_balance = 0;
  absl::Time credited_at = absl::InfinitePast();
  int64_t flight = -1;  // The simulated coordinator's flight this step belongs to; -1: none.
};

std::string DescribeCall(const AuditedCall& call);

// Not thread-safe.
class Auditor {
 public:
  // A retry whose first call's record is expired must be decided anew, even while that first
  // call's write is still in flight (the documented TTL).
  Auditor(LedgerPolicy policy, absl::Duration idempotency_ttl)
      : policy_(policy), idempotency_ttl_(idempotency_ttl) {}

  // Registers the next batch before the core decides it, and returns its id (1, 2, ...). Batches
  // must be released in this order.
  uint64_t BeginBatch();

  // The core prefetched the next batch: it forgot the records of batches now durable, and looks
  // their request_ids up in the store from now on.
  void Prefetched();

  // Checks the decisions of batch `id` (calls[i].decided) against what the model allows, then
  // advances the model's memory. `batch_time`: the wall clock the core read for it;
  // `lookup_failures`: failed store lookups in the Prefetch its decisions used; `sealed`: Seal
  // returned it for writing (false: Seal answered it at once); `wrote`: its write is not empty.
  // Returns the first violation, or "" when all legal.
  std::string Decide(uint64_t id, const std::vector<AuditedCall>& calls, absl::Time batch_time,
                     int lookup_failures, bool sealed, bool wrote);

  // The oldest `count` sealed batches not yet written were written as one group, which did
  // `facts`. On success they are durable (acknowledged); on failure they wait for RolledBack.
  // A failed sync leaves their entry undecided (their decisions become durable only if the next
  // restart keeps it: Reopened); a write that repaired the log first ends an undecided entry.
  std::string GroupWritten(size_t count, const WriteFacts& facts);

  // The core rolled back every batch sealed and not durable, oldest first (the failed ones and
  // all decided on top of them); `rewritten[k]` holds the replies RollBack gave the k-th.
  std::string RolledBack(const std::vector<std::vector<Reply>>& rewritten);

  // Message `index` of batch `id` was completed with `reply`. A violation is kept for
  // TakeViolation (a completion cannot return one).
  void Released(uint64_t id, size_t index, const Reply& reply);
  // The first violation Released found since the last call, or "".
  std::string TakeViolation() { return std::exchange(violation_, ""); }

  // The shard's memory (`core`: each account that can exist, and its in-memory state) against the
  // model: equal for every account it has surely settled, else the stale or the durable state;
  // and when no write is in flight, a settled account's memory equals the store.
  std::string CheckMemory(
      const std::vector<std::pair<std::string, std::optional<AccountState>>>& core) const;

  // Every batch decided so far was released completely.
  std::string CheckAllReleased() const;

  // The store against the model: every account's state, every request record, each account's
  // journal numbered 1, 2, 3... and ending at its state, and conservation: the sum of durable
  // balances equals acknowledged deposits minus withdrawals plus the ambiguous ones that landed.
  // Returns the first violation, or "".
  std::string CheckStore(const FaultStore& store);

  // Accounts only transfers use: left to the TransferAuditor, so the store's state and
  // conservation are compared without them.
  void ExcludeAccounts(std::set<std::string> accounts) { excluded_ = std::move(accounts); }

  // The process died: every batch sealed and not answered is never answered (its write, or the
  // failed write that landed, is all that is left of it). Restart follows.
  void Crashed();
  // The store was opened again (after a crash or a clean stop), and its log kept the first
  // `kept_entries` of the undecided entries no write had repaired (a failed sync's, or those in
  // flight at a loss of leadership): their decisions are durable, the others' never.
  void Reopened(size_t kept_entries);

  // The shard was rebuilt from the store: its memory is the durable state again. Requires that
  // every batch was released.
  void Restart();

  int64_t ambiguous_calls() const { return ambiguous_calls_; }
  // Retries answered from an expired record whose write was in flight (tolerated unless strict).
  // What the run exercised: decisions that read a change not yet durable, and retries answered
  // from the record of a call whose write was in flight.
  int64_t undurable_reads() const { return undurable_reads_; }
  int64_t in_flight_record_answers() const { return in_flight_record_answers_; }

 private:
  using Accounts = std::map<std::string, AccountState>;
  using RequestKey = std::pair<std::string, std::string>;

  struct Batch {
    enum class State : uint8_t {
      kDeciding,    // Registered, not yet decided (Seal may answer it at once).
      kSealed,      // Decided and sealed; its write is not durable.
      kFailed,      // Its group's write failed; not yet rolled back.
      kDurable,     // Its write is durable: its replies may go.
      kRolledBack,  // Rolled back: its rewritten replies may go.
      kAnswered,    // Answered by Seal at once.
    };
    uint64_t id = 0;
    State state = State::kDeciding;
    std::vector<AuditedCall> calls;
    std::vector<Reply> to_release;  // The replies the model allows, in order.
    size_t released = 0;            // How many of them were released (a prefix).
    // Replies released while it was still being decided (legal only if Seal answers it at once).
    std::vector<Reply> early;
    // Each account it changed: its state before the batch's first change (what a rollback
    // restores) and after its last (what its write stores).
    std::map<std::string, std::optional<AccountState>> before;
    Accounts after;
    std::map<RequestKey, RequestRecord> records;
    Wide net = 0;  // Deposits minus withdrawals it applied.
    bool writes = false;
  };

  Batch* FindBatch(uint64_t id);
  // Batch `batch`'s decisions reached the store (written, or a failed write that landed).
  void Store(const Batch& batch);
  void ForgetPending(const Batch& batch);
  // Forgets the pending record of `key` if batch `id` wrote it.
  void Forget(uint64_t id, const RequestKey& key);

  const LedgerPolicy policy_;
  const absl::Duration idempotency_ttl_;
  // What the store holds, exactly.
  Accounts durable_;
  std::map<RequestKey, RequestRecord> records_;
  // What the shard holds in memory: the durable state plus every batch decided and not rolled
  // back; differs from durable_ also after a failed write that landed, until the shard reloads
  // (settles) the account.
  Accounts memory_;
  // Request_ids recorded by batches the shard still answers from memory (sealed or failed and not
  // rolled back, or durable since the last Prefetch): the newest batch's record and its id.
  std::map<RequestKey, std::pair<uint64_t, RequestRecord>> pending_;
  // Records of batches made durable since the last Prefetch: pending until the next one.
  std::vector<std::pair<uint64_t, RequestKey>> finished_records_;
  // Accounts the shard may still have to settle (a superset of the shard's own set).
  std::set<std::string> maybe_unsettled_;
  // Batches not yet released completely, in id order.
  std::deque<Batch> batches_;
  uint64_t next_id_ = 1;
  std::string violation_;
  // Deposits minus withdrawals acknowledged kOk (not replays).
  Wide acknowledged_net_ = 0;
  // Deposits minus withdrawals answered kStorageFailed whose write landed anyway.
  Wide landed_ambiguous_net_ = 0;
  // The batches of each undecided entry, oldest first (a failed sync's; or the one in flight
  // at a loss of leadership and those sent behind it), until a repair or a restart decides them.
  std::vector<std::vector<Batch>> undecided_;
  int64_t ambiguous_calls_ = 0;
  int64_t undurable_reads_ = 0;
  int64_t in_flight_record_answers_ = 0;
  // CheckStore's progress: the versions it last passed, the journal entries it checked and the
  // accounts they replay to.
  uint64_t model_version_ = 0;  // Bumped by every change of durable_, records_ and the nets.
  uint64_t checked_model_version_ = 0;
  uint64_t checked_store_version_ = 0;
  size_t journal_checked_ = 0;
  Accounts replayed_;
  std::set<std::string> excluded_;
};

}  // namespace ledger::sim

#endif  // LEDGER_SIM_AUDITOR_H_
