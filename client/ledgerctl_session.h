// Defines `LedgerctlOptions`, what ledgerctl's flags say, and `LedgerctlSession`, what every
// ledgerctl command shares: the channels to --target's addresses, the command's one deadline, how
// errors and retry notes are printed (text, or JSON with --json), the following of a cluster's
// leader (a call refused NOT_LEADER is sent again, the same request, to the leader the refusal
// names or to the next --target address), the retry of a call refused for overload, and the
// command lines ledgerctl prints to settle an unknown outcome. The commands themselves are in
// client/ledgerctl_commands.h; the flags stay in client/ledgerctl.cc, which fills the options.
#ifndef LEDGER_CLIENT_LEDGERCTL_SESSION_H_
#define LEDGER_CLIENT_LEDGERCTL_SESSION_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/channel_credentials.h"
#include "grpcpp/grpcpp.h"
#include "ledger/v1/ledger.grpc.pb.h"

namespace ledger::ctl {

// --target's default, also left out of the commands ledgerctl prints for settling a transfer.
inline constexpr char kDefaultTarget[] = "localhost:50051";

// The most --retries accepts: a server that sheds a call more often than this is overloaded for
// longer than a person at a terminal should wait through.
inline constexpr int32_t kMaxRetries = 10;

// The most times one call is sent on after a NOT_LEADER refusal (to the leader the refusal names,
// or to the next --target address), each within --deadline: a cluster that has not shown its
// leader after this many redirections is electing one, or its members disagree about who leads.
inline constexpr int kMaxLeaderHops = 10;

// What the flags say (client/ledgerctl.cc, client/tls_flags.h), checked.
struct LedgerctlOptions {
  // As given (one address, or a cluster's comma-separated): printed back in settling commands.
  std::string target = kDefaultTarget;
  bool json = false;
  absl::Duration deadline = absl::Seconds(5);  // Bounds the whole command (apply: each call).
  int32_t retries = 3;                         // 0 to kMaxRetries.
  int32_t batch_size = 1000;                   // apply: 1 to kMaxApplyBatchSize.
  std::string request_id;                      // deposit, withdraw; empty: a new one per call.
  std::string transfer_id;                     // transfer; empty: a new one.
  int32_t page_size = 20;                      // history.
  std::string page_token;                      // history.
  std::string backup_to;                       // backup: the directory written.
  uint64_t watch_from = 0;                     // watch: the last position processed.
  std::vector<std::string> watch_accounts;     // watch: only these accounts; empty: all.
  bool watch_with_balances = false;            // watch: their balances first.
  ClientTlsOptions tls;
};

// Prints `problem` and the short usage on stderr; returns the usage exit code (2).
int UsageError(const std::string& problem);

// `word` as a POSIX shell reads it back: as is when it holds only safe characters, else in
// single quotes.
std::string ShellQuoted(const std::string& word);

// Not thread-safe: one command runs on one thread.
class LedgerctlSession {
 public:
  // One attempt of a ledger call: made on `stub` with `context` (its deadline set), the same
  // request every time it is made.
  using Attempt = std::function<grpc::Status(v1::Ledger::Stub&, grpc::ClientContext*)>;

  // What the last attempt of a call came back with.
  struct Answer {
    grpc::Status status;
    // The server's grpc-retry-pushback-ms, when it sent a valid one (client/pushback.h).
    std::optional<std::chrono::milliseconds> pushback;
  };

  // `targets`: --target's addresses (HOST:PORT, parsed), at least one; calls go to the first
  // until one finds the leader elsewhere. Channels, to them and to the leaders refusals name, are
  // made with `credentials` when first used. `command_line`: argv, for the retry commands printed
  // after an unknown outcome. The command's deadline starts now.
  LedgerctlSession(LedgerctlOptions options, std::vector<std::string> targets,
                   std::shared_ptr<grpc::ChannelCredentials> credentials,
                   std::vector<std::string> command_line);

