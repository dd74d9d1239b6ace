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
#include "base/check.h"
#include "base/status_code_names.h"
#include "client/call_outcome.h"
#include "client/channel_credentials.h"
#include "client/exit_codes.h"
#include "client/json_line.h"
#include "client/ledgerctl_output.pb.h"
#include "client/pushback.h"
#include "proto/error_details.h"

namespace ledger::ctl {
namespace {

// "the leader, " or "the leader, node 3 at ", before its address.
std::string LeaderName(const CallOutcome& refusal) {
  const absl::string_view id = MetadataValue(refusal.metadata, "leader_id");
  return id.empty() ? "the leader, " : absl::StrCat("the leader, node ", id, " at ");
}

// "node 2 at HOST:PORT does not lead", and why it names no leader's address when it does not.
std::string RefusedBy(const CallOutcome& refusal, const std::string& address) {
  const absl::string_view node = MetadataValue(refusal.metadata, "node_id");
  const absl::string_view leader_id = MetadataValue(refusal.metadata, "leader_id");
  std::string who = absl::StrCat(node.empty() ? "the server" : absl::StrCat("node ", node), " at ",
                                 address, " does not lead");
  if (!MetadataValue(refusal.metadata, "leader_address").empty()) return who;
  return absl::StrCat(who,
                      leader_id.empty()
                          ? " and knows no leader"
                          : absl::StrCat(" and has no address for the leader, node ", leader_id));
}

// Why the hop numbered `hop`, after `wait`, is not made before `deadline`; "" when it is.
std::string WhyNoHop(int hop, std::chrono::milliseconds wait, absl::Time deadline) {
  if (hop > kMaxLeaderHops) {
    return absl::StrCat("not following further: ", kMaxLeaderHops, " hops");
  }
  const absl::Duration left = deadline - absl::Now();
  if (absl::FromChrono(wait) >= left) {
    return absl::StrCat("not following further: --deadline leaves ",
                        absl::FormatDuration(absl::Trunc(left, absl::Milliseconds(1))));
  }
  return "";
}

}  // namespace

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

LedgerctlSession::LedgerctlSession(LedgerctlOptions options, std::vector<std::string> targets,
                                   std::shared_ptr<grpc::ChannelCredentials> credentials,
                                   std::vector<std::string> command_line)
    : options_(std::move(options)),
      targets_(std::move(targets)),
      credentials_(std::move(credentials)),
      command_line_(std::move(command_line)),
      deadline_(absl::Now() + options_.deadline) {
  LEDGER_CHECK(!targets_.empty());
  address_ = targets_.front();
}

LedgerctlSession::Route& LedgerctlSession::RouteTo(const std::string& address) {
  Route& route = routes_[address];
  if (route.channel == nullptr) {
    route.channel = NewLedgerChannel(address, options_.tls, credentials_);
    route.stub = v1::Ledger::NewStub(route.channel);
  }
  return route;
}

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
    if (ReadCallOutcome(status).reason == v1::NOT_LEADER) {
      std::cerr << "ledgerctl: no leader took the call (NOT_LEADER), so nothing was applied; "
                   "run it again later, or name every member with --target=HOST:PORT,...\n";
    }
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

grpc::Status LedgerctlSession::CallHonouringPushback(const Attempt& attempt) {
  const int32_t retries = options_.retries;
  const int attempts = retries + 1;
  for (int number = 1;; ++number) {
    Answer answer = FollowLeader(attempt, deadline_);
    grpc::Status& status = answer.status;
    const CallOutcome outcome = ReadCallOutcome(status);
    if (!outcome.overloaded) return status;
    // RetryInfo; gRPC's pushback trailer says the same to clients that read only that.
    const std::optional<std::chrono::milliseconds> pushback =
        outcome.retry_delay.has_value() ? outcome.retry_delay : answer.pushback;
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

std::optional<int> LedgerctlSession::RefuseUnconnected(const std::string& operation) {
  const grpc::Status connected = Connect(deadline_);
  if (connected.ok()) return std::nullopt;
  const int exit_code = Failed(connected);
  if (!options_.json) {
    std::cerr << "ledgerctl: the " << operation << " was not sent, so nothing was applied\n";
  }
  return exit_code;
}

grpc::Status LedgerctlSession::Connect(absl::Time deadline) {
  grpc::Status connected = ConnectBefore(*channel(), address_, absl::ToChronoTime(deadline));
  // Then each other --target address once, in order from the one after the last used.
  std::vector<size_t> others;
  for (size_t i = 1; i <= targets_.size(); ++i) {
    const size_t index = (target_index_ + i) % targets_.size();
    if (targets_[index] != address_) others.push_back(index);
  }
  for (const size_t index : others) {
    if (connected.ok() || absl::Now() >= deadline) break;
    RetryNote(
        /*shed=*/false,
        absl::StrCat(connected.error_message(), "; trying the next --target, ", targets_[index]),
        -1, 0, 0);
    target_index_ = index;
    address_ = targets_[index];
    connected = ConnectBefore(*channel(), address_, absl::ToChronoTime(deadline));
  }
  return connected;
}

LedgerctlSession::Answer LedgerctlSession::Send(const Attempt& attempt, absl::Time deadline) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  Answer answer;
  answer.status = attempt(*RouteTo(address_).stub, &context);
  answer.pushback = RetryPushback(context.GetServerTrailingMetadata());
  return answer;
}

const std::string& LedgerctlSession::NextTarget() {
  target_index_ = (target_index_ + 1) % targets_.size();
  address_ = targets_[target_index_];
  return address_;
}

void LedgerctlSession::HopNote(const std::string& text, int64_t wait_ms, int hop,
                               const std::string& next) const {
  if (!options_.json) {
    std::cerr << "ledgerctl: " << text << "\n";
    return;
  }
  ctl::RetryNote note;
  note.set_shed(false);
  note.set_note(text);
  if (hop > 0) {
    note.set_retry_in_ms(wait_ms);
    note.set_hop(hop);
    note.set_hops(kMaxLeaderHops);
    note.set_next_address(next);
  }
  std::cerr << JsonLine(note);
}

LedgerctlSession::Answer LedgerctlSession::FollowLeader(const Attempt& attempt,
                                                        absl::Time deadline) {
  Answer answer = Send(attempt, deadline);
  CallOutcome refusal = ReadCallOutcome(answer.status);
  std::string refused_at = address_;
  bool unconnected = false;  // The last hop could not connect: pass on to the next --target.
  for (int hop = 1; refusal.reason == v1::NOT_LEADER; ++hop) {
    const std::string leader =
        unconnected ? "" : std::string(MetadataValue(refusal.metadata, "leader_address"));
    const std::chrono::milliseconds wait =
        unconnected ? std::chrono::milliseconds(0)
                    : refusal.retry_delay.value_or(std::chrono::milliseconds(0));
    const std::string who =
        unconnected ? absl::StrCat("no connection to ", address_) : RefusedBy(refusal, refused_at);
    const std::string why_not = WhyNoHop(hop, wait, deadline);
    if (!why_not.empty()) {
      HopNote(absl::StrCat(who, "; ", why_not), -1, 0, "");
      return answer;
    }
    const std::string& next = leader.empty() ? NextTarget() : (address_ = leader);
    HopNote(absl::StrCat(who, "; sending the same call to ",
                         leader.empty() ? "the next --target, " : LeaderName(refusal), next,
                         wait.count() > 0 ? absl::StrCat(" in ", wait.count(), " ms") : "",
                         " (hop ", hop, " of ", kMaxLeaderHops, ")"),
            wait.count(), hop, next);
    if (wait.count() > 0) std::this_thread::sleep_for(wait);
    // Connected first, so that a hop that cannot connect is known to have sent nothing.
    unconnected = !ConnectBefore(*channel(), address_, absl::ToChronoTime(deadline)).ok();
    if (unconnected) continue;
    Answer next_answer = Send(attempt, deadline);
    refusal = ReadCallOutcome(next_answer.status);
    refused_at = address_;
    answer = std::move(next_answer);  // The call's own answer, or the newest refusal.
  }
  return answer;
}

}  // namespace ledger::ctl
