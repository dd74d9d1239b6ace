// Defines `Simulate`, a deterministic simulation of one shard core and its store: from a seed it
// draws random batches over a few hot accounts (deposits, withdrawals, balances, repeated and
// conflicting request_ids, callers that leave), random store faults (failed writes, failed writes
// that landed anyway, failed lookups, slow writes), clock jumps around the idempotency TTL,
// shutdowns that abandon undecided messages, restarts that rebuild the core from the store,
// crashes that leave the batches in flight unanswered, and lost leaderships (a cluster replica's
// write whose entry the next leader commits or not, after which the replica starts again).
// After every step the auditor checks each reply against the set of legal answers and the store
// against the money acknowledged.
//
// It drives the core the way the server's shard and commit pipeline do (shard/shard.cc,
// shard/commit_pipeline.cc): a sealed batch joins the simulator's in-flight queue instead of
// being written, and new batches are decided on top of it; at seeded moments (between batches,
// while a batch is being decided, between a Prefetch that could not answer from memory and its
// retry on the "shard thread") the oldest k in-flight batches are written as one group, one fault
// plan per group, then answered in order, or rolled back with every batch decided after them.
//
// The same seed gives the same run on every machine: the only randomness is one std::mt19937_64
// (whose output the standard fixes), ranges are derived from it by hand, every clock is simulated
// and nothing iterates an unordered container.
//
// Transfers (issue 15) run on accounts of their own, split over two pretend shards: a transfer
// within one is sent as a local TransferCall (TransferCall::local); across them the simulator plays
// TransferCoordinator (shard/transfer_coordinator.cc) itself, deterministically: after the debit's
// batch is answered it sends the credit, then the settle, at seeded steps, retries a step answered
// kStorageFailed or kInternal, asks resume_only after a failed debit, and at a restart or crash
// drops its flights and resumes every pending record of the store (LoadPendingTransfer, then the
// credit again), as ledgerd's start-up does. Every step is a message of the one core (it does
// not know shards). The TransferAuditor (sim/transfer_auditor.h) checks them; at the end of a
// run the flights are carried to their end by fault-free batches and no transfer may be left
// pending. Later issues extend it: batch calls add call kinds to the generator and their rules
// to the auditor's model.
#ifndef LEDGER_SIM_SIMULATOR_H_
#define LEDGER_SIM_SIMULATOR_H_

#include <array>
#include <cstdint>
#include <string>

#include "shard/shard_core.h"
#include "sim/fault_store.h"

