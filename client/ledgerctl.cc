// ledgerctl: calls ledgerd from the command line, for people and for scripts.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "base/status_code_names.h"
#include "cli/command_line.h"
#include "cli/host_port.h"
#include "client/apply_batches.h"
#include "client/apply_input.h"
#include "client/call_outcome.h"
#include "client/channel_credentials.h"
#include "client/exit_codes.h"
#include "client/json_line.h"
#include "client/ledgerctl_output.pb.h"
#include "client/pushback.h"
#include "client/request_id.h"
#include "client/tls_flags.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "ledger/v1/ledger.grpc.pb.h"

// --target's default, also left out of the commands ledgerctl prints for settling a transfer.
constexpr char kDefaultTarget[] = "localhost:50051";

ABSL_FLAG(std::string, target, kDefaultTarget,
          "HOST:PORT of ledgerd's gRPC endpoint; :PORT is localhost, [::1]:PORT an IPv6 address");
ABSL_FLAG(bool, json, false,
          "print results as one JSON object per line (protobuf's JSON mapping with the proto "
          "field names: int64 values as strings); errors and retry notes go to stderr as JSON "
          "too, {\"code\":..., \"message\":...}. apply prints JSON Lines with or without it");
ABSL_FLAG(absl::Duration, deadline, absl::Seconds(5),
          "how long to wait for an answer, with a unit: 5s, 250ms, 1m; it bounds the whole "
          "command, retries after a server's pushback included (apply: each Apply call, and the "
          "longest pushback it waits for)");
ABSL_FLAG(int32_t, retries, 3,
          "every command but health: when the server sheds the call "
          "(RESOURCE_EXHAUSTED) and says when to come back (grpc-retry-pushback-ms), wait that "
          "long and send the same call again (same request_id or transfer_id), at most this many "
          "times (0 to "
          "10; 0 never retries), and never past --deadline. Without that pushback, no retry. "
          "apply: per batch, and a batch whose call failed UNAVAILABLE or DEADLINE_EXCEEDED is "
          "retried too (after the pushback, or 100 ms doubling)");
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
    "\n"
    "AMOUNT is a positive integer number of minor units (cents). Flags may come before or\n"
    "after the command; `--` ends them. Prints `ACCOUNT: BALANCE` (the balance after the call;\n"
    "for transfer, FROM's and then TO's), the account's operations newest first for history,\n"
    "the transfer's state (PENDING, COMMITTED or REFUSED) for get-transfer, `SERVING` for\n"
    "health, or JSON with --json.\n"
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
    "     outcome unknown (UNAVAILABLE, DEADLINE_EXCEEDED: a deposit, withdraw or transfer may\n"
    "     have been applied; retry with the same --request_id or --transfer_id, which applies it\n"
    "     at most once, or ask get-transfer), or health is not SERVING\n"
    "get-transfer exits 0 for any state it reads: the state is in its output (`state` in JSON).\n"
    "apply exits with the worst of its operations' classes, and 2 when a line is not an\n"
    "operation (nothing was sent).\n"
    "\n"
    "When the server sheds a call and says when to come back (RESOURCE_EXHAUSTED with the\n"
    "trailing metadata grpc-retry-pushback-ms), ledgerctl waits that long and sends the same call\n"
    "again, with the same request_id or transfer_id, up to --retries times (default 3) and only\n"
    "if the retry can start before --deadline, which bounds the whole command; each retry is\n"
    "announced on stderr.\n"
    "Exit 5 for RESOURCE_EXHAUSTED means the last attempt was shed too, or no retry was allowed.\n"
    "apply retries per batch: a call that failed UNAVAILABLE or DEADLINE_EXCEEDED, or was shed\n"
    "with a pushback, is sent again whole, and the operations shed inside an answered call\n"
    "(RESOURCE_EXHAUSTED: their shard was full) are sent again after its pushback, all with the\n"
    "same ids and up to --retries times; --deadline bounds each call.";

int UsageError(const std::string& problem) {
  std::cerr << "ledgerctl: " << problem
            << "\nusage: ledgerctl [flags] deposit|withdraw ACCOUNT AMOUNT | balance ACCOUNT | "
               "history ACCOUNT | transfer FROM TO AMOUNT | get-transfer ID | apply FILE|- | "
               "health\n"
               "`ledgerctl --help` explains the flags and the exit codes\n";
  return ledger::kExitUsage;
}

int Failed(const grpc::Status& status) {
  const char* code = ledger::StatusCodeName(static_cast<int>(status.error_code()));
  if (absl::GetFlag(FLAGS_json)) {
    ledger::ctl::Error error;
    error.set_code(code);
    error.set_message(status.error_message());
    std::cerr << ledger::JsonLine(error);
  } else {
    std::cerr << "ledgerctl: " << code << ": " << status.error_message() << "\n";
  }
  return ledger::ExitCodeFor(status.error_code());
}

