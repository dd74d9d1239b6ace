// ledger-sim: runs the deterministic shard simulation (sim/simulator.h).
//
//   ledger-sim --seed=S [--steps=N]            replays one seed exactly
//   ledger-sim --seed=S --seeds=K [--steps=N]  seeds S, S+1, ..., S+K-1 (what `make test` runs)
//   ledger-sim --seconds=T [--steps=N]         new random seeds for T seconds, each printed
//   --max_in_flight=K   sealed batches held in flight before a write must take them (default 8;
//                       1 writes each batch before the next is decided)
//   --writes_in_flight=W  group writes started and not yet ended, as a cluster replica's
//                       (1 to 8; default: 1, 2 or 3 from the seed)
//   --no_transfers      only deposits, withdrawals and balances (no transfer accounts)
//
// Exit status 0 when every run was legal; 1 on the first violation, after printing the seed, the
// step, a short trace and the command that replays it; 2 on a bad command line. A LEDGER_CHECK
// that aborts inside the core also prints the seed and step (from a SIGABRT handler).
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "sim/simulator.h"

namespace {

using ledger::CoreBugForTesting;
using ledger::sim::CoordinatorBugForTesting;
using ledger::sim::PipelineBugForTesting;
using ledger::sim::SimOptions;
using ledger::sim::SimResult;
using ledger::sim::StoreBugForTesting;

// Written before every step, read by the SIGABRT handler (which may only call write(2)).
char abort_context[512];
int64_t steps_flag = 1000;
// The flags that shape a run besides seed and steps, for the replay command (SIM_FLAGS).
std::string run_flags;

// " SIM_FLAGS='...'" when the run had such flags, else "".
std::string SimFlags() { return run_flags.empty() ? "" : " SIM_FLAGS='" + run_flags + "'"; }

void OnStep(uint64_t seed, int64_t step) {
  std::snprintf(abort_context, sizeof abort_context,
                "ledger-sim: aborted in seed %llu step %lld; replay: make simulate SEED=%llu "
                "STEPS=%lld%s\n",
                static_cast<unsigned long long>(seed), static_cast<long long>(step),
                static_cast<unsigned long long>(seed), static_cast<long long>(steps_flag),
                SimFlags().c_str());
}

void OnAbort(int) {
  const ssize_t written = write(STDERR_FILENO, abort_context, std::strlen(abort_context));
  (void)written;
  std::signal(SIGABRT, SIG_DFL);
  std::abort();
}

bool ParseFlag(const char* arg, const char* name, std::string* value) {
  const size_t length = std::strlen(name);
  if (std::strncmp(arg, name, length) != 0 || arg[length] != '=') return false;
  *value = arg + length + 1;
  return true;
}

bool ParseInt(const std::string& text, int64_t* value) {
  if (text.empty()) return false;
  char* end = nullptr;
  const long long parsed = std::strtoll(text.c_str(), &end, 10);
  if (*end != '\0' || parsed < 0) return false;
  *value = parsed;
  return true;
}

int Usage(const char* problem) {
  std::fprintf(stderr,
               "ledger-sim: %s\nusage: ledger-sim [--seed=S [--seeds=K] | --seconds=T] "
               "[--steps=N] [--max_in_flight=K] [--writes_in_flight=W] "
               "[--core_bug=skip_rollback|reapply_replays] "
               "[--store_bug=lose_writes|lookups_miss_unapplied|backup_misses_log|"
               "checkpoint_drops_requests|repair_keeps_failed_entry|repairs_lost_leadership|"
               "repairs_under_writes_in_flight|snapshot_names_acknowledged] "
               "[--pipeline_bug=release_before_write|release_out_of_order] "
               "[--coordinator_bug=settle_refused_as_committed] [--no_transfers] "
               "\n",
               problem);
  return 2;
}

// Runs one seed; prints its line, or the failure and how to replay it. True when legal.
bool RunSeed(SimOptions options, bool print_ok, bool verbose) {
  const SimResult result = ledger::sim::Simulate(options);
  if (!result.ok) {
    std::printf("FAIL %s\nreplay: make simulate SEED=%llu STEPS=%lld%s\n", result.failure.c_str(),
                static_cast<unsigned long long>(options.seed),
                static_cast<long long>(options.steps), SimFlags().c_str());
    return false;
  }
  if (print_ok) {
    std::printf(
        "seed %llu ok: %lld steps, %lld messages, %lld failed writes, %lld failed "
        "lookups, %lld restarts, %lld crashes\n",
        static_cast<unsigned long long>(options.seed), static_cast<long long>(result.steps),
        static_cast<long long>(result.messages), static_cast<long long>(result.write_faults),
        static_cast<long long>(result.lookup_faults), static_cast<long long>(result.restarts),
        static_cast<long long>(result.crashes));
  }
  if (verbose) {
    std::printf(
        "  pipeline: %lld group writes of %lld batches, at most %lld in flight, %lld rollbacks "
        "of %lld batches, %lld writes while deciding, %lld prefetches retried on the disk\n"
        "  %lld decisions read undurable state, %lld retries answered from an in-flight record, "
        "%lld lookups answered from a log entry not yet applied, %lld batches of lookups failed "
        "whole, %lld backups restored, %lld checkpoints\n"
        "  log: %lld failed entries found torn at a restart, %lld found whole and kept; %lld "
        "leaderships lost with an entry in flight\n"
        "  watch: %lld operations streamed and rebuilt, %lld starts from a balances snapshot\n"
        "  writes in flight: up to %lld, at most %lld at once; %lld group writes failed behind a "
        "failed one; %lld restarts found several entries in flight at a lost leadership, %lld "
        "kept more than one\n",
        static_cast<long long>(result.groups), static_cast<long long>(result.grouped_batches),
        static_cast<long long>(result.max_in_flight), static_cast<long long>(result.rollbacks),
        static_cast<long long>(result.rolled_back_batches),
        static_cast<long long>(result.writes_while_deciding),
        static_cast<long long>(result.prefetch_retries),
        static_cast<long long>(result.undurable_reads),
        static_cast<long long>(result.in_flight_record_answers),
        static_cast<long long>(result.unapplied_answers),
        static_cast<long long>(result.failed_lookup_batches),
        static_cast<long long>(result.backups), static_cast<long long>(result.checkpoints),
        static_cast<long long>(result.torn_tails),
        static_cast<long long>(result.kept_failed_entries),
        static_cast<long long>(result.demotions), static_cast<long long>(result.watched_operations),
        static_cast<long long>(result.watcher_resyncs),
        static_cast<long long>(result.writes_in_flight),
        static_cast<long long>(result.max_writes_in_flight),
        static_cast<long long>(result.groups_behind_a_failure),
        static_cast<long long>(result.several_undecided),
        static_cast<long long>(result.several_kept));
  }
  if (verbose) {
    std::printf("  replies:");
    for (size_t i = 0; i < result.outcomes.size(); ++i) {
      const std::string name(ledger::OutcomeName(static_cast<ledger::Outcome>(i)));
      std::printf(" %s=%lld", name.c_str(), static_cast<long long>(result.outcomes[i]));
    }
    std::printf(" (replayed=%lld)\n", static_cast<long long>(result.replays));
    std::printf(
        "  transfers: %lld same-shard, %lld across shards (%lld reusing an id with other "
        "fields); coordinator: %lld credits, %lld settles, %lld resume_only asks, %lld steps sent "
        "again, %lld resumed at restarts; %lld committed, %lld refunded, %lld parked; journal: "
        "%lld credits, %lld refunds, at most %lld in flight; %lld stuck at the end until a "
        "restart\n",
        static_cast<long long>(result.transfers_local),
        static_cast<long long>(result.transfers_cross),
        static_cast<long long>(result.transfers_reusing_id),
        static_cast<long long>(result.credits_sent), static_cast<long long>(result.settles_sent),
        static_cast<long long>(result.resume_only_sent),
        static_cast<long long>(result.step_retries),
        static_cast<long long>(result.transfers_resumed),
        static_cast<long long>(result.transfers_committed),
        static_cast<long long>(result.transfers_refunded),
        static_cast<long long>(result.transfers_parked),
        static_cast<long long>(result.journal_credits),
        static_cast<long long>(result.journal_refunds),
        static_cast<long long>(result.max_transfers_in_flight),
        static_cast<long long>(result.transfers_stuck));
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t seed = -1;
  int64_t seeds = 1;
  int64_t seconds = -1;
  SimOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string value;
    // Which runs: not part of a replay command.
    if (ParseFlag(argv[i], "--seed", &value)) {
      if (!ParseInt(value, &seed)) return Usage("--seed needs a number");
      continue;
    }
    if (ParseFlag(argv[i], "--seeds", &value)) {
      if (!ParseInt(value, &seeds) || seeds < 1) return Usage("--seeds needs a number >= 1");
      continue;
    }
    if (ParseFlag(argv[i], "--steps", &value)) {
      if (!ParseInt(value, &steps_flag) || steps_flag < 1) {
        return Usage("--steps needs a number >= 1");
      }
      continue;
    }
    if (ParseFlag(argv[i], "--seconds", &value)) {
      if (!ParseInt(value, &seconds)) return Usage("--seconds needs a number");
      continue;
    }
    // How each run goes: a replay needs these.
    if (ParseFlag(argv[i], "--core_bug", &value)) {
      if (value == "skip_rollback") {
        options.core_bug = CoreBugForTesting::kSkipRollback;
      } else if (value == "reapply_replays") {
        options.core_bug = CoreBugForTesting::kReapplyReplays;
      } else {
        return Usage("unknown --core_bug");
      }
    } else if (ParseFlag(argv[i], "--max_in_flight", &value)) {
      int64_t depth = 0;
      if (!ParseInt(value, &depth) || depth < 1 || depth > 1000) {
        return Usage("--max_in_flight needs a number from 1 to 1000");
      }
      options.max_in_flight = static_cast<int>(depth);
    } else if (ParseFlag(argv[i], "--writes_in_flight", &value)) {
      int64_t writes = 0;
      if (!ParseInt(value, &writes) || writes < 1 || writes > 8) {
        return Usage("--writes_in_flight needs a number from 1 to 8");
      }
      options.writes_in_flight = static_cast<int>(writes);
    } else if (ParseFlag(argv[i], "--pipeline_bug", &value)) {
      if (value == "release_before_write") {
        options.pipeline_bug = PipelineBugForTesting::kReleaseBeforeWrite;
      } else if (value == "release_out_of_order") {
        options.pipeline_bug = PipelineBugForTesting::kReleaseOutOfOrder;
      } else {
        return Usage("unknown --pipeline_bug");
      }
    } else if (ParseFlag(argv[i], "--coordinator_bug", &value)) {
      if (value != "settle_refused_as_committed") return Usage("unknown --coordinator_bug");
      options.coordinator_bug = CoordinatorBugForTesting::kSettleRefusedAsCommitted;
    } else if (std::strcmp(argv[i], "--no_transfers") == 0) {
      options.transfers = false;
    } else if (ParseFlag(argv[i], "--store_bug", &value)) {
      if (value == "lose_writes") {
        options.store_bug = StoreBugForTesting::kLoseAcknowledgedWrites;
      } else if (value == "lookups_miss_unapplied") {
        options.store_bug = StoreBugForTesting::kLookupsMissUnappliedRecords;
      } else if (value == "backup_misses_log") {
        options.store_bug = StoreBugForTesting::kBackupMissesTheLogAfterTheTables;
      } else if (value == "checkpoint_drops_requests") {
        options.store_bug = StoreBugForTesting::kCheckpointDropsRecentRequests;
      } else if (value == "repair_keeps_failed_entry") {
        options.store_bug = StoreBugForTesting::kRepairKeepsTheFailedEntry;
      } else if (value == "repairs_lost_leadership") {
        options.store_bug = StoreBugForTesting::kRepairsALostLeadership;
      } else if (value == "repairs_under_writes_in_flight") {
        options.store_bug = StoreBugForTesting::kRepairsUnderWritesInFlight;
      } else if (value == "snapshot_names_acknowledged") {
        options.store_bug = StoreBugForTesting::kSnapshotNamesTheAcknowledgedPosition;
      } else {
        return Usage("unknown --store_bug");
      }
    } else {
      return Usage(("unknown argument " + std::string(argv[i])).c_str());
    }
    run_flags += (run_flags.empty() ? "" : " ") + std::string(argv[i]);
  }
  if ((seed >= 0) == (seconds >= 0)) return Usage("give exactly one of --seed and --seconds");
  options.steps = steps_flag;
  options.on_step = &OnStep;
  std::signal(SIGABRT, &OnAbort);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  if (seed >= 0) {
    for (int64_t k = 0; k < seeds; ++k) {
      options.seed = static_cast<uint64_t>(seed + k);
      if (!RunSeed(options, /*print_ok=*/seeds == 1, /*verbose=*/seeds == 1)) return 1;
    }
    if (seeds > 1) {
      std::printf("%lld seeds from %lld ok, %lld steps each\n", static_cast<long long>(seeds),
                  static_cast<long long>(seed), static_cast<long long>(options.steps));
    }
    return 0;
  }
  // Exploring: fresh seeds (kept below 2^53 so that they survive any shell or JSON round trip).
  std::random_device entropy;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int64_t explored = 0;
  do {
    options.seed = ((uint64_t{entropy()} << 32) | entropy()) & ((uint64_t{1} << 53) - 1);
    if (!RunSeed(options, /*print_ok=*/true, /*verbose=*/false)) return 1;
    ++explored;
  } while (std::chrono::steady_clock::now() < deadline);
  std::printf("explored %lld seeds of %lld steps: all legal\n", static_cast<long long>(explored),
              static_cast<long long>(options.steps));
  return 0;
}
