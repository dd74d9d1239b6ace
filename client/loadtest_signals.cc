#include "client/loadtest_signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

namespace ledger {
namespace {

// The first SIGINT or SIGTERM (0: none yet). Set by the signal handler only; read by every loop,
// which then stops. A second signal exits at once from the handler.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "used in a signal handler");

void OnSignal(int signal_number) {
  int none = 0;
  if (!g_signal.compare_exchange_strong(none, signal_number)) {
    constexpr char kAgain[] = "\nledger-loadtest: interrupted again; exiting at once\n";
    (void)!write(STDERR_FILENO, kAgain, sizeof(kAgain) - 1);
    _exit(128 + signal_number);
  }
  constexpr char kFirst[] =
      "\nledger-loadtest: interrupted; stopping and printing the partial report (press Ctrl-C "
      "again to exit at once)\n";
  (void)!write(STDERR_FILENO, kFirst, sizeof(kFirst) - 1);
}

}  // namespace

void InstallSignalHandlers() {
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

bool Interrupted() { return g_signal.load() != 0; }

const char* SignalName(int signal_number) {
  return signal_number == SIGINT ? "SIGINT" : signal_number == SIGTERM ? "SIGTERM" : "a signal";
}

int InterruptSignal() { return g_signal.load(); }

}  // namespace ledger
