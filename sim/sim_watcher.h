// Defines `SimWatcher`, the simulator's consumer of the change stream (issue 33): it follows the
// store's log with a storage::LogReader as the watch feed does (never past what was
// acknowledged), in parts of seeded sizes, across restarts and crashes (its place survives them,
// as a watcher resumes from its last position), and rebuilds every account from the journal
// entries the log carries. Now and then (seeded), and whenever the log no longer keeps its place,
// it starts again as a new consumer does with Watch `with_balances`: the accounts as of the
// position the store's applier reached (FaultStore::AccountsAtApplied), then the stream after
// that position. Its audit: each account's operations arrive with sequences continuing those it
// holds, 1, 2, 3, ... (none repeated, none skipped), and whenever it has caught up with a log that
// holds nothing undecided, the accounts it rebuilt are the store's durable accounts exactly.
#ifndef LEDGER_SIM_SIM_WATCHER_H_
#define LEDGER_SIM_SIM_WATCHER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "shard/ledger_store.h"
#include "sim/fault_store.h"
#include "storage/replicated_log.h"

namespace ledger::sim {

// Not thread-safe: the simulator's thread.
class SimWatcher {
 public:
  // `rng` is its own; not owned. `skips_positions`: test-only, it drops the operations of every
  // 50th position, to prove that the audit catches a stream with a gap.
  SimWatcher(std::mt19937_64* rng, bool skips_positions)
      : rng_(rng), skips_positions_(skips_positions) {}

  // Reads what `store` acknowledged since the last call; "" or what went wrong. A place the log
  // no longer keeps (a checkpoint dropped it) is a start from a snapshot, as a consumer told
  // POSITION_NOT_KEPT does.
  std::string Follow(const FaultStore& store);
  // "" unless caught up with a log whose every entry is decided, and then the first account the
  // rebuilt state and the store's durable state disagree on.
  std::string Check(const FaultStore& store) const;

  int64_t events() const { return events_; }
  // Starts from a snapshot of balances (Watch with_balances): after POSITION_NOT_KEPT, or as a
  // new consumer.
  int64_t resyncs() const { return resyncs_; }

 private:
  // Every account the store ever opened, and those this watcher holds, as of the applied
  // position; the stream continues after it.
  void StartFromSnapshot(const FaultStore& store);

  std::mt19937_64* const rng_;
  const bool skips_positions_;
  std::unique_ptr<storage::LogReader> reader_;
  uint64_t next_ = 1;
  std::map<std::string, AccountState> accounts_;
  int64_t events_ = 0;
  int64_t resyncs_ = 0;
};

}  // namespace ledger::sim

#endif  // LEDGER_SIM_SIM_WATCHER_H_
