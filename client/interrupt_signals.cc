#include "client/interrupt_signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <string_view>

namespace ledger {
namespace {

// The first SIGINT or SIGTERM (0: none yet). Set by the signal handler only; read by every loop,
// which then stops. A second signal exits at once from the handler.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "used in a signal handler");

// What the handler writes: set before it is installed, never changed after.
std::string_view g_first_note;
std::string_view g_again_note;

void OnSignal(int signal_number) {
  int none = 0;
  if (!g_signal.compare_exchange_strong(none, signal_number)) {
    (void)!write(STDERR_FILENO, g_again_note.data(), g_again_note.size());
    _exit(128 + signal_number);
  }
  (void)!write(STDERR_FILENO, g_first_note.data(), g_first_note.size());
}

}  // namespace

void InstallSignalHandlers(std::string_view first_note, std::string_view again_note) {
  g_first_note = first_note;
  g_again_note = again_note;
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
