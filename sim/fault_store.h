// Defines `FaultStore`, the simulator's LedgerStore: kept in memory, single-threaded and
// deterministic, it fails writes and lookups as the simulator plans for each batch, and reports
// what really happened (did the failed write land?) so the auditor can resolve ambiguous replies.
#ifndef LEDGER_SIM_FAULT_STORE_H_
#define LEDGER_SIM_FAULT_STORE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "shard/ledger_store.h"

namespace ledger::sim {

// What the next Write does.
enum class WriteFault : uint8_t {
  kNone,
  kFail,        // Fails; nothing is stored.
  kFailLanded,  // Fails, but the batch was stored anyway (a sync that failed after the data did).
};

// Test-only bugs of the store itself, to prove the auditor checks the durable state.
enum class StoreBugForTesting : uint8_t {
  kNone,
  kLoseAcknowledgedWrites,  // Every tenth successful Write stores nothing but answers OK.
};

// The fault plan of one batch.
struct FaultPlan {
  WriteFault write = WriteFault::kNone;
  // Each FindRequest/FindAccount fails with this probability (percent, 0 to 100).
  int lookup_fail_percent = 0;
  // A slow write: the simulated clock advances by this much inside Write.
  absl::Duration write_delay = absl::ZeroDuration();
};

// What the store did during one batch: the ground truth the auditor resolves ambiguity with.
struct BatchFacts {
  bool write_called = false;
  WriteFault write_result = WriteFault::kNone;
  int lookup_failures = 0;
};

// Not thread-safe: the simulator drives one core from one thread.
class FaultStore final : public LedgerStore {
 public:
  // `clock` and `rng` are the simulator's; not owned, must outlive the store.
  FaultStore(absl::Time* clock, std::mt19937_64* rng, StoreBugForTesting bug)
      : clock_(clock), rng_(rng), bug_(bug) {}

  // Starts a batch: the plan applies to it, and the facts are reset.
  void BeginBatch(const FaultPlan& plan) {
    plan_ = plan;
    facts_ = {};
  }
  const BatchFacts& facts() const { return facts_; }

  using LedgerStore::Write;
  absl::Status WriteGroup(absl::Span<const BatchWrite* const> group) override;
  absl::StatusOr<std::optional<RequestRecord>> FindRequest(absl::string_view account_id,
                                                           absl::string_view request_id) override;
  absl::StatusOr<std::optional<AccountState>> FindAccount(absl::string_view account_id) override;

  // The durable state, as a restart or the auditor reads it.
  const std::map<std::string, AccountState>& accounts() const { return accounts_; }
  const std::map<std::pair<std::string, std::string>, RequestRecord>& requests() const {
    return requests_;
  }
  const std::vector<JournalEntry>& journal() const { return journal_; }

 private:
  bool LookupFails();
  void Apply(const BatchWrite& batch);

  absl::Time* const clock_;
  std::mt19937_64* const rng_;
  const StoreBugForTesting bug_;
  FaultPlan plan_;
  BatchFacts facts_;
  int64_t successful_writes_ = 0;
  std::map<std::string, AccountState> accounts_;
  std::map<std::pair<std::string, std::string>, RequestRecord> requests_;
  std::vector<JournalEntry> journal_;
};

}  // namespace ledger::sim

#endif  // LEDGER_SIM_FAULT_STORE_H_