int PrintBalance(const std::string& account, int64_t balance) {
  if (absl::GetFlag(FLAGS_json)) {
    ledger::ctl::BalanceLine line;
    line.set_account_id(account);
    line.set_balance(balance);
    std::cout << ledger::JsonLine(line);
  } else {
    std::cout << account << ": " << balance << "\n";
  }
  return ledger::kExitOk;
}

// The most --retries accepts: a server that sheds a call more often than this is overloaded for
// longer than a person at a terminal should wait through.
constexpr int32_t kMaxRetries = 10;

// When the command must have its answer: --deadline from the first call of this function, which
// main makes before any call, so that retries share one deadline (--deadline bounds the command).
absl::Time CommandDeadline() {
  static const absl::Time deadline = absl::Now() + absl::GetFlag(FLAGS_deadline);
  return deadline;
}

std::unique_ptr<grpc::ClientContext> NewContext() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(CommandDeadline()));
  return context;
}

// Says on stderr what ledgerctl does about a call it may retry (JSON with --json, like its
// errors): `shed` when the server shed it; the retry fields when retry_in_ms >= 0.
void RetryNote(bool shed, const std::string& text, int64_t retry_in_ms, int attempt, int attempts) {
  if (!absl::GetFlag(FLAGS_json)) {
    std::cerr << "ledgerctl: " << text << "\n";
    return;
  }
  ledger::ctl::RetryNote note;
  note.set_shed(shed);
  note.set_note(text);
  if (retry_in_ms >= 0) {
    note.set_retry_in_ms(retry_in_ms);
    note.set_attempt(attempt);
    note.set_attempts(attempts);
  }
  std::cerr << ledger::JsonLine(note);
}

// RetryNote for a shed single call: its text says so first.
void ShedNote(const std::string& text, int64_t retry_in_ms, int attempt, int attempts) {
  RetryNote(/*shed=*/true,
            absl::GetFlag(FLAGS_json) ? text : absl::StrCat("shed by the server; ", text),
            retry_in_ms, attempt, attempts);
}

// Runs `attempt` (one call on the context it is given) and, while the server refuses it for
// overload (client/call_outcome.h) and says how long to wait, waits that long and runs it again: at
// most --retries more times, and only when the retry can start before CommandDeadline(). Returns
// the last attempt's status. The caller's request (and its request_id) is the same for every
// attempt, so a deposit or withdraw stays one operation, applied at most once; a shed attempt
// applied nothing.
template <typename Attempt>
grpc::Status CallHonouringPushback(Attempt attempt) {
  const int32_t retries = absl::GetFlag(FLAGS_retries);
  const int attempts = retries + 1;
  for (int number = 1;; ++number) {
    std::unique_ptr<grpc::ClientContext> context = NewContext();
    grpc::Status status = attempt(context.get());
    const ledger::CallOutcome outcome = ledger::ReadCallOutcome(status);
    if (!outcome.overloaded) return status;
    // RetryInfo; gRPC's pushback trailer says the same to clients that read only that.
    const std::optional<std::chrono::milliseconds> pushback =
        outcome.retry_delay.has_value()
            ? outcome.retry_delay
            : ledger::RetryPushback(context->GetServerTrailingMetadata());
    if (!pushback.has_value()) return status;  // The server did not say when: no retry.
    const int64_t wait_ms = pushback->count();
    if (number >= attempts) {
      ShedNote(absl::StrCat("not retrying: ",
                            retries == 0 ? "--retries=0"
                                         : absl::StrCat("all ", attempts, " attempts were shed"),
                            " (the server asked to wait ", wait_ms, " ms)"),
               -1, number, attempts);
      return status;
    }
    const absl::Duration left = CommandDeadline() - absl::Now();
    if (absl::Milliseconds(wait_ms) >= left) {
      ShedNote(absl::StrCat("not retrying: the server asked to wait ", wait_ms,
                            " ms, and --deadline leaves ",
                            absl::FormatDuration(absl::Trunc(left, absl::Milliseconds(1)))),
               -1, number, attempts);
      return status;
    }
    ShedNote(
        absl::StrCat("retrying in ", wait_ms, " ms (attempt ", number + 1, " of ", attempts, ")"),
        wait_ms, number + 1, attempts);
    std::this_thread::sleep_for(*pushback);
  }
}

// `word` as a POSIX shell reads it back: as is when it holds only safe characters, else in
// single quotes.
std::string ShellQuoted(const std::string& word) {
  const bool safe = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
           absl::string_view("_-./:=@%+,").find(c) != absl::string_view::npos;
  });
  if (safe) return word;
  return absl::StrCat("'", absl::StrReplaceAll(word, {{"'", "'\\''"}}), "'");
}

