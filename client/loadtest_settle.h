// Defines how ledger-loadtest settles the calls whose outcome it does not know (a deadline
// passed, the connection was lost): `ResolveAmbiguous` asks the server again, by each call's
// request_id (a transfer's transfer_id), until it says whether the call was applied, and records
// the answer in the book, so that verification can be exact.
#ifndef LEDGER_CLIENT_LOADTEST_SETTLE_H_
#define LEDGER_CLIENT_LOADTEST_SETTLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "client/loadtest_driver.h"
#include "client/loadtest_options.h"

namespace ledger {

// What settling found. Plain data.
struct Resolution {
  int64_t calls = 0;        // Ambiguous calls at the end of the run, transfers included.
  int64_t applied = 0;      // Settled: the server applied them (then or now).
  int64_t not_applied = 0;  // Settled: the server rejected them (then or now).
  int64_t unresolved = 0;   // Still unknown when --resolve_for ran out, or settling stopped.
  // The ambiguous transfers among them, and how each was settled.
  int64_t transfers = 0;
  int64_t transfers_committed = 0;
  int64_t transfers_refused = 0;
  int64_t transfers_unresolved = 0;
  // Transfers GetTransfer could not settle because the server keeps no transfer records
  // (--durability=none answers FAILED_PRECONDITION); a same-id retry is not safe there.
  int64_t transfers_without_records = 0;
  std::string stopped;  // Why settling stopped before --resolve_for ran out; empty if not.
  bool server_gone = false;
};

// Every ambiguous call counted, none settled yet.
Resolution UnsettledResolution(const std::vector<LoadtestDriver::AmbiguousCall>& calls);

// Retries every ambiguous call with its own request_id until the server gives a definite
// answer. The server applies a request_id at most once and replays the recorded outcome, so OK
// means "applied exactly once" and a rule rejection means "never applied", whichever attempt got
// there first. Ambiguous transfers are settled by GetTransfer, or a same-id retry. Bounded by
// --resolve_for; stops early when ledgerd is gone or on a signal. After driver.Run().
Resolution ResolveAmbiguous(LoadtestDriver& driver, const LoadtestOptions& options);

}  // namespace ledger

#endif  // LEDGER_CLIENT_LOADTEST_SETTLE_H_
