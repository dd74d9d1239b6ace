// ledgerctl: calls ledgerd from the command line, for people and for scripts. This file holds
// the flags, the usage text and the checks of the command line; the commands are in
// client/ledgerctl_commands.h, what they share in client/ledgerctl_session.h.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cli/command_line.h"
#include "cli/host_port.h"
#include "client/apply_batches.h"
#include "client/channel_credentials.h"
#include "client/ledgerctl_commands.h"
#include "client/ledgerctl_session.h"
#include "client/tls_flags.h"
#include "grpc/support/log.h"
#include "grpcpp/grpcpp.h"

ABSL_FLAG(std::string, target, ledger::ctl::kDefaultTarget,
          "HOST:PORT of ledgerd's gRPC endpoint; :PORT is localhost, [::1]:PORT an IPv6 address. "
          "For a cluster, its members comma-separated (HOST:PORT,HOST:PORT,...): calls go to the "
          "first and follow the leader (see above); health and backup ask the first only");
ABSL_FLAG(bool, json, false,
          "print results as one JSON object per line (protobuf's JSON mapping with the proto "
          "field names: int64 values as strings); errors and retry notes go to stderr as JSON "
          "too, {\"code\":..., \"message\":...}. apply prints JSON Lines with or without it");
ABSL_FLAG(absl::Duration, deadline, absl::Seconds(5),
          "how long to wait for an answer, with a unit: 5s, 250ms, 1m; it bounds the whole "
          "command, retries after a server's pushback and hops to a cluster's leader included "
          "(apply: each Apply call, and the longest pushback it waits for)");
ABSL_FLAG(int32_t, retries, 3,
          "every command but health: when the server refuses the call for overload "
          "(RESOURCE_EXHAUSTED, reason MAILBOX_FULL or IN_FLIGHT_LIMIT) and says when to come "
          "back (RetryInfo, or grpc-retry-pushback-ms), wait that long and send the same call "
          "again (same request_id or transfer_id), at most this many times (0 to 10; 0 never "
          "retries), and never past --deadline. Without that delay, no retry. apply: per batch, "
          "and a batch whose call's outcome is unknown (UNAVAILABLE, DEADLINE_EXCEEDED), that no "
          "leader took (NOT_LEADER) or that could not be sent is retried too (after the delay, "
          "or 100 ms doubling)");
ABSL_FLAG(int32_t, batch_size, 1000,
          "apply: operations per Apply call (1 to 8192, the server's limit per call)");
ABSL_FLAG(std::string, request_id, "",
          "idempotency key for deposit and withdraw (1 to 128 printable ASCII bytes): a retry "
          "with the same key, operation and amount is applied at most once and gets the first "
          "call's result. Default: a new random key for each call, printed in the retry command "
          "when the outcome is unknown");
ABSL_FLAG(std::string, transfer_id, "",
          "transfer: its idempotency key (1 to 128 printable ASCII bytes, unique in the ledger): "
          "a retry with the same key and fields moves the money at most once and gets the first "
          "call's result, and `ledgerctl get-transfer ID` tells how it ended. Default: a new "
          "random key, printed with the commands that settle the transfer when the outcome is "
          "unknown");
ABSL_FLAG(int32_t, page_size, 20, "history: entries per page (1 to 1000)");
ABSL_FLAG(std::string, page_token, "",
          "history: the next_page_token of an earlier page, for older entries");
ABSL_FLAG(uint64_t, from, 0,
          "watch: the last log position already processed; the stream starts after it (0: at "
          "the ledger's first operation, while the server still keeps it)");
ABSL_FLAG(std::vector<std::string>, account, {},
          "watch: only these accounts' operations, comma-separated (--account=alice,bob); "
          "default: every account");
ABSL_FLAG(bool, with_balances, false,
          "watch: first the balance of each --account exactly as of one log position, then the "
          "operations after that position (a consistent start for a new consumer; needs "
          "--account, not --from)");
ABSL_FLAG(std::string, to, "",
          "backup: the directory to write the backup into (made when missing; must be empty). "
          "A backup is complete once its backup_manifest.json is written, last");