// The command line that retries this call safely: the same arguments with --ID_FLAG=ID (ID_FLAG
// is request_id or transfer_id), and without --deadline (often what ran out; the retry gets the
// default).
std::string RetryCommand(const std::vector<std::string>& command_line, absl::string_view id_flag,
                         const std::string& id) {
  std::vector<std::string> words = {"ledgerctl"};
  for (size_t i = 1; i < command_line.size(); ++i) {
    const std::string& word = command_line[i];
    bool dropped = false;
    for (absl::string_view flag : {id_flag, absl::string_view("deadline")}) {
      if (word == absl::StrCat("--", flag) || word == absl::StrCat("-", flag)) {
        ++i;  // Its value is the next word.
        dropped = true;
      } else if (absl::StartsWith(word, absl::StrCat("--", flag, "=")) ||
                 absl::StartsWith(word, absl::StrCat("-", flag, "="))) {
        dropped = true;
      }
    }
    if (!dropped) words.push_back(ShellQuoted(word));
  }
  words.push_back(ShellQuoted(absl::StrCat("--", id_flag, "=", id)));
  return absl::StrJoin(words, " ");
}

// The command that asks how transfer `transfer_id` ended, on the same server as this one.
std::string GetTransferCommand(const std::string& transfer_id) {
  std::vector<std::string> words = {"ledgerctl"};
  if (absl::GetFlag(FLAGS_target) != kDefaultTarget) {
    words.push_back(ShellQuoted("--target=" + absl::GetFlag(FLAGS_target)));
  }
  const ledger::ClientTlsOptions tls = ledger::ClientTlsOptionsFromFlags();
  for (const auto& [flag, value] :
       {std::pair<const char*, const std::string&>{"tls_ca_file", tls.ca_file},
        {"tls_cert_file", tls.cert_file},
        {"tls_key_file", tls.key_file},
        {"tls_server_name", tls.server_name}}) {
    if (!value.empty()) words.push_back(ShellQuoted(absl::StrCat("--", flag, "=", value)));
  }
  words.push_back("get-transfer");
  words.push_back(ShellQuoted(transfer_id));
  return absl::StrJoin(words, " ");
}

// Connects `channel` before a write is sent (client/channel_credentials.h), so that a write that
// could not be sent is known to have applied nothing; when it cannot, says so and returns the
// exit code of the failure.
std::optional<int> RefuseUnconnected(grpc::Channel& channel, const std::string& operation) {
  const grpc::Status connected = ledger::ConnectBefore(channel, absl::GetFlag(FLAGS_target),
                                                       absl::ToChronoTime(CommandDeadline()));
  if (connected.ok()) return std::nullopt;
  const int exit_code = Failed(connected);
  if (!absl::GetFlag(FLAGS_json)) {
    std::cerr << "ledgerctl: the " << operation << " was not sent, so nothing was applied\n";
  }
  return exit_code;
}

// What a failed deposit or withdraw means for the money, after the error line itself.
void ExplainWriteFailure(const grpc::Status& status, const std::string& operation,
                         const std::vector<std::string>& command_line,
                         const std::string& request_id) {
  if (absl::GetFlag(FLAGS_json)) return;
  if (ledger::ReadCallOutcome(status).effect != ledger::CallEffect::kUnknown) return;
  std::cerr << "ledgerctl: outcome unknown: the " << operation
            << " may have been applied. Retry it exactly like this, which applies it at most "
               "once:\n  "
            << RetryCommand(command_line, "request_id", request_id) << "\n";
}

template <typename Request, typename Response, typename Call>
int Mutate(const std::shared_ptr<grpc::Channel>& channel, const std::vector<char*>& args,
           const std::vector<std::string>& command_line, Call call) {
  if (args.size() != 4) return UsageError(absl::StrCat(args[1], " takes ACCOUNT AMOUNT"));
  int64_t amount = 0;
  if (!absl::SimpleAtoi(args[3], &amount)) {
    return UsageError(
        absl::StrCat("AMOUNT must be an integer number of minor units; got ", args[3]));
  }
  Request request;
  request.set_account_id(args[2]);
  request.set_amount(amount);
  const std::string& given_request_id = absl::GetFlag(FLAGS_request_id);
  request.set_request_id(given_request_id.empty() ? ledger::NewRequestId() : given_request_id);
  Response response;
  if (std::optional<int> unsent = RefuseUnconnected(*channel, args[1])) return *unsent;
  auto stub = ledger::v1::Ledger::NewStub(channel);
  const grpc::Status status = CallHonouringPushback(
      [&](grpc::ClientContext* context) { return call(*stub, context, request, &response); });
  if (!status.ok()) {
    const int exit_code = Failed(status);
    ExplainWriteFailure(status, args[1], command_line, request.request_id());
    return exit_code;
  }
  if (absl::GetFlag(FLAGS_json)) {
    ledger::ctl::WriteLine line;
    line.set_account_id(request.account_id());
    line.set_balance(response.balance());
    line.set_request_id(request.request_id());
    line.set_replayed(response.replayed());
    std::cout << ledger::JsonLine(line);
    return ledger::kExitOk;
  }
  std::cout << request.account_id() << ": " << response.balance();
  if (response.replayed()) {
    std::cout << " (replayed: the recorded result of an earlier " << args[1] << " with request_id "
              << request.request_id()
              << "; nothing was applied now, and the balance may have changed since)";
  }
  std::cout << "\n";
  return ledger::kExitOk;
}

