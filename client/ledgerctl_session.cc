#include "client/ledgerctl_session.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "base/status_code_names.h"
#include "client/call_outcome.h"
#include "client/exit_codes.h"
#include "client/json_line.h"
#include "client/ledgerctl_output.pb.h"
#include "client/pushback.h"

namespace ledger::ctl {

int UsageError(const std::string& problem) {
  std::cerr << "ledgerctl: " << problem
            << "\nusage: ledgerctl [flags] deposit|withdraw ACCOUNT AMOUNT | balance ACCOUNT | "
               "history ACCOUNT | transfer FROM TO AMOUNT | get-transfer ID | apply FILE|- | "
               "health\n"
               "`ledgerctl --help` explains the flags and the exit codes\n";
  return kExitUsage;
}

std::string ShellQuoted(const std::string& word) {
  const bool safe = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
           absl::string_view("_-./:=@%+,").find(c) != absl::string_view::npos;
  });
  if (safe) return word;
  return absl::StrCat("'", absl::StrReplaceAll(word, {{"'", "'\\''"}}), "'");
}

LedgerctlSession::LedgerctlSession(LedgerctlOptions options, std::shared_ptr<grpc::Channel> channel,
                                   std::vector<std::string> command_line)
    : options_(std::move(options)),
      channel_(std::move(channel)),
      stub_(v1::Ledger::NewStub(channel_)),
      command_line_(std::move(command_line)),
      deadline_(absl::Now() + options_.deadline) {}

std::unique_ptr<grpc::ClientContext> LedgerctlSession::NewContext() const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(deadline_));
  return context;
}

int LedgerctlSession::Failed(const grpc::Status& status) const {
  const char* code = StatusCodeName(static_cast<int>(status.error_code()));
  if (options_.json) {
    ctl::Error error;
    error.set_code(code);
    error.set_message(status.error_message());
    std::cerr << JsonLine(error);
  } else {
    std::cerr << "ledgerctl: " << code << ": " << status.error_message() << "\n";
  }
  return ExitCodeFor(status.error_code());
}

int LedgerctlSession::PrintBalance(const std::string& account, int64_t balance) const {
  if (options_.json) {
    ctl::BalanceLine line;
    line.set_account_id(account);
    line.set_balance(balance);
    std::cout << JsonLine(line);
  } else {
    std::cout << account << ": " << balance << "\n";
  }
  return kExitOk;
}

void LedgerctlSession::RetryNote(bool shed, const std::string& text, int64_t retry_in_ms,
                                 int attempt, int attempts) const {
  if (!options_.json) {
    std::cerr << "ledgerctl: " << text << "\n";
    return;
  }
  ctl::RetryNote note;
  note.set_shed(shed);
  note.set_note(text);
  if (retry_in_ms >= 0) {
    note.set_retry_in_ms(retry_in_ms);
    note.set_attempt(attempt);
    note.set_attempts(attempts);
  }
  std::cerr << JsonLine(note);
}

void LedgerctlSession::ShedNote(const std::string& text, int64_t retry_in_ms, int attempt,
                                int attempts) const {
  RetryNote(/*shed=*/true, options_.json ? text : absl::StrCat("shed by the server; ", text),
            retry_in_ms, attempt, attempts);
}

grpc::Status LedgerctlSession::CallHonouringPushback(
    const std::function<grpc::Status(grpc::ClientContext*)>& attempt) const {
  const int32_t retries = options_.retries;
  const int attempts = retries + 1;
  for (int number = 1;; ++number) {
    std::unique_ptr<grpc::ClientContext> context = NewContext();
    grpc::Status status = attempt(context.get());
    const CallOutcome outcome = ReadCallOutcome(status);
    if (!outcome.overloaded) return status;
    // RetryInfo; gRPC's pushback trailer says the same to clients that read only that.
    const std::optional<std::chrono::milliseconds> pushback =
        outcome.retry_delay.has_value() ? outcome.retry_delay
                                        : RetryPushback(context->GetServerTrailingMetadata());
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
    const absl::Duration left = deadline_ - absl::Now();
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

std::string LedgerctlSession::RetryCommand(absl::string_view id_flag, const std::string& id) const {
  std::vector<std::string> words = {"ledgerctl"};
  for (size_t i = 1; i < command_line_.size(); ++i) {
    const std::string& word = command_line_[i];
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

std::string LedgerctlSession::GetTransferCommand(const std::string& transfer_id) const {
  std::vector<std::string> words = {"ledgerctl"};
  if (options_.target != kDefaultTarget) {
    words.push_back(ShellQuoted("--target=" + options_.target));
  }
  const ClientTlsOptions& tls = options_.tls;
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

std::optional<int> LedgerctlSession::RefuseUnconnected(const std::string& operation) const {
  const grpc::Status connected =
      ConnectBefore(*channel_, options_.target, absl::ToChronoTime(deadline_));
  if (connected.ok()) return std::nullopt;
  const int exit_code = Failed(connected);
  if (!options_.json) {
    std::cerr << "ledgerctl: the " << operation << " was not sent, so nothing was applied\n";
  }
  return exit_code;
}

}  // namespace ledger::ctl