namespace ledger::sim {

// Test-only bugs of the simulator's own commit pipeline (the part that plays
// shard/commit_pipeline.cc), to prove the auditor checks when and in which order replies go out.
enum class PipelineBugForTesting : uint8_t {
  kNone,
  // A fifth of the sealed batches are answered at once, before their write (and again after it).
  kReleaseBeforeWrite,
  // A durable group of two or more batches is answered newest first.
  kReleaseOutOfOrder,
};

// Test-only bugs of the simulator's own transfer coordinator (the part that plays
// shard/transfer_coordinator.cc), to prove the transfer auditor checks what a settle records.
enum class CoordinatorBugForTesting : uint8_t {
  kNone,
  // A credit the destination refused is settled as if it had been applied: no refund.
  kSettleRefusedAsCommitted,
};

struct SimOptions {
  uint64_t seed = 1;
  int64_t steps = 1000;  // Batches, restarts included.
  // Sealed batches held in flight before a write must take them. 1: each batch is written right
  // after it is sealed, before the next is decided (the order of the synchronous path).
  int max_in_flight = 8;
  // Group writes the journal thread may have started and not seen end, as a cluster replica's
  // (ledgerd --raft_writes_in_flight): each ends, in order, at a later turn. 0: 1, 2 or 3, from
  // the seed.
  int writes_in_flight = 0;
  // Test-only: plant a bug to prove the auditor catches it.
  CoreBugForTesting core_bug = CoreBugForTesting::kNone;
  StoreBugForTesting store_bug = StoreBugForTesting::kNone;
  PipelineBugForTesting pipeline_bug = PipelineBugForTesting::kNone;
  CoordinatorBugForTesting coordinator_bug = CoordinatorBugForTesting::kNone;
  // The watcher drops the operations of every 50th position it reads: a stream with a gap.
  bool watcher_skips_positions = false;
  // Transfers between the transfer accounts, same-shard and across (played on the one core, the
  // simulator acting as the coordinator). False: only deposits, withdrawals and balances.
  bool transfers = true;
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
  int64_t crashes = 0;  // Restarts that left what was in flight unanswered.
  // Restarts of a replica that lost its leadership with a group's entry in flight.
  int64_t demotions = 0;
  // The pipeline: group writes, the sealed batches they held, the most batches ever in flight,
  // rollbacks and the batches they took back, writes that happened while a batch was being
  // decided, and Prefetches that had to wait for the disk (retried with may_block).
  int64_t groups = 0;
  int64_t grouped_batches = 0;
  // Writes in flight: the most the run allowed and had at once, and the group writes failed
  // because they were started behind a write that failed.
  int64_t writes_in_flight = 0;
  int64_t max_writes_in_flight = 0;
  int64_t groups_behind_a_failure = 0;
  // Restarts that found several entries in flight at a loss of leadership, and that kept more
  // than one of them (the next leader committed a prefix).
  int64_t several_undecided = 0;
  int64_t several_kept = 0;
  int64_t max_in_flight = 0;
  int64_t rollbacks = 0;
  int64_t rolled_back_batches = 0;
  int64_t writes_while_deciding = 0;
  int64_t prefetch_retries = 0;
  // Decisions that read a change not yet durable; retries answered from the record of a call
  // whose write was in flight.
  int64_t undurable_reads = 0;
  int64_t in_flight_record_answers = 0;
  // Lookups that must not wait answered from a log entry the store's applier had not reached.
  int64_t unapplied_answers = 0;
  // Batches of request_id lookups (a RocksDB MultiGet) that failed whole.
  int64_t failed_lookup_batches = 0;
  // Backups taken (at seeded moments, the applier behind the log) and restored, each equal to
  // the log's state when it was taken.
  int64_t backups = 0;
  // Checkpoints taken at seeded moments (the idempotency records held in memory reach the
  // tables); clean stops and backups take one too.
  int64_t checkpoints = 0;
  // Restarts whose log found the entry of a failed append that no write had repaired: torn (it
  // is dropped) or, for a failed sync, whole (it is kept and its decisions are durable).
  int64_t torn_tails = 0;
  int64_t kept_failed_entries = 0;
  // The change stream's consumer (SimWatcher): the operations it rebuilt the accounts from, and
  // how often it started from a snapshot of balances at the applied position (as a new consumer,
  // or because a checkpoint had dropped its place).
  int64_t watched_operations = 0;
  int64_t watcher_resyncs = 0;
  // Replies by outcome (index: Outcome) and how many were replays: what the run exercised.
  std::array<int64_t, 18> outcomes{};
  int64_t replays = 0;
  // Transfers: the clients' calls (same shard, across shards, with a reused transfer_id), the
  // coordinator's steps (credits, settles, resume_only asks after a failed debit, steps sent again
  // after kStorageFailed or kInternal), transfers resumed from the store at a restart, and how the
  // carried ones ended (committed, refunded after a refused credit, parked at a stop).
  int64_t transfers_local = 0;
  int64_t transfers_cross = 0;
  int64_t transfers_reusing_id = 0;
  int64_t credits_sent = 0;
  int64_t settles_sent = 0;
  int64_t resume_only_sent = 0;
  int64_t step_retries = 0;
  int64_t transfers_resumed = 0;
  int64_t transfers_committed = 0;
  int64_t transfers_refunded = 0;
  int64_t transfers_parked = 0;
  // From the store's journal: credits applied, refunds, and the most transfers in flight at once.
  int64_t journal_credits = 0;
  int64_t journal_refunds = 0;
  int64_t max_transfers_in_flight = 0;
  // Transfers left pending with nobody carrying them once every flight ended (the third bug in
  // a run with any fails).
  int64_t transfers_stuck = 0;
  // When !ok: the violation, the step it happened at and a short trace of the steps before it.
  std::string failure;
};

SimResult Simulate(const SimOptions& options);

}  // namespace ledger::sim

#endif  // LEDGER_SIM_SIMULATOR_H_
