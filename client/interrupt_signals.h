// Defines how ledger-loadtest and `ledgerctl watch` hear SIGINT and SIGTERM: the first one asks
// every loop to stop (they poll `Interrupted`), so that the load test still prints a partial
// report and the watch its last position; a second one exits at once, from the handler.
#ifndef LEDGER_CLIENT_INTERRUPT_SIGNALS_H_
#define LEDGER_CLIENT_INTERRUPT_SIGNALS_H_

#include <string_view>

namespace ledger {

// Installs the handlers for SIGINT and SIGTERM, which write `first_note` on stderr at the first
// signal and `again_note` at the second, before exiting. Both must outlive the process (string
// literals). Once, from one thread.
void InstallSignalHandlers(std::string_view first_note, std::string_view again_note);

// Whether a signal has arrived. Thread-safe (one lock-free atomic read).
bool Interrupted();

// The first signal that arrived (SIGINT or SIGTERM), or 0 when none has. Thread-safe.
int InterruptSignal();

// "SIGINT", "SIGTERM", or "a signal" for any other number.
const char* SignalName(int signal_number);

}  // namespace ledger

#endif  // LEDGER_CLIENT_INTERRUPT_SIGNALS_H_