// What a failed transfer means for the money, after the error line itself: how to settle an
// unknown outcome (GetTransfer, or a retry with the same transfer_id).
void ExplainTransferFailure(const grpc::Status& status, const ledger::v1::TransferRequest& request,
                            const std::vector<std::string>& command_line) {
  if (absl::GetFlag(FLAGS_json)) return;
  const ledger::CallEffect effect = ledger::ReadCallOutcome(status).effect;
  if (effect != ledger::CallEffect::kUnknown && effect != ledger::CallEffect::kPending) return;
  if (effect == ledger::CallEffect::kPending) {
    std::cerr << "ledgerctl: the transfer is still pending: debited from "
              << request.from_account_id() << ", its credit to " << request.to_account_id()
              << " not yet confirmed; it ends COMMITTED or REFUSED on its own. See how with:\n  "
              << GetTransferCommand(request.transfer_id()) << "\n";
    return;
  }
  std::cerr << "ledgerctl: outcome unknown: the transfer may have been applied. Find out with:\n  "
            << GetTransferCommand(request.transfer_id())
            << "\nor retry it exactly like this, which moves the money at most once:\n  "
            << RetryCommand(command_line, "transfer_id", request.transfer_id()) << "\n";
}

int Transfer(const std::shared_ptr<grpc::Channel>& channel, const std::vector<char*>& args,
             const std::vector<std::string>& command_line) {
  if (args.size() != 5) return UsageError("transfer takes FROM TO AMOUNT");
  int64_t amount = 0;
  if (!absl::SimpleAtoi(args[4], &amount)) {
    return UsageError(
        absl::StrCat("AMOUNT must be an integer number of minor units; got ", args[4]));
  }
  ledger::v1::TransferRequest request;
  request.set_from_account_id(args[2]);
  request.set_to_account_id(args[3]);
  request.set_amount(amount);
  // Always an id, as for deposits: a transfer whose outcome is unknown can then be settled.
  const std::string& given_transfer_id = absl::GetFlag(FLAGS_transfer_id);
  request.set_transfer_id(given_transfer_id.empty() ? ledger::NewRequestId() : given_transfer_id);
  ledger::v1::TransferResponse response;
  if (std::optional<int> unsent = RefuseUnconnected(*channel, "transfer")) return *unsent;
  auto stub = ledger::v1::Ledger::NewStub(channel);
  const grpc::Status status = CallHonouringPushback(
      [&](grpc::ClientContext* context) { return stub->Transfer(context, request, &response); });
  if (!status.ok()) {
    const int exit_code = Failed(status);
    ExplainTransferFailure(status, request, command_line);
    return exit_code;
  }
  if (absl::GetFlag(FLAGS_json)) {
    ledger::ctl::TransferLine line;
    line.set_transfer_id(request.transfer_id());
    line.set_from_account_id(request.from_account_id());
    line.set_from_balance(response.from_balance());
    line.set_to_account_id(request.to_account_id());
    line.set_to_balance(response.to_balance());
    line.set_replayed(response.replayed());
    std::cout << ledger::JsonLine(line);
    return ledger::kExitOk;
  }
  std::cout << request.from_account_id() << ": " << response.from_balance() << "\n"
            << request.to_account_id() << ": " << response.to_balance() << "\n";
  if (response.replayed()) {
    std::cout << "(replayed: the recorded result of an earlier transfer with transfer_id "
              << request.transfer_id()
              << "; nothing was moved now, and the balances may have changed since)\n";
  }
  return ledger::kExitOk;
}

std::string FormatTimestamp(const google::protobuf::Timestamp& time) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ",
                          absl::FromUnixSeconds(time.seconds()) + absl::Nanoseconds(time.nanos()),
                          absl::UTCTimeZone());
}

// "COMMITTED", "PENDING", "REFUSED" (the enum's name without its prefix).
std::string TransferStateName(ledger::v1::TransferState state) {
  return std::string(absl::StripPrefix(ledger::v1::TransferState_Name(state), "TRANSFER_STATE_"));
}

