// Defines how ledger-loadtest hears SIGINT and SIGTERM: the first one asks every loop to stop
// (they poll `Interrupted`) so that a partial report is still printed; a second one exits at
// once, from the handler.
#ifndef LEDGER_CLIENT_LOADTEST_SIGNALS_H_
#define LEDGER_CLIENT_LOADTEST_SIGNALS_H_

namespace ledger {

// Installs the handlers for SIGINT and SIGTERM. Main only, once, before any call is made.
void InstallSignalHandlers();

// Whether a signal has arrived. Thread-safe (one lock-free atomic read).
bool Interrupted();

// The first signal that arrived (SIGINT or SIGTERM), or 0 when none has. Thread-safe.
int InterruptSignal();

// "SIGINT", "SIGTERM", or "a signal" for any other number.
const char* SignalName(int signal_number);

}  // namespace ledger

#endif  // LEDGER_CLIENT_LOADTEST_SIGNALS_H_