namespace {

constexpr char kUsage[] =
    "calls ledgerd.\n"
    "\n"
    "  ledgerctl [flags] deposit ACCOUNT AMOUNT [--request_id=ID]\n"
    "  ledgerctl [flags] withdraw ACCOUNT AMOUNT [--request_id=ID]\n"
    "  ledgerctl [flags] balance ACCOUNT\n"
    "  ledgerctl [flags] history ACCOUNT [--page_size=N] [--page_token=TOKEN]\n"
    "  ledgerctl [flags] transfer FROM TO AMOUNT [--transfer_id=ID]\n"
    "  ledgerctl [flags] get-transfer ID\n"
    "  ledgerctl [flags] apply FILE|- [--batch_size=N]\n"
    "  ledgerctl [flags] health\n"
    "  ledgerctl [flags] backup --to=DIR\n"
    "  ledgerctl [flags] cluster status\n"
    "  ledgerctl [flags] watch [--from=POSITION] [--account=ID,...] [--with_balances]\n"
    "\n"
    "AMOUNT is a positive integer number of minor units (cents). Flags may come before or\n"
    "after the command; `--` ends them. Prints `ACCOUNT: BALANCE` (the balance after the call;\n"
    "for transfer, FROM's and then TO's), the account's operations newest first for history,\n"
    "the transfer's state (PENDING, COMMITTED or REFUSED) for get-transfer, `SERVING` for\n"
    "health, or JSON with --json.\n"
    "\n"
    "backup writes a consistent copy of the ledger, taken while it serves, into DIR (missing or\n"
    "empty): the server's files and, last, backup_manifest.json; `ledgerd restore --from=DIR`\n"
    "makes a data directory of it. The server allows it only to callers its authorization\n"
    "policy names (mutual TLS). --deadline does not bound it.\n"
    "\n"
    "cluster status asks every member of a cluster (--target's addresses and the members their\n"
    "answers name: one member's address is enough) who leads, in which term, and how far each\n"
    "member is behind the leader: NODE, ADDRESS, ROLE (leader, leader-loading, follower, or down\n"
    "and why), TERM, APPLIED (the newest log position it applied), REPLICATED (the newest the\n"
    "leader knows its log holds) and BEHIND (positions the leader committed that it has not\n"
    "applied); JSON: one line per member. It exits 0 when a leader serves and every member\n"
    "answered, else 5.\n"
    "\n"
    "watch prints every operation committed after --from, in commit order, until interrupted\n"
    "(SIGINT, SIGTERM): POSITION (the log position of its group commit), ACCOUNT, then as\n"
    "history; with --json one ledger.v1.WatchEvent per line in protobuf's JSON mapping. On exit\n"
    "it says on stderr the last position it processed, to pass as --from to resume without a\n"
    "gap or a duplicate. When the stream ends UNAVAILABLE (the server stopped, or stopped\n"
    "leading) it is opened again from there, following the leader, once a second; any other\n"
    "error (OUT_OF_RANGE: the server no longer keeps that position) ends it. --deadline does\n"
    "not bound it. --with_balances first prints each --account's balance and sequence as of\n"
    "one position (BALANCES AS OF POSITION N; JSON: one line per account with position,\n"
    "account_id, opened, balance and sequence), then the operations after that position.\n"
    "\n"
    "apply reads JSON Lines from FILE (- for stdin): one ledger.v1.ApplyOperation per non-blank\n"
    "line in protobuf's JSON mapping, e.g.\n"
    "  {\"deposit\":{\"account_id\":\"alice\",\"amount\":\"100\",\"request_id\":\"imp-1\"}}\n"
    "  {\"transfer\":{\"from_account_id\":\"alice\",\"to_account_id\":\"bob\",\"amount\":\"5\"}}\n"
    "(also withdraw and balance). Every line is checked first: one that is not an operation is a\n"
    "usage error naming it, and nothing is sent. A write without request_id (transfer_id) gets a\n"
    "generated one. The operations go in Apply calls of --batch_size, in order, one call at a\n"
    "time; it prints one JSON line per operation, in input order: its input line, the id used,\n"
    "code, message, balance, to_balance and replayed (code NOT_SENT: not sent because an\n"
    "earlier call failed as a whole). It exits with the worst class among the results, from\n"
    "least to most severe 0, 4, 3, 5, 1 (below).\n"
    "\n"
    "Exit codes:\n"
    "  0  OK (health: the server is SERVING)\n"
    "  1  any other failure (INTERNAL, UNKNOWN, CANCELLED, ...)\n"
    "  2  usage: the command line is wrong; nothing was sent\n"
    "  3  rejected by a ledger rule (INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE,\n"
    "     ALREADY_EXISTS): retrying the same call will not help\n"
    "  4  NOT_FOUND: the account has never received a deposit; get-transfer: no durable\n"
    "     record of that transfer_id (history and get-transfer on a server with\n"
    "     --durability=none are FAILED_PRECONDITION: 3)\n"
    "  5  overloaded (RESOURCE_EXHAUSTED: nothing was applied; retry after a back-off),\n"
    "     no leader (UNAVAILABLE with the reason NOT_LEADER, once following the leader gave up:\n"
    "     nothing was applied; retry later), outcome unknown (UNAVAILABLE otherwise,\n"
    "     DEADLINE_EXCEEDED: a deposit, withdraw or transfer may have been applied; retry with\n"
    "     the same --request_id or --transfer_id, which applies it at most once, or ask\n"
    "     get-transfer), or health is not SERVING\n"
    "get-transfer exits 0 for any state it reads: the state is in its output (`state` in JSON).\n"
    "apply exits with the worst of its operations' classes, and 2 when a line is not an\n"
    "operation (nothing was sent).\n"
    "\n"
    "When the server refuses a call for overload and says when to come back (RESOURCE_EXHAUSTED\n"
    "with the reason MAILBOX_FULL or IN_FLIGHT_LIMIT and a RetryInfo, also sent as the trailing\n"
    "metadata grpc-retry-pushback-ms), ledgerctl waits that long and sends the same call again,\n"
    "with the same request_id or transfer_id, up to --retries times (default 3) and only if the\n"
    "retry can start before --deadline, which bounds the whole command; each retry is announced\n"
    "on stderr. ledgerctl decides by the reason of each error, never by its message.\n"
    "Exit 5 for RESOURCE_EXHAUSTED means the last attempt was shed too, or no retry was allowed.\n"
    "apply retries per batch: a call whose outcome is unknown (UNAVAILABLE, DEADLINE_EXCEEDED),\n"
    "that could not be sent, that no leader took (NOT_LEADER), or that was refused for overload\n"
    "with a delay, is sent again whole, and the operations shed inside an answered call\n"
    "(MAILBOX_FULL: their shard was full) are sent again after its delay, all with the same ids\n"
    "and up to --retries times; --deadline bounds each call.\n"
    "\n"
    "A cluster: --target=HOST:PORT,HOST:PORT,... names its members. Only the leader serves\n"
    "ledger calls; a follower refuses each UNAVAILABLE with the reason NOT_LEADER (nothing was\n"
    "applied) and, when it knows one, the leader's address. ledgerctl then sends the same call,\n"
    "with the same request_id or transfer_id, to that leader, or else to the next --target\n"
    "address (after the refusal's RetryInfo delay, when it has one), passing over an address it\n"
    "cannot connect to: at most 10 hops per call, and never past --deadline; each hop is\n"
    "announced on stderr. A call still refused NOT_LEADER then exits 5 and is never reported as\n"
    "an outcome unknown. apply sends its later calls to the leader it found. A write that cannot\n"
    "connect to the first address tries the others in order.";

// The commands, for "did you mean".
const std::vector<std::string>& Commands() {
  static const auto* commands = new std::vector<std::string>{
      "deposit", "withdraw", "balance", "history", "transfer", "get-transfer",
      "apply",   "health",   "backup",  "cluster", "watch"};
  return *commands;
}

// Refuses, before anything is sent, a command line no server call could make sense of: an
// unknown command, or an AMOUNT that is not a positive integer.
void CheckCommand(const ledger::cli::ProgramSpec& program, const std::vector<std::string>& args) {
  if (args.empty())
    ledger::cli::ExitUsage(program,
                           "missing command (deposit, withdraw, balance, history, transfer, "
                           "get-transfer, apply, health, backup, cluster or watch)");
  const std::string& command = args[0];
  if (std::find(Commands().begin(), Commands().end(), command) == Commands().end()) {
    const std::optional<std::string> close = ledger::cli::DidYouMean(command, Commands());
    ledger::cli::ExitUsage(
        program,
        absl::StrCat("unknown command \"", command, "\"",
                     close.has_value() ? absl::StrCat("; did you mean ", *close, "?")
                                       : std::string("; the commands are deposit, withdraw, "
                                                     "balance, history, transfer, get-transfer, "
                                                     "apply, health, backup, cluster and "
                                                     "watch")));
  }
  const bool write = (command == "deposit" || command == "withdraw") && args.size() == 3;
  const bool transfer = command == "transfer" && args.size() == 4;
  if (write || transfer) {
    const std::string& text = args.back();
    int64_t amount = 0;
    if (!absl::SimpleAtoi(text, &amount)) {
      ledger::cli::ExitUsage(program, absl::StrCat("AMOUNT must be an integer number of minor "
                                                   "units; got \"",
                                                   text, "\""));
    }
    if (amount <= 0) {
      ledger::cli::ExitUsage(
          program,
          absl::StrCat("AMOUNT must be positive; got ", amount,
                       command == "deposit"    ? " (to take money out, use withdraw)"
                       : command == "withdraw" ? " (to put money in, use deposit)"
                                               : " (to move money back, swap FROM and TO)"));
    }
  }
}

// The options the flags give, checked; a usage error's text when one is out of its bounds or
// does not apply to `command`.
absl::StatusOr<ledger::ctl::LedgerctlOptions> OptionsFromFlags(const std::string& command) {
  ledger::ctl::LedgerctlOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  options.json = absl::GetFlag(FLAGS_json);
  options.deadline = absl::GetFlag(FLAGS_deadline);
  options.retries = absl::GetFlag(FLAGS_retries);
  options.batch_size = absl::GetFlag(FLAGS_batch_size);
  options.request_id = absl::GetFlag(FLAGS_request_id);
  options.transfer_id = absl::GetFlag(FLAGS_transfer_id);
  options.page_size = absl::GetFlag(FLAGS_page_size);
  options.page_token = absl::GetFlag(FLAGS_page_token);
  options.backup_to = absl::GetFlag(FLAGS_to);
  options.watch_from = absl::GetFlag(FLAGS_from);
  options.watch_accounts = absl::GetFlag(FLAGS_account);
  options.watch_with_balances = absl::GetFlag(FLAGS_with_balances);
  options.tls = ledger::ClientTlsOptionsFromFlags();
  if (options.deadline <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--deadline must be positive");
  }
  if (options.retries < 0 || options.retries > ledger::ctl::kMaxRetries) {
    return absl::InvalidArgumentError(
        absl::StrCat("--retries must be 0 to ", ledger::ctl::kMaxRetries));
  }
  if (options.batch_size < 1 || options.batch_size > ledger::kMaxApplyBatchSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--batch_size must be 1 to ", ledger::kMaxApplyBatchSize, "; got ", options.batch_size));
  }
  if (!options.request_id.empty() && command != "deposit" && command != "withdraw") {
    return absl::InvalidArgumentError(
        command == "transfer"
            ? "--request_id applies to deposit and withdraw only; a transfer takes --transfer_id"
            : "--request_id applies to deposit and withdraw only");
  }
  if ((options.watch_from != 0 || !options.watch_accounts.empty() || options.watch_with_balances) &&
      command != "watch") {
    return absl::InvalidArgumentError("--from, --account and --with_balances apply to watch only");
  }
  if (options.watch_with_balances && options.watch_accounts.empty()) {
    return absl::InvalidArgumentError("--with_balances needs the accounts to read (--account)");
  }
  if (options.watch_with_balances && options.watch_from != 0) {
    return absl::InvalidArgumentError(
        "--with_balances starts at the position of the balances it prints: drop --from");
  }
  if (!options.backup_to.empty() && command != "backup") {
    return absl::InvalidArgumentError("--to applies to backup only");
  }
  if (!options.transfer_id.empty() && command != "transfer") {
    return absl::InvalidArgumentError(
        command == "get-transfer" ? "--transfer_id applies to transfer only; get-transfer takes "
                                    "the id as its argument: ledgerctl get-transfer ID"
                                  : "--transfer_id applies to transfer only");
  }
  return options;
}

// --target's addresses: one, or a cluster's members separated by commas, each HOST:PORT as
// ParseHostPort reads it (its words when one is wrong), in the order given.
absl::StatusOr<std::vector<std::string>> ParseTargets(const std::string& flag) {
  std::vector<std::string> targets;
  for (absl::string_view text : absl::StrSplit(flag, ',')) {
    absl::StatusOr<ledger::cli::HostPort> target =
        ledger::cli::ParseHostPort("--target", text, ledger::cli::AddressUse::kConnect, 50051);
    if (!target.ok()) return target.status();
    targets.push_back(target->ToString());
  }
  return targets;
}

}  // namespace