void PrintTransferStateJson(const ledger::v1::GetTransferResponse& t) {
  ledger::ctl::TransferStateLine line;
  line.set_transfer_id(t.transfer_id());
  line.set_state(TransferStateName(t.state()));
  line.set_from_account_id(t.from_account_id());
  line.set_to_account_id(t.to_account_id());
  line.set_amount(t.amount());
  if (t.state() != ledger::v1::TRANSFER_STATE_REFUSED) line.set_from_balance(t.from_balance());
  if (t.state() == ledger::v1::TRANSFER_STATE_COMMITTED) line.set_to_balance(t.to_balance());
  if (t.state() == ledger::v1::TRANSFER_STATE_REFUSED) {
    line.set_refusal_code(ledger::StatusCodeName(t.refusal_code()));
    line.set_refusal_message(t.refusal_message());
  }
  if (t.has_created_time()) *line.mutable_created_time() = t.created_time();
  if (t.has_credited_time()) *line.mutable_credited_time() = t.credited_time();
  if (t.has_finished_time()) *line.mutable_finished_time() = t.finished_time();
  std::cout << ledger::JsonLine(line);
}

void PrintTransferState(const ledger::v1::GetTransferResponse& t) {
  std::cout << "transfer_id: " << t.transfer_id() << "\n";
  switch (t.state()) {
    case ledger::v1::TRANSFER_STATE_COMMITTED:
      std::cout << "state:       COMMITTED: both sides applied and durable\n"
                << "from:        " << t.from_account_id() << " (balance after the debit "
                << t.from_balance() << ")\n"
                << "to:          " << t.to_account_id() << " (balance after the credit "
                << t.to_balance() << ")\n";
      break;
    case ledger::v1::TRANSFER_STATE_PENDING:
      std::cout << "state:       PENDING: debited, the credit not yet confirmed; it ends COMMITTED "
                   "or REFUSED on its own\n"
                << "from:        " << t.from_account_id() << " (balance after the debit "
                << t.from_balance() << ")\n"
                << "to:          " << t.to_account_id() << "\n";
      break;
    case ledger::v1::TRANSFER_STATE_REFUSED:
      std::cout << "state:       REFUSED: no money moved (a debit, if any, was refunded)\n"
                << "refused:     " << ledger::StatusCodeName(t.refusal_code()) << ": "
                << t.refusal_message() << "\n"
                << "from:        " << t.from_account_id() << "\n"
                << "to:          " << t.to_account_id() << "\n";
      break;
    default:  // A state newer than this ledgerctl.
      std::cout << "state:       " << TransferStateName(t.state()) << "\n"
                << "from:        " << t.from_account_id() << "\n"
                << "to:          " << t.to_account_id() << "\n";
      break;
  }
  std::cout << "amount:      " << t.amount() << "\n";
  if (t.has_created_time()) {
    std::cout << "created:     " << FormatTimestamp(t.created_time()) << "\n";
  }
  if (t.has_credited_time()) {
    std::cout << "credited:    " << FormatTimestamp(t.credited_time()) << "\n";
  }
  if (t.has_finished_time()) {
    std::cout << "finished:    " << FormatTimestamp(t.finished_time()) << "\n";
  }
}

int GetTransfer(const std::shared_ptr<grpc::Channel>& channel, const std::vector<char*>& args) {
  if (args.size() != 3) return UsageError("get-transfer takes ID (a transfer_id)");
  ledger::v1::GetTransferRequest request;
  request.set_transfer_id(args[2]);
  ledger::v1::GetTransferResponse response;
  auto stub = ledger::v1::Ledger::NewStub(channel);
  const grpc::Status status = CallHonouringPushback(
      [&](grpc::ClientContext* context) { return stub->GetTransfer(context, request, &response); });
  if (!status.ok()) return Failed(status);
  if (absl::GetFlag(FLAGS_json)) {
    PrintTransferStateJson(response);
  } else {
    PrintTransferState(response);
  }
  return ledger::kExitOk;
}

int Balance(const std::shared_ptr<grpc::Channel>& channel, const std::vector<char*>& args) {
  if (args.size() != 3) return UsageError("balance takes ACCOUNT");
  ledger::v1::BalanceRequest request;
  request.set_account_id(args[2]);
  ledger::v1::BalanceResponse response;
  auto stub = ledger::v1::Ledger::NewStub(channel);
  const grpc::Status status = CallHonouringPushback(
      [&](grpc::ClientContext* context) { return stub->Balance(context, request, &response); });
  if (!status.ok()) return Failed(status);
  return PrintBalance(request.account_id(), response.balance());
}

const char* OperationName(ledger::v1::Operation operation) {
  switch (operation) {
    case ledger::v1::OPERATION_DEPOSIT:
      return "deposit";
    case ledger::v1::OPERATION_WITHDRAW:
      return "withdraw";
    case ledger::v1::OPERATION_TRANSFER_OUT:
      return "transfer_out";
    case ledger::v1::OPERATION_TRANSFER_IN:
      return "transfer_in";
    case ledger::v1::OPERATION_TRANSFER_REFUND:
      return "transfer_refund";
    default:
      return "unknown";
  }
}

