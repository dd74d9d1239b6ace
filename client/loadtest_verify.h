// Defines the last step of a ledger-loadtest run, `Verify`: settle the ambiguous calls, read
// back the balance of every account the run touched, and check them against the client's own
// book, so that lost or invented money is found.
#ifndef LEDGER_CLIENT_LOADTEST_VERIFY_H_
#define LEDGER_CLIENT_LOADTEST_VERIFY_H_

#include "absl/time/time.h"
#include "client/loadtest_driver.h"
#include "client/loadtest_options.h"
#include "client/loadtest_outcome.h"

namespace ledger {

// Verification reads: an overall bound, plus this much per account read.
inline constexpr absl::Duration kVerifyTimeLimit = absl::Seconds(60);
inline constexpr absl::Duration kVerifyTimePerAccount = absl::Milliseconds(1);

// Settles, reads and checks, unless a signal or a lost server says to stop, and says how it
// ended in `outcome` (verification, verification_note, checked, resolution, server_gone). After
// driver.Run(), from the thread that ran it.
void Verify(LoadtestDriver& driver, const LoadtestOptions& options, RunOutcome& outcome);

}  // namespace ledger

#endif  // LEDGER_CLIENT_LOADTEST_VERIFY_H_