  const LedgerctlOptions& options() const { return options_; }
  // Where calls go now: the first --target address, or the leader a call found since.
  const std::string& address() const { return address_; }
  // The channel to address().
  const std::shared_ptr<grpc::Channel>& channel() { return RouteTo(address_).channel; }
  // --target's addresses, in order.
  const std::vector<std::string>& targets() const { return targets_; }
  // The channel to `address` (made once, with the session's credentials).
  const std::shared_ptr<grpc::Channel>& ChannelTo(const std::string& address) {
    return RouteTo(address).channel;
  }
  // When the command must have its answer: --deadline from the session's start, shared by
  // every retry.
  absl::Time deadline() const { return deadline_; }
  std::unique_ptr<grpc::ClientContext> NewContext() const;

  // Prints a failed call's code and message on stderr (JSON with --json); returns its exit code.
  int Failed(const grpc::Status& status) const;
  // Prints "ACCOUNT: BALANCE" (JSON with --json); returns 0.
  int PrintBalance(const std::string& account, int64_t balance) const;
  // Says on stderr what ledgerctl does about a call it may retry: `shed` when the server shed
  // it; the retry fields when retry_in_ms >= 0.
  void RetryNote(bool shed, const std::string& text, int64_t retry_in_ms, int attempt,
                 int attempts) const;

  // Sends `attempt` to address(), and while the answer is a NOT_LEADER refusal (nothing was
  // applied), sends it again: to the refusal's leader_address when it names one, else to the next
  // --target address, after the refusal's RetryInfo delay when it has one. Each such address is
  // connected first; one that cannot be is passed over for the next --target address. At most
  // kMaxLeaderHops times, and only while the next send can start before `deadline`; each is
  // announced on stderr. The address that answered otherwise becomes address(), for the calls
  // that follow. Returns the last answer: a NOT_LEADER refusal when no leader was found.
  Answer FollowLeader(const Attempt& attempt, absl::Time deadline);

  // Runs `attempt` through FollowLeader and, while the server refuses it for overload
  // (client/call_outcome.h) and says how long to wait, waits that long and runs it again: at
  // most --retries more times, and only when the retry can start before the deadline. Returns
  // the last attempt's status. The caller's request (and its id) is the same for every attempt
  // and every address, so a write stays one operation, applied at most once; a shed attempt and
  // a NOT_LEADER refusal applied nothing.
  grpc::Status CallHonouringPushback(const Attempt& attempt);

  // Connects the channel to address() (client/channel_credentials.h), or else to the other
  // --target addresses in order, the first connected becoming address(); OK, or the last
  // failure. A write sent only once this is OK is known to have applied nothing when it fails.
  grpc::Status Connect(absl::Time deadline);
  // Connect before a write is sent, by the command's deadline; when it fails, says so and returns
  // the exit code of the failure.
  std::optional<int> RefuseUnconnected(const std::string& operation);

  // The command line that retries this call safely: the same arguments with --ID_FLAG=ID
  // (request_id or transfer_id), and without --deadline (often what ran out).
  std::string RetryCommand(absl::string_view id_flag, const std::string& id) const;
  // The command that asks how transfer `transfer_id` ended, on the same server as this one.
  std::string GetTransferCommand(const std::string& transfer_id) const;

 private:
  // A channel and its stub, made once per address.
  struct Route {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::Ledger::Stub> stub;
  };

  Route& RouteTo(const std::string& address);
  // One attempt at address(), with `deadline`.
  Answer Send(const Attempt& attempt, absl::Time deadline);
  // Moves address() to the --target address after the last one used, and returns it.
  const std::string& NextTarget();
  void HopNote(const std::string& text, int64_t wait_ms, int hop, const std::string& next) const;
  void ShedNote(const std::string& text, int64_t retry_in_ms, int attempt, int attempts) const;

  const LedgerctlOptions options_;
  const std::vector<std::string> targets_;
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  const std::vector<std::string> command_line_;
  const absl::Time deadline_;
  // One per address used: --target's, and the leaders that refusals named (a cluster's members).
  std::map<std::string, Route> routes_;
  std::string address_;      // Where calls go now.
  size_t target_index_ = 0;  // Of the --target address last used.
};

}  // namespace ledger::ctl

#endif  // LEDGER_CLIENT_LEDGERCTL_SESSION_H_