// The last column of a history line: the request_id, or for a step of a transfer its
// transfer_id and the other account.
std::string EntryReference(const ledger::v1::HistoryEntry& entry) {
  switch (entry.operation()) {
    case ledger::v1::OPERATION_TRANSFER_OUT:
      return absl::StrCat(entry.transfer_id(), " to ", entry.counterparty_account_id());
    case ledger::v1::OPERATION_TRANSFER_IN:
      return absl::StrCat(entry.transfer_id(), " from ", entry.counterparty_account_id());
    case ledger::v1::OPERATION_TRANSFER_REFUND:
      return absl::StrCat(entry.transfer_id(), " refused by ", entry.counterparty_account_id());
    default:
      return entry.request_id();
  }
}

void PrintHistoryJson(const std::string& account_id, const ledger::v1::HistoryResponse& response) {
  ledger::ctl::HistoryPage page;
  page.set_account_id(account_id);
  for (const ledger::v1::HistoryEntry& entry : response.entries()) {
    ledger::ctl::HistoryPage::Entry& line = *page.add_entries();
    line.set_sequence(entry.sequence());
    line.set_operation(OperationName(entry.operation()));
    line.set_amount(entry.amount());
    line.set_balance_after(entry.balance_after());
    line.set_request_id(entry.request_id());
    *line.mutable_time() = entry.time();
    if (!entry.transfer_id().empty()) {
      line.set_transfer_id(entry.transfer_id());
      line.set_counterparty_account_id(entry.counterparty_account_id());
    }
  }
  page.set_next_page_token(response.next_page_token());
  std::cout << ledger::JsonLine(page);
}

int History(const std::shared_ptr<grpc::Channel>& channel, const std::vector<char*>& args) {
  if (args.size() != 3) return UsageError("history takes ACCOUNT");
  ledger::v1::HistoryRequest request;
  request.set_account_id(args[2]);
  request.set_page_size(absl::GetFlag(FLAGS_page_size));
  request.set_page_token(absl::GetFlag(FLAGS_page_token));
  ledger::v1::HistoryResponse response;
  auto stub = ledger::v1::Ledger::NewStub(channel);
  const grpc::Status status = CallHonouringPushback(
      [&](grpc::ClientContext* context) { return stub->History(context, request, &response); });
  if (!status.ok()) return Failed(status);
  auto time_of = [](const ledger::v1::HistoryEntry& entry) {
    return FormatTimestamp(entry.time());
  };
  if (absl::GetFlag(FLAGS_json)) {
    PrintHistoryJson(request.account_id(), response);
    return ledger::kExitOk;
  }
  // OPERATION is as wide as its longest name, transfer_refund.
  std::cout << absl::StrFormat("%-6s %-24s %-15s %12s %14s  %s\n", "SEQ", "TIME (UTC)", "OPERATION",
                               "AMOUNT", "BALANCE AFTER", "REQUEST ID (TRANSFER ID AND ACCOUNT)");
  for (const ledger::v1::HistoryEntry& entry : response.entries()) {
    std::cout << absl::StrFormat("%-6d %-24s %-15s %12d %14d  %s\n", entry.sequence(),
                                 time_of(entry), OperationName(entry.operation()), entry.amount(),
                                 entry.balance_after(), EntryReference(entry));
  }
  if (!response.next_page_token().empty()) {
    std::cout << "older entries: ledgerctl history " << request.account_id()
              << " --page_token=" << response.next_page_token() << "\n";
  }
  return ledger::kExitOk;
}

int Health(const std::shared_ptr<grpc::Channel>& channel, const std::vector<char*>& args) {
  if (args.size() != 2) return UsageError("health takes no arguments");
  grpc::health::v1::HealthCheckRequest request;  // "": the server as a whole.
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status =
      grpc::health::v1::Health::NewStub(channel)->Check(NewContext().get(), request, &response);
  if (!status.ok()) return Failed(status);
  const std::string serving =
      grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
  if (absl::GetFlag(FLAGS_json)) {
    ledger::ctl::HealthLine line;
    line.set_status(serving);
    std::cout << ledger::JsonLine(line);
  } else {
    std::cout << serving << "\n";
  }
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING
             ? ledger::kExitOk
             : ledger::kExitUnavailable;
}

// The operations of apply's FILE ("-": stdin), every line checked; a usage error's text if not.
absl::StatusOr<std::vector<ledger::ApplyInput>> ReadApplyFile(const std::string& path) {
  const std::string name = path == "-" ? "stdin" : absl::StrCat("\"", path, "\"");
  absl::StatusOr<std::vector<ledger::ApplyInput>> inputs;
  if (path == "-") {
    inputs = ledger::ReadApplyInput(std::cin);
  } else {
    std::ifstream file(path, std::ios::binary);
    if (!file.is_open()) {
      return absl::InvalidArgumentError(
          absl::StrCat("apply: cannot open ", name, ": ", std::strerror(errno)));
    }
    inputs = ledger::ReadApplyInput(file);
  }
  if (inputs.ok()) return inputs;
  return absl::InvalidArgumentError(
      absl::StrCat("apply: nothing was sent; in ", name, ":\n  ",
                   absl::StrReplaceAll(inputs.status().message(), {{"\n", "\n  "}})));
}

