// apply: a file of operations sent in Apply calls (client/apply_batches.h), one JSON line per
// operation.
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "base/status_code_names.h"
#include "client/apply_batches.h"
#include "client/apply_input.h"
#include "client/exit_codes.h"
#include "client/json_line.h"
#include "client/ledgerctl_commands.h"
#include "client/ledgerctl_output.pb.h"
#include "client/request_id.h"
#include "ledger/v1/ledger.grpc.pb.h"

namespace ledger::ctl {
namespace {

// The operations of apply's FILE ("-": stdin), every line checked; a usage error's text if not.
absl::StatusOr<std::vector<ApplyInput>> ReadApplyFile(const std::string& path) {
  const std::string name = path == "-" ? "stdin" : absl::StrCat("\"", path, "\"");
  absl::StatusOr<std::vector<ApplyInput>> inputs;
  if (path == "-") {
    inputs = ReadApplyInput(std::cin);
  } else {
    std::ifstream file(path, std::ios::binary);
    if (!file.is_open()) {
      return absl::InvalidArgumentError(
          absl::StrCat("apply: cannot open ", name, ": ", std::strerror(errno)));
    }
    inputs = ReadApplyInput(file);
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
  void Print(const ApplyInput& input, const ApplyOperationOutcome& outcome) {
    const v1::ApplyResult& result = outcome.result;
    ctl::ApplyLine line;
    line.set_line(input.line);
    const std::string& id = IdOf(input.operation);
    if (!id.empty()) line.set_id(id);
    const char* code = outcome.sent ? StatusCodeName(result.code()) : kNotSent;
    line.set_code(code);
    if (result.code() != 0 || !outcome.sent) {
      line.set_message(result.message());
    } else {
      line.set_balance(result.balance());
      if (input.operation.has_transfer()) line.set_to_balance(result.to_balance());
      if (!input.operation.has_balance()) line.set_replayed(result.replayed());
    }
    std::cout << JsonLine(line);
    ++count_by_code_[outcome.sent ? result.code() : kNotSentKey];
    worst_ = WorseExitCode(worst_, ExitCodeFor(static_cast<grpc::StatusCode>(result.code())));
  }

  ExitCode worst() const { return worst_; }

  // "OK 3, NOT_FOUND 1", in the order of the codes (NOT_SENT last).
  std::string Counts() const {
    std::vector<std::string> parts;
    for (const auto& [code, count] : count_by_code_) {
      parts.push_back(
          absl::StrCat(code == kNotSentKey ? kNotSent : StatusCodeName(code), " ", count));
    }
    return absl::StrJoin(parts, ", ");
  }

 private:
  static constexpr char kNotSent[] = "NOT_SENT";
  static constexpr int32_t kNotSentKey = 1000;  // After every status code.
  std::map<int32_t, int64_t> count_by_code_;
  ExitCode worst_ = kExitOk;
};

}  // namespace

// apply: the operations of FILE in Apply calls of --batch_size, one JSON line per operation.
int RunApply(LedgerctlSession& session, const std::vector<char*>& args) {
  if (args.size() != 3) return UsageError("apply takes FILE (- for stdin)");
  absl::StatusOr<std::vector<ApplyInput>> inputs = ReadApplyFile(args[2]);
  if (!inputs.ok()) return UsageError(std::string(inputs.status().message()));
  AssignMissingIds(*inputs, NewRequestId);
  const absl::Duration deadline = session.options().deadline;
  const ApplyBatchOptions options{
      .batch_size = session.options().batch_size,
      .retries = session.options().retries,
      .max_wait = absl::ToChronoMilliseconds(deadline),
  };
  ApplyTally tally;
  const ApplyBatchHooks hooks{
      .call =
          [&](const v1::ApplyRequest& request) {
            // Each call its own --deadline: a file takes many.
            const absl::Time call_deadline = absl::Now() + deadline;
            ApplyCallOutcome outcome;
            outcome.status = session.Connect(call_deadline);
            if (!outcome.status.ok()) {
              outcome.sent = false;
              return outcome;
            }
            // To the leader this session found last, and on to the one a refusal names.
            LedgerctlSession::Answer answer = session.FollowLeader(
                [&](v1::Ledger::Stub& stub, grpc::ClientContext* context) {
                  outcome.response.Clear();  // Each address's answer alone.
                  return stub.Apply(context, request, &outcome.response);
                },
                call_deadline);
            outcome.status = std::move(answer.status);
            outcome.pushback = answer.pushback;
            return outcome;
          },
      .wait = [](std::chrono::milliseconds wait) { std::this_thread::sleep_for(wait); },
      .note =
          [&session](const ApplyRetryNote& note) {
            std::cout.flush();  // The results so far come before what happens next.
            session.RetryNote(note.shed, note.text, note.wait.has_value() ? note.wait->count() : -1,
                              note.attempt, note.attempts);
          },
      .outcome =
          [&](size_t index, const ApplyOperationOutcome& outcome) {
            tally.Print((*inputs)[index], outcome);
          },
  };
  const int64_t calls = ApplyInBatches(*inputs, options, hooks);
  std::cout.flush();
  if (!session.options().json) {
    std::cerr << "ledgerctl: " << inputs->size()
              << (inputs->size() == 1 ? " operation in " : " operations in ") << calls
              << (calls == 1 ? " Apply call" : " Apply calls") << (inputs->empty() ? "" : ": ")
              << tally.Counts() << "\n";
  }
  return tally.worst();
}

}  // namespace ledger::ctl
