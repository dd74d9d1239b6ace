// Defines ledger-loadtest's two reports of a run: the text one for a person (TextReport) and the
// JSON one for a program (ReportMessage, printed by JsonReport), the message declared in
// client/loadtest_report.proto so that readers parse it with protobuf's own JSON mapping.
#ifndef LEDGER_CLIENT_LOADTEST_REPORTS_H_
#define LEDGER_CLIENT_LOADTEST_REPORTS_H_

#include <string>

#include "client/loadtest_options.h"
#include "client/loadtest_outcome.h"
#include "client/loadtest_report.pb.h"

namespace ledger {

// The text report, one line per fact, ending in the verification's line and its mismatches.
std::string TextReport(const LoadtestOptions& options, const RunOutcome& o);

// The JSON report as a message; its rates are rounded to a tenth, its latencies are in µs.
loadtest::Report ReportMessage(const LoadtestOptions& options, const RunOutcome& o);

// One line of protobuf's JSON: proto field names, every field printed (zero counts included, so
// that a reader finds each key), int64 as strings.
std::string JsonReport(const LoadtestOptions& options, const RunOutcome& o);

}  // namespace ledger

#endif  // LEDGER_CLIENT_LOADTEST_REPORTS_H_
