// Defines `Auditor`, the simulator's reference model of a shard: plain maps and the ledger rules
// rewritten independently of shard/, that knows for every reply the set of answers that would be
// legal, and after every batch checks the store against the money the replies acknowledged.
//
// Why not client/LedgerBook: it bounds balances from gRPC status codes at the end of a load test
// (it links gRPC; the simulator builds with shard/ only, also under TSan). The auditor does the
// same bookkeeping (acknowledged net, ambiguous operations) but resolves every ambiguous call
// against the store's ground truth, so it can demand exact balances after each batch.
#ifndef LEDGER_SIM_AUDITOR_H_
#define LEDGER_SIM_AUDITOR_H_

#include <cstdint>
#include <map>
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
  std::string request_id;  // Empty: not deduplicated.
  bool caller_gone = false;
  bool abandoned = false;       // Decided while the shard was abandoning undecided messages.
  bool handler_throws = false;  // The handler faults (an injected exception): kInternal.
  int completions = 0;
  Reply reply;
};

std::string DescribeCall(const AuditedCall& call);

// Not thread-safe.
class Auditor {
 public:
  Auditor(LedgerPolicy policy, absl::Duration idempotency_ttl)
      : policy_(policy), idempotency_ttl_(idempotency_ttl) {}

  // Checks every reply of a completed batch against what the model allows, given what the store
  // did (`facts`), then advances the model. Returns the first violation, or "" when all legal.
  // Requires that a batch whose write failed had no failed lookups (the simulator never plans
  // both, so that a failed batch's decisions are exact).
  std::string CheckBatch(const std::vector<AuditedCall>& calls, absl::Time batch_time,
                         const BatchFacts& facts);

  // The store against the model: every account's state, every request record, each account's
  // journal numbered 1, 2, 3... and ending at its state, and conservation: the sum of durable
  // balances equals acknowledged deposits minus withdrawals plus the ambiguous ones that landed.
  // Returns the first violation, or "".
  std::string CheckStore(const FaultStore& store) const;

  // The shard was rebuilt from the store: its memory is the durable state again.
  void Restart();

  int64_t ambiguous_calls() const { return ambiguous_calls_; }

 private:
  using Accounts = std::map<std::string, AccountState>;
  using RequestKey = std::pair<std::string, std::string>;

  const LedgerPolicy policy_;
  const absl::Duration idempotency_ttl_;
  // What the store holds, exactly.
  Accounts durable_;
  std::map<RequestKey, RequestRecord> records_;
  // What the shard holds in memory: differs from durable_ after a failed write that landed,
  // until the shard reloads (settles) the account.
  Accounts memory_;
  // Accounts the shard may still have to settle (a superset of the shard's own set).
  std::set<std::string> maybe_unsettled_;
  // Deposits minus withdrawals acknowledged kOk (not replays).
  Wide acknowledged_net_ = 0;
  // Deposits minus withdrawals answered kStorageFailed whose write landed anyway.
  Wide landed_ambiguous_net_ = 0;
  int64_t ambiguous_calls_ = 0;
};

}  // namespace ledger::sim

#endif  // LEDGER_SIM_AUDITOR_H_
