// Defines `RunOutcome`, what one ledger-loadtest run found: its statistics, how verification
// ended, and how the ambiguous calls were settled; what the text and JSON reports print and the
// exit code is chosen from.
#ifndef LEDGER_CLIENT_LOADTEST_OUTCOME_H_
#define LEDGER_CLIENT_LOADTEST_OUTCOME_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "client/ledger_book.h"
#include "client/loadtest_settle.h"
#include "client/loadtest_stats.h"

namespace ledger {

// Plain data; filled by main and Verify, read by the reports.
// How --watch ended (the report's "watch" fields).
struct WatchCheck {
  // PASS, FAIL, or INCOMPLETE (the stream could not start or ended for good, or the balances
  // were not all read); empty without --watch.
  std::string verdict;
  std::string note;        // Why FAIL or INCOMPLETE: the first accounts that differ.
  int64_t events = 0;      // Operations of the run's accounts received.
  int64_t reconnects = 0;  // Streams opened again after one ended.
  uint64_t last_position = 0;
};

struct RunOutcome {
  Stats::Snapshot stats;
  double seconds = 0;
  double client_cpu_seconds = 0;     // User + system CPU of ledger-loadtest over `seconds`.
  std::string interrupted;           // "SIGINT", "SIGTERM", or empty.
  bool measurement_complete = true;  // False when a signal cut the measurement short.
  // PASS, FAIL, SKIPPED (--verify=false or a signal) or INCOMPLETE (ledgerd gone, or the reads
  // were refused or out of time).
  std::string verification = "SKIPPED";
  std::string verification_note;  // Why SKIPPED or INCOMPLETE.
  VerificationResult checked;
  Resolution resolution;
  bool server_gone = false;
  // Where calls went at the end (LoadtestDriver::leader_address).
  std::string leader_address;
  // What verification read (index: account; nullopt: NOT_FOUND), when it read every balance.
  std::vector<std::optional<int64_t>> balances_read;
  // --watch.
  WatchCheck watch;
};

}  // namespace ledger

#endif  // LEDGER_CLIENT_LOADTEST_OUTCOME_H_
