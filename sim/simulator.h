// Defines `Simulate`, a deterministic simulation of one shard core and its store: from a seed it
// draws random batches over a few hot accounts (deposits, withdrawals, balances, repeated and
// conflicting request_ids, callers that leave), random store faults (failed writes, failed writes
// that landed anyway, failed lookups, slow writes), clock jumps around the idempotency TTL,
// shutdowns that abandon undecided messages and restarts that rebuild the core from the store.
// After every step the auditor checks each reply against the set of legal answers and the store
// against the money acknowledged.
//
// The same seed gives the same run on every machine: the only randomness is one std::mt19937_64
// (whose output the standard fixes), ranges are derived from it by hand, every clock is simulated
// and nothing iterates an unordered container. Later issues extend it: a pipelined commit adds a
// step that decides batch N+1 before batch N's write returns; transfers and batch calls add call
// kinds to the generator and their rules to the auditor's model.
#ifndef LEDGER_SIM_SIMULATOR_H_
#define LEDGER_SIM_SIMULATOR_H_

#include <array>
#include <cstdint>
#include <string>

#include "shard/shard_core.h"
#include "sim/fault_store.h"

namespace ledger::sim {

struct SimOptions {
  uint64_t seed = 1;
  int64_t steps = 1000;  // Batches, restarts included.
  // Test-only: plant a bug to prove the auditor catches it.
  CoreBugForTesting core_bug = CoreBugForTesting::kNone;
  StoreBugForTesting store_bug = StoreBugForTesting::kNone;
  // Called before each step, so that a LEDGER_CHECK abort inside the core can still say which
  // seed and step it was (see ledger_sim.cc). May be null.
  void (*on_step)(uint64_t seed, int64_t step) = nullptr;
};

struct SimResult {
  bool ok = true;
  int64_t steps = 0;     // Steps run.
  int64_t messages = 0;  // Messages the core decided.
  int64_t write_faults = 0;
  int64_t lookup_faults = 0;
  int64_t restarts = 0;
  // Replies by outcome (index: Outcome) and how many were replays: what the run exercised.
  std::array<int64_t, 13> outcomes{};
  int64_t replays = 0;
  // When !ok: the violation, the step it happened at and a short trace of the steps before it.
  std::string failure;
};

SimResult Simulate(const SimOptions& options);

}  // namespace ledger::sim

#endif  // LEDGER_SIM_SIMULATOR_H_