// What apply has printed so far: how many results of each code, and the worst class.
class ApplyTally {
 public:
  // Prints the outcome of `input` as its JSON line, and counts it.
  void Print(const ledger::ApplyInput& input, const ledger::ApplyOperationOutcome& outcome) {
    const ledger::v1::ApplyResult& result = outcome.result;
    ledger::ctl::ApplyLine line;
    line.set_line(input.line);
    const std::string& id = ledger::IdOf(input.operation);
    if (!id.empty()) line.set_id(id);
    const char* code = outcome.sent ? ledger::StatusCodeName(result.code()) : kNotSent;
    line.set_code(code);
    if (result.code() != 0 || !outcome.sent) {
      line.set_message(result.message());
    } else {
      line.set_balance(result.balance());
      if (input.operation.has_transfer()) line.set_to_balance(result.to_balance());
      if (!input.operation.has_balance()) line.set_replayed(result.replayed());
    }
    std::cout << ledger::JsonLine(line);
    ++count_by_code_[outcome.sent ? result.code() : kNotSentKey];
    worst_ = ledger::WorseExitCode(
        worst_, ledger::ExitCodeFor(static_cast<grpc::StatusCode>(result.code())));
  }

  ledger::ExitCode worst() const { return worst_; }

  // "OK 3, NOT_FOUND 1", in the order of the codes (NOT_SENT last).
  std::string Counts() const {
    std::vector<std::string> parts;
    for (const auto& [code, count] : count_by_code_) {
      parts.push_back(
          absl::StrCat(code == kNotSentKey ? kNotSent : ledger::StatusCodeName(code), " ", count));
    }
    return absl::StrJoin(parts, ", ");
  }

 private:
  static constexpr char kNotSent[] = "NOT_SENT";
  static constexpr int32_t kNotSentKey = 1000;  // After every status code.
  std::map<int32_t, int64_t> count_by_code_;
  ledger::ExitCode worst_ = ledger::kExitOk;
};

// apply: the operations of FILE in Apply calls of --batch_size, one JSON line per operation.
int Apply(const std::shared_ptr<grpc::Channel>& channel, const std::vector<char*>& args) {
  if (args.size() != 3) return UsageError("apply takes FILE (- for stdin)");
  absl::StatusOr<std::vector<ledger::ApplyInput>> inputs = ReadApplyFile(args[2]);
  if (!inputs.ok()) return UsageError(std::string(inputs.status().message()));
  ledger::AssignMissingIds(*inputs, ledger::NewRequestId);
  auto stub = ledger::v1::Ledger::NewStub(channel);
  const absl::Duration deadline = absl::GetFlag(FLAGS_deadline);
  const ledger::ApplyBatchOptions options{
      .batch_size = absl::GetFlag(FLAGS_batch_size),
      .retries = absl::GetFlag(FLAGS_retries),
      .max_wait = absl::ToChronoMilliseconds(deadline),
  };
  ApplyTally tally;
  const ledger::ApplyBatchHooks hooks{
      .call =
          [&](const ledger::v1::ApplyRequest& request) {
            const absl::Time call_deadline = absl::Now() + deadline;
            ledger::ApplyCallOutcome outcome;
            outcome.status = ledger::ConnectBefore(*channel, absl::GetFlag(FLAGS_target),
                                                   absl::ToChronoTime(call_deadline));
            if (!outcome.status.ok()) {
              outcome.sent = false;
              return outcome;
            }
            grpc::ClientContext context;  // Each call its own --deadline: a file takes many.
            context.set_deadline(absl::ToChronoTime(call_deadline));
            outcome.status = stub->Apply(&context, request, &outcome.response);
            outcome.pushback = ledger::RetryPushback(context.GetServerTrailingMetadata());
            return outcome;
          },
      .wait = [](std::chrono::milliseconds wait) { std::this_thread::sleep_for(wait); },
      .note =
          [](const ledger::ApplyRetryNote& note) {
            std::cout.flush();  // The results so far come before what happens next.
            RetryNote(note.shed, note.text, note.wait.has_value() ? note.wait->count() : -1,
                      note.attempt, note.attempts);
          },
      .outcome =
          [&](size_t index, const ledger::ApplyOperationOutcome& outcome) {
            tally.Print((*inputs)[index], outcome);
          },
  };
  const int64_t calls = ledger::ApplyInBatches(*inputs, options, hooks);
  std::cout.flush();
  if (!absl::GetFlag(FLAGS_json)) {
    std::cerr << "ledgerctl: " << inputs->size()
              << (inputs->size() == 1 ? " operation in " : " operations in ") << calls
              << (calls == 1 ? " Apply call" : " Apply calls") << (inputs->empty() ? "" : ": ")
              << tally.Counts() << "\n";
  }
  return tally.worst();
}

