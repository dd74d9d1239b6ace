#include "client/apply_input.h"

#include <limits>
#include <streambuf>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"

namespace ledger {
namespace {

enum class LineRead { kLine, kTooLong, kEnd };

// Reads one line (without its "\n") into `line`, at most `max_bytes` of it: a longer line is
// consumed to its end and reported kTooLong, so that a hostile input cannot grow memory.
LineRead ReadBoundedLine(std::streambuf& in, std::string& line, size_t max_bytes) {
  line.clear();
  bool too_long = false;
  for (int c = in.sbumpc(); c != std::char_traits<char>::eof(); c = in.sbumpc()) {
    if (c == '\n') return too_long ? LineRead::kTooLong : LineRead::kLine;
    if (line.size() < max_bytes) {
      line.push_back(static_cast<char>(c));
    } else {
      too_long = true;
    }
  }
  if (too_long) return LineRead::kTooLong;
  return line.empty() ? LineRead::kEnd : LineRead::kLine;  // A last line without "\n" counts.
}

// What is wrong with `text` as an operation, or "" when it is one (then in `operation`).
std::string ParseOperation(absl::string_view text, v1::ApplyOperation& operation) {
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(text.data(), text.size()), &operation,
      google::protobuf::util::JsonParseOptions());
  if (!parsed.ok()) {
    // Protobuf's message may add the input and a caret on further lines: keep the first. A message
    // about the whole object starts with its empty field path and ": ".
    absl::string_view message(parsed.message().data(), parsed.message().size());
    message = absl::StripPrefix(message.substr(0, message.find('\n')), ": ");
    return absl::StrCat("not a ledger.v1.ApplyOperation in JSON: ", message);
  }
  if (operation.operation_case() == v1::ApplyOperation::OPERATION_NOT_SET) {
    return "sets no operation: it needs one of deposit, withdraw, balance or transfer, e.g. "
           "{\"deposit\":{\"account_id\":\"alice\",\"amount\":\"100\"}}";
  }
  return "";
}

}  // namespace

absl::StatusOr<std::vector<ApplyInput>> ReadApplyInput(std::istream& in) {
  std::vector<ApplyInput> inputs;
  std::vector<std::string> problems;
  int bad_lines = 0;
  std::string text;
  std::streambuf& buffer = *in.rdbuf();
  for (int64_t line = 1;; ++line) {
    const LineRead read = ReadBoundedLine(buffer, text, kMaxApplyInputLineBytes);
    if (read == LineRead::kEnd) break;
    if (line > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError("more than 2147483647 lines; split the input");
    }
    std::string problem;
    ApplyInput input{.line = static_cast<int32_t>(line)};
    if (read == LineRead::kTooLong) {
      problem =
          absl::StrCat("longer than ", kMaxApplyInputLineBytes, " bytes, so not one operation");
    } else if (absl::StripAsciiWhitespace(text).empty()) {
      continue;
    } else {
      problem = ParseOperation(text, input.operation);
    }
    if (!problem.empty()) {
      if (++bad_lines <= kMaxReportedBadLines)
        problems.push_back(absl::StrCat("line ", line, ": ", problem));
      continue;
    }
    if (inputs.size() == kMaxApplyInputOperations) {
      return absl::InvalidArgumentError(absl::StrCat("more than ", kMaxApplyInputOperations,
                                                     " operations (line ", line,
                                                     "); split the input into smaller files"));
    }
    inputs.push_back(std::move(input));
  }
  if (bad_lines == 0) return inputs;
  if (bad_lines > kMaxReportedBadLines) {
    problems.push_back(absl::StrCat("and ", bad_lines - kMaxReportedBadLines, " more bad lines"));
  }
  return absl::InvalidArgumentError(absl::StrJoin(problems, "\n"));
}

size_t AssignMissingIds(std::vector<ApplyInput>& inputs,
                        const std::function<std::string()>& new_id) {
  size_t assigned = 0;
  for (ApplyInput& input : inputs) {
    v1::ApplyOperation& operation = input.operation;
    std::string* id = nullptr;
    switch (operation.operation_case()) {
      case v1::ApplyOperation::kDeposit:
        id = operation.mutable_deposit()->mutable_request_id();
        break;
      case v1::ApplyOperation::kWithdraw:
        id = operation.mutable_withdraw()->mutable_request_id();
        break;
      case v1::ApplyOperation::kTransfer:
        id = operation.mutable_transfer()->mutable_transfer_id();
        break;
      default:  // A balance read changes nothing: nothing to deduplicate.
        break;
    }
    if (id == nullptr || !id->empty()) continue;
    *id = new_id();
    ++assigned;
  }
  return assigned;
}

const std::string& IdOf(const v1::ApplyOperation& operation) {
  switch (operation.operation_case()) {
    case v1::ApplyOperation::kDeposit:
      return operation.deposit().request_id();
    case v1::ApplyOperation::kWithdraw:
      return operation.withdraw().request_id();
    case v1::ApplyOperation::kTransfer:
      return operation.transfer().transfer_id();
    default:
      return v1::DepositRequest::default_instance().request_id();  // "".
  }
}

}  // namespace ledger
