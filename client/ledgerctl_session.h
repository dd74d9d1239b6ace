// Defines `LedgerctlOptions`, what ledgerctl's flags say, and `LedgerctlSession`, what every
// ledgerctl command shares: the channel, the command's one deadline, how errors and retry notes
// are printed (text, or JSON with --json), the retry of a call refused for overload, and the
// command lines ledgerctl prints to settle an unknown outcome. The commands themselves are in
// client/ledgerctl_commands.h; the flags stay in client/ledgerctl.cc, which fills the options.
#ifndef LEDGER_CLIENT_LEDGERCTL_SESSION_H_
#define LEDGER_CLIENT_LEDGERCTL_SESSION_H_

#include <cstdint>
#include <functional>
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

// What the flags say (client/ledgerctl.cc, client/tls_flags.h), checked.
struct LedgerctlOptions {
  std::string target = kDefaultTarget;  // As given: printed back in settling commands.
  bool json = false;
  absl::Duration deadline = absl::Seconds(5);  // Bounds the whole command (apply: each call).
  int32_t retries = 3;                         // 0 to kMaxRetries.
  int32_t batch_size = 1000;                   // apply: 1 to kMaxApplyBatchSize.
  std::string request_id;                      // deposit, withdraw; empty: a new one per call.
  std::string transfer_id;                     // transfer; empty: a new one.
  int32_t page_size = 20;                      // history.
  std::string page_token;                      // history.
  std::string backup_to;                       // backup: the directory written.
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
  // `command_line`: argv, for the retry commands printed after an unknown outcome. The
  // command's deadline starts now.
  LedgerctlSession(LedgerctlOptions options, std::shared_ptr<grpc::Channel> channel,
                   std::vector<std::string> command_line);

  const LedgerctlOptions& options() const { return options_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  // The ledger.v1.Ledger stub on channel(), made once for every call of the command.
  v1::Ledger::Stub& stub() const { return *stub_; }
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

  // Runs `attempt` (one call on the context it is given) and, while the server refuses it for
  // overload (client/call_outcome.h) and says how long to wait, waits that long and runs it
  // again: at most --retries more times, and only when the retry can start before the deadline.
  // Returns the last attempt's status. The caller's request (and its id) is the same for every
  // attempt, so a write stays one operation, applied at most once; a shed attempt applied
  // nothing.
  grpc::Status CallHonouringPushback(
      const std::function<grpc::Status(grpc::ClientContext*)>& attempt) const;

  // Connects the channel before a write is sent (client/channel_credentials.h), so that a write
  // that could not be sent is known to have applied nothing; when it cannot, says so and
  // returns the exit code of the failure.
  std::optional<int> RefuseUnconnected(const std::string& operation) const;

  // The command line that retries this call safely: the same arguments with --ID_FLAG=ID
  // (request_id or transfer_id), and without --deadline (often what ran out).
  std::string RetryCommand(absl::string_view id_flag, const std::string& id) const;
  // The command that asks how transfer `transfer_id` ended, on the same server as this one.
  std::string GetTransferCommand(const std::string& transfer_id) const;

 private:
  void ShedNote(const std::string& text, int64_t retry_in_ms, int attempt, int attempts) const;

  const LedgerctlOptions options_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::Ledger::Stub> stub_;
  const std::vector<std::string> command_line_;
  const absl::Time deadline_;
};

}  // namespace ledger::ctl

#endif  // LEDGER_CLIENT_LEDGERCTL_SESSION_H_