// The commands, for "did you mean".
const std::vector<std::string>& Commands() {
  static const auto* commands = new std::vector<std::string>{
      "deposit", "withdraw", "balance", "history", "transfer", "get-transfer", "apply", "health"};
  return *commands;
}

// Refuses, before anything is sent, a command line no server call could make sense of: an
// unknown command, or an AMOUNT that is not a positive integer.
void CheckCommand(const ledger::cli::ProgramSpec& program, const std::vector<std::string>& args) {
  if (args.empty())
    ledger::cli::ExitUsage(program,
                           "missing command (deposit, withdraw, balance, history, transfer, "
                           "get-transfer, apply or health)");
  const std::string& command = args[0];
  if (std::find(Commands().begin(), Commands().end(), command) == Commands().end()) {
    const std::optional<std::string> close = ledger::cli::DidYouMean(command, Commands());
    ledger::cli::ExitUsage(
        program,
        absl::StrCat("unknown command \"", command, "\"",
                     close.has_value() ? absl::StrCat("; did you mean ", *close, "?")
                                       : std::string("; the commands are deposit, withdraw, "
                                                     "balance, history, transfer, get-transfer, "
                                                     "apply and health")));
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

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> command_line(argv, argv + argc);  // For a retry's command.
  const ledger::cli::ProgramSpec program{"ledgerctl", __FILE__, kUsage, {ledger::kTlsFlagsFile}};
  const std::vector<std::string> positional =
      ledger::cli::ParseCommandLineOrExit(argc, argv, program);
  CheckCommand(program, positional);
  // The commands read argv's shape: args[0] the program, args[1] the command.
  std::vector<char*> args = {argv[0]};
  for (const std::string& arg : positional) args.push_back(const_cast<char*>(arg.c_str()));
  if (absl::GetFlag(FLAGS_deadline) <= absl::ZeroDuration()) {
    return UsageError("--deadline must be positive");
  }
  if (absl::GetFlag(FLAGS_retries) < 0 || absl::GetFlag(FLAGS_retries) > kMaxRetries) {
    return UsageError(absl::StrCat("--retries must be 0 to ", kMaxRetries));
  }
  if (absl::GetFlag(FLAGS_batch_size) < 1 ||
      absl::GetFlag(FLAGS_batch_size) > ledger::kMaxApplyBatchSize) {
    return UsageError(absl::StrCat("--batch_size must be 1 to ", ledger::kMaxApplyBatchSize,
                                   "; got ", absl::GetFlag(FLAGS_batch_size)));
  }
  CommandDeadline();  // Starts the command's one deadline, before any call.
  absl::StatusOr<ledger::cli::HostPort> target = ledger::cli::ParseHostPort(
      "--target", absl::GetFlag(FLAGS_target), ledger::cli::AddressUse::kConnect, 50051);
  if (!target.ok()) ledger::cli::ExitUsage(program, target.status().message());
  const std::string command = args[1];
  const std::string& request_id = absl::GetFlag(FLAGS_request_id);
  if (!request_id.empty() && command != "deposit" && command != "withdraw") {
    return UsageError(command == "transfer"
                          ? "--request_id applies to deposit and withdraw only; a transfer takes "
                            "--transfer_id"
                          : "--request_id applies to deposit and withdraw only");
  }
  if (!absl::GetFlag(FLAGS_transfer_id).empty() && command != "transfer") {
    return UsageError(command == "get-transfer"
                          ? "--transfer_id applies to transfer only; get-transfer takes the id "
                            "as its argument: ledgerctl get-transfer ID"
                          : "--transfer_id applies to transfer only");
  }
  const ledger::ClientTlsOptions tls = ledger::ClientTlsOptionsFromFlags();
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ledger::NewChannelCredentials(tls);
  if (!credentials.ok()) return UsageError(std::string(credentials.status().message()));
  auto channel = ledger::NewLedgerChannel(target->ToString(), tls, *credentials);
  if (command == "deposit") {
    return Mutate<ledger::v1::DepositRequest, ledger::v1::DepositResponse>(
        channel, args, command_line,
        [](auto& stub, auto* context, const auto& request, auto* response) {
          return stub.Deposit(context, request, response);
        });
  }
  if (command == "withdraw") {
    return Mutate<ledger::v1::WithdrawRequest, ledger::v1::WithdrawResponse>(
        channel, args, command_line,
        [](auto& stub, auto* context, const auto& request, auto* response) {
          return stub.Withdraw(context, request, response);
        });
  }
  if (command == "balance") return Balance(channel, args);
  if (command == "history") return History(channel, args);
  if (command == "transfer") return Transfer(channel, args, command_line);
  if (command == "get-transfer") return GetTransfer(channel, args);
  if (command == "apply") return Apply(channel, args);
  if (command == "health") return Health(channel, args);
  return UsageError(absl::StrCat("unknown command ", command));  // CheckCommand refused it.
}
