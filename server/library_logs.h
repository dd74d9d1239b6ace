// Defines `LimitLibraryLogs`: gRPC and protobuf log some failures once per request (a request
// that does not parse, a broken connection), so a hostile client could fill the log and the disk
// under it. This routes both libraries' lines through per-library rate limits. While ledgerd
// starts, the lines can also be held back: a refused start then prints only ledgerd's own reason.
#ifndef LEDGER_SERVER_LIBRARY_LOGS_H_
#define LEDGER_SERVER_LIBRARY_LOGS_H_

namespace ledger {

// How many lines per second each library may write; past it, lines are dropped and the next
// line written says how many were.
inline constexpr int kLibraryLogLinesPerSecond = 20;

// Installs the limited log handlers for gRPC and protobuf. Call once in main, before any other
// thread starts (neither library's handler setter is thread-safe). With `quiet`, every line is
// dropped (uncounted) until ShowLibraryLogs.
void LimitLibraryLogs(bool quiet = false);

// Lets the libraries' lines through again (rate limited). Thread-safe.
void ShowLibraryLogs();

}  // namespace ledger

#endif  // LEDGER_SERVER_LIBRARY_LOGS_H_
