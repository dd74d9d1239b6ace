// ledgerctl watch: prints ledger.v1.Ledger/Watch's stream until interrupted, one line per
// committed operation (protobuf's JSON mapping of WatchEvent with --json), and on exit the last
// position processed, to resume from with --from. With --with_balances the named accounts'
// balances as of one position come first (the stream's first message), then the operations
// after it. A stream that ends UNAVAILABLE (the server stopped, or stopped leading) or cannot
// connect is opened again from that position, following the leader, once a second; any other
// error ends the command with its exit code.
#include <atomic>
#include <chrono>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/call_outcome.h"
#include "client/exit_codes.h"
#include "client/history_format.h"
#include "client/interrupt_signals.h"
#include "client/json_line.h"
#include "client/ledgerctl_commands.h"
#include "client/ledgerctl_output.pb.h"
#include "ledger/v1/ledger.grpc.pb.h"

namespace ledger::ctl {
namespace {

// How long watch waits before it opens the stream again after UNAVAILABLE.
constexpr absl::Duration kReconnectDelay = absl::Seconds(1);

// The context of the stream being read, for the thread that cancels it on SIGINT or SIGTERM.
class CancelOnInterrupt {
 public:
  CancelOnInterrupt()
      : thread_([this] {
          while (!done_.load()) {
            if (Interrupted()) {
              std::lock_guard<std::mutex> lock(mu_);
              if (context_ != nullptr) context_->TryCancel();
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
          }
        }) {}
  ~CancelOnInterrupt() {
    done_.store(true);
    thread_.join();
  }
  void Set(grpc::ClientContext* context) {
    std::lock_guard<std::mutex> lock(mu_);
    context_ = context;
    if (context_ != nullptr && Interrupted()) context_->TryCancel();
  }

 private:
  std::mutex mu_;
  grpc::ClientContext* context_ = nullptr;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

void PrintEvent(const v1::WatchEvent& event, bool json) {
  if (json) {
    std::cout << JsonLine(event);
    return;
  }
  const v1::HistoryEntry& entry = event.entry();
  std::cout << absl::StrFormat("%-9d %-20s %-6d %-24s %-15s %12d %14d  %s\n", event.position(),
                               event.account_id(), entry.sequence(), FormatTimestamp(entry.time()),
                               OperationName(entry.operation()), entry.amount(),
                               entry.balance_after(), EntryReference(entry));
}

void PrintEventsHeader() {
  std::cout << absl::StrFormat("%-9s %-20s %-6s %-24s %-15s %12s %14s  %s\n", "POSITION", "ACCOUNT",
                               "SEQ", "TIME (UTC)", "OPERATION", "AMOUNT", "BALANCE AFTER",
                               "REQUEST ID (TRANSFER ID AND ACCOUNT)");
}

// The balances of a with_balances stream's first message, then (text) the events' header.
void PrintBalances(const v1::WatchResponse& response, bool json) {
  if (json) {
    for (const v1::AccountBalance& balance : response.balances()) {
      ctl::WatchBalanceLine line;
      line.set_position(response.position());
      line.set_account_id(balance.account_id());
      line.set_opened(balance.opened());
      line.set_balance(balance.balance());
      line.set_sequence(balance.sequence());
      std::cout << JsonLine(line);
    }
    return;
  }
  std::cout << "BALANCES AS OF POSITION " << response.position() << "\n"
            << absl::StrFormat("%-20s %14s %6s\n", "ACCOUNT", "BALANCE", "SEQ");
  for (const v1::AccountBalance& balance : response.balances()) {
    if (balance.opened()) {
      std::cout << absl::StrFormat("%-20s %14d %6d\n", balance.account_id(), balance.balance(),
                                   balance.sequence());
    } else {
      std::cout << absl::StrFormat("%-20s %14s\n", balance.account_id(), "(not opened)");
    }
  }
  std::cout << "\n";
  PrintEventsHeader();
}

void PrintStopped(uint64_t position, bool json) {
  if (json) {
    ctl::WatchStopped stopped;
    stopped.set_last_position(position);
    std::cerr << JsonLine(stopped);
  } else {
    std::cerr << "ledgerctl: watch stopped after position " << position
              << "; resume with --from=" << position << "\n";
  }
}

}  // namespace

int RunWatch(LedgerctlSession& session, const std::vector<char*>& args) {
  if (args.size() != 2)
    return UsageError("watch takes no arguments (name accounts with --account)");
  const bool json = session.options().json;
  uint64_t position = session.options().watch_from;
  InstallSignalHandlers("", "\nledgerctl: interrupted again; exiting at once\n");
  CancelOnInterrupt canceller;
  // Until the first message came: a stream opened again before it asks for the balances again.
  bool balances_wanted = session.options().watch_with_balances;
  if (!json && !balances_wanted) {
    PrintEventsHeader();
    std::cout << std::flush;
  }
  const LedgerctlSession::Attempt stream = [&](v1::Ledger::Stub& stub,
                                               grpc::ClientContext* context) {
    v1::WatchRequest request;
    request.set_from_position(position);  // Where the last stream stopped.
    request.set_with_balances(balances_wanted);
    for (const std::string& account : session.options().watch_accounts) {
      request.add_account_ids(account);
    }
    canceller.Set(context);
    std::unique_ptr<grpc::ClientReader<v1::WatchResponse>> reader = stub.Watch(context, request);
    v1::WatchResponse response;
    while (reader->Read(&response)) {
      if (balances_wanted) {
        PrintBalances(response, json);
        balances_wanted = false;
      }
      for (const v1::WatchEvent& event : response.events()) PrintEvent(event, json);
      std::cout << std::flush;
      position = response.position();
    }
    grpc::Status status = reader->Finish();
    canceller.Set(nullptr);
    return status;
  };
  while (true) {
    const grpc::Status status = session.FollowLeader(stream, absl::InfiniteFuture()).status;
    if (Interrupted()) break;
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE) {
      PrintStopped(position, json);
      return session.Failed(status);
    }
    session.RetryNote(false,
                      absl::StrCat("the stream ended (", status.error_message(),
                                   "); opening it again after position ", position),
                      absl::ToInt64Milliseconds(kReconnectDelay), 0, 0);
    const absl::Time until = absl::Now() + kReconnectDelay;
    while (absl::Now() < until && !Interrupted()) absl::SleepFor(absl::Milliseconds(20));
    if (Interrupted()) break;
  }
  PrintStopped(position, json);
  return kExitOk;
}

}  // namespace ledger::ctl