int main(int argc, char** argv) {
  // gRPC's own log lines (a poller's error at exit after a call timed out) are noise here:
  // ledgerctl reports every call's outcome itself. Set GRPC_VERBOSITY or GRPC_TRACE to see them.
  if (std::getenv("GRPC_VERBOSITY") == nullptr && std::getenv("GRPC_TRACE") == nullptr) {
    gpr_set_log_function([](gpr_log_func_args* /*line*/) {});
  }
  const std::vector<std::string> command_line(argv, argv + argc);  // For a retry's command.
  const ledger::cli::ProgramSpec program{"ledgerctl", __FILE__, kUsage, {ledger::kTlsFlagsFile}};
  const std::vector<std::string> positional =
      ledger::cli::ParseCommandLineOrExit(argc, argv, program);
  CheckCommand(program, positional);
  // The commands read argv's shape: args[0] the program, args[1] the command.
  std::vector<char*> args = {argv[0]};
  for (const std::string& arg : positional) args.push_back(const_cast<char*>(arg.c_str()));
  const std::string command = args[1];
  absl::StatusOr<ledger::ctl::LedgerctlOptions> options = OptionsFromFlags(command);
  if (!options.ok()) return ledger::ctl::UsageError(std::string(options.status().message()));
  absl::StatusOr<std::vector<std::string>> targets = ParseTargets(options->target);
  if (!targets.ok()) ledger::cli::ExitUsage(program, targets.status().message());
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ledger::NewChannelCredentials(options->tls);
  if (!credentials.ok()) {
    return ledger::ctl::UsageError(std::string(credentials.status().message()));
  }
  // The command's one deadline starts here, before any call.
  ledger::ctl::LedgerctlSession session(*std::move(options), *std::move(targets),
                                        *std::move(credentials), command_line);
  using Command = int (*)(ledger::ctl::LedgerctlSession&, const std::vector<char*>&);
  const std::pair<const char*, Command> kCommands[] = {
      {"deposit", ledger::ctl::RunDeposit},   {"withdraw", ledger::ctl::RunWithdraw},
      {"balance", ledger::ctl::RunBalance},   {"history", ledger::ctl::RunHistory},
      {"transfer", ledger::ctl::RunTransfer}, {"get-transfer", ledger::ctl::RunGetTransfer},
      {"apply", ledger::ctl::RunApply},       {"health", ledger::ctl::RunHealth},
      {"backup", ledger::ctl::RunBackup},     {"cluster", ledger::ctl::RunCluster},
      {"watch", ledger::ctl::RunWatch},
  };
  for (const auto& [name, run] : kCommands) {
    if (command == name) return run(session, args);
  }
  // CheckCommand refused it already.
  return ledger::ctl::UsageError(absl::StrCat("unknown command ", command));
}
