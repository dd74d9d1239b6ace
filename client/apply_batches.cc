#include "client/apply_batches.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/status_code_names.h"
#include "client/call_outcome.h"

namespace ledger {
namespace {

const char* CodeName(grpc::StatusCode code) { return StatusCodeName(static_cast<int>(code)); }

// The call's error message, or what its code means when the server sent none (a server without
// Apply answers UNIMPLEMENTED with an empty message).
std::string CallMessage(const grpc::Status& status) {
  if (!status.error_message().empty()) return status.error_message();
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    return "the server does not implement ledger.v1.Ledger/Apply (older than this ledgerctl?)";
  }
  return "no message from the server";
}

// "line 7", or "lines 3-9" for the lines of inputs[indices] (in input order).
std::string LinesOf(const std::vector<ApplyInput>& inputs, const std::vector<size_t>& indices) {
  const int32_t first = inputs[indices.front()].line;
  const int32_t last = inputs[indices.back()].line;
  return first == last ? absl::StrCat("line ", first) : absl::StrCat("lines ", first, "-", last);
}

std::string Operations(size_t count) {
  return absl::StrCat(count, count == 1 ? " operation" : " operations");
}

// Why a retry after `attempt` of `attempts`, waiting `wait`, is not made; "" when it is.
std::string WhyNoRetry(int attempt, int attempts, std::chrono::milliseconds wait,
                       const ApplyBatchOptions& options, const char* ended) {
  if (attempts == 1) return "--retries=0";
  if (attempt >= attempts) return absl::StrCat("all ", attempts, " attempts ", ended);
  if (wait > options.max_wait) {
    return absl::StrCat("the server asked to wait ", wait.count(), " ms, longer than --deadline (",
                        options.max_wait.count(), " ms)");
  }
  return "";
}

// The wait the server asked for: RetryInfo, else gRPC's pushback trailer.
std::optional<std::chrono::milliseconds> AskedWait(const CallOutcome& outcome,
                                                   const ApplyCallOutcome& got) {
  return outcome.retry_delay.has_value() ? outcome.retry_delay : got.pushback;
}

// The message an operation gets when the call that carried it failed as a whole.
std::string CallFailureMessage(const ApplyCallOutcome& got) {
  std::string message =
      absl::StrCat("the Apply call that carried it failed: ", CallMessage(got.status));
  if (got.sent && ReadCallOutcome(got.status).effect == CallEffect::kUnknown) {
    absl::StrAppend(&message,
                    "; outcome unknown: it may have been applied; sent again with the same id, it "
                    "is applied at most once");
  }
  return message;
}

class BatchRun {
 public:
  BatchRun(const std::vector<ApplyInput>& inputs, size_t begin, size_t end,
           const ApplyBatchOptions& options, const ApplyBatchHooks& hooks)
      : inputs_(inputs), begin_(begin), options_(options), hooks_(hooks), outcomes_(end - begin) {
    pending_.reserve(end - begin);
    for (size_t i = begin; i < end; ++i) pending_.push_back(i);
  }

  // Runs the batch to its final outcomes; false when sending must stop (a call failed whole).
  bool Run() {
    const int attempts = options_.retries + 1;
    for (int attempt = 1;; ++attempt) {
      v1::ApplyRequest request;
      request.mutable_operations()->Reserve(static_cast<int>(pending_.size()));
      for (size_t index : pending_) *request.add_operations() = inputs_[index].operation;
      const ApplyCallOutcome got = hooks_.call(request);
      ++calls_;
      std::optional<bool> done =
          got.status.ok() ? Answered(got, attempt, attempts) : Failed(got, attempt, attempts);
      if (done.has_value()) return *done;
    }
  }

  const std::vector<ApplyOperationOutcome>& outcomes() const { return outcomes_; }
  int64_t calls() const { return calls_; }
  // The code of the call that failed whole, after Run returned false.
  grpc::StatusCode failure_code() const { return failure_code_; }

 private:
  // A call that failed whole: retried (nullopt) or the end of sending (false).
  std::optional<bool> Failed(const ApplyCallOutcome& got, int attempt, int attempts) {
    const grpc::StatusCode code = got.status.error_code();
    const CallOutcome outcome = ReadCallOutcome(got.status);
    const bool shed = outcome.overloaded;
    const std::optional<std::chrono::milliseconds> asked = AskedWait(outcome, got);
    // Every operation carries its id, so a call whose outcome is unknown is sent again safely.
    const bool retriable = !got.sent || outcome.advice == CallAdvice::kRetrySameId ||
                           (outcome.advice == CallAdvice::kRetryAfterDelay && !shed) ||
                           (shed && asked.has_value());
    const std::chrono::milliseconds wait = asked.value_or(Backoff(attempt));
    const std::string what = absl::StrCat("the Apply call for ", LinesOf(inputs_, pending_), " (",
                                          Operations(pending_.size()), ") failed: ", CodeName(code),
                                          ": ", CallMessage(got.status), "; ");
    std::string why_not =
        retriable ? WhyNoRetry(attempt, attempts, wait, options_, shed ? "were shed" : "failed")
                  : (shed ? "the server sent no pushback" : "a retry cannot help");
    if (why_not.empty()) {
      Retry(shed, absl::StrCat(what, "retrying"), wait, attempt, attempts);
      return std::nullopt;
    }
    hooks_.note({.shed = shed, .text = absl::StrCat(what, "not retrying: ", why_not)});
    failure_code_ = code;
    for (size_t index : pending_) {
      v1::ApplyResult& result = outcomes_[index - begin_].result;
      result.Clear();
      result.set_code(static_cast<int32_t>(code));
      result.set_message(CallFailureMessage(got));
    }
    return false;
  }

  // A call that was answered: done (true), or its shed operations retried (nullopt).
  std::optional<bool> Answered(const ApplyCallOutcome& got, int attempt, int attempts) {
    if (got.response.results_size() != static_cast<int>(pending_.size())) {
      // Not the contract: no result can be matched to its operation.
      ApplyCallOutcome wrong{
          .status = grpc::Status(grpc::StatusCode::INTERNAL,
                                 absl::StrCat("the server answered ", got.response.results_size(),
                                              " results for ", pending_.size(), " operations"))};
      return Failed(wrong, attempts, attempts);
    }
    std::vector<size_t> shed;
    for (size_t k = 0; k < pending_.size(); ++k) {
      const v1::ApplyResult& result = got.response.results(static_cast<int>(k));
      outcomes_[pending_[k] - begin_].result = result;
      if (ReadApplyResult(result).overloaded) shed.push_back(pending_[k]);
    }
    if (shed.empty()) return true;
    const std::string what =
        absl::StrCat(Operations(shed.size()), " of ", LinesOf(inputs_, shed),
                     " shed by the server (RESOURCE_EXHAUSTED: nothing of them was applied); ");
    const std::string why_not =
        got.pushback.has_value()
            ? WhyNoRetry(attempt, attempts, *got.pushback, options_, "were shed")
            : "the server sent no pushback";
    if (!why_not.empty()) {
      hooks_.note({.shed = true, .text = absl::StrCat(what, "not retrying: ", why_not)});
      return true;
    }
    pending_ = std::move(shed);
    Retry(true, absl::StrCat(what, "retrying them"), *got.pushback, attempt, attempts);
    return std::nullopt;
  }

  void Retry(bool shed, const std::string& what, std::chrono::milliseconds wait, int attempt,
             int attempts) {
    hooks_.note({.shed = shed,
                 .text = absl::StrCat(what, " in ", wait.count(), " ms (attempt ", attempt + 1,
                                      " of ", attempts, ")"),
                 .wait = wait,
                 .attempt = attempt + 1,
                 .attempts = attempts});
    hooks_.wait(wait);
  }

  // The wait before retrying after `attempt` without a pushback: doubling, at most max_wait.
  std::chrono::milliseconds Backoff(int attempt) const {
    std::chrono::milliseconds wait = options_.first_backoff;
    for (int i = 1; i < attempt && wait < options_.max_wait; ++i) wait *= 2;
    return std::min(wait, options_.max_wait);
  }

  const std::vector<ApplyInput>& inputs_;
  const size_t begin_;
  const ApplyBatchOptions& options_;
  const ApplyBatchHooks& hooks_;
  std::vector<size_t> pending_;  // Indices into inputs_ of the next call's operations.
  std::vector<ApplyOperationOutcome> outcomes_;  // Of inputs_[begin_...], in input order.
  int64_t calls_ = 0;
  grpc::StatusCode failure_code_ = grpc::StatusCode::OK;
};

}  // namespace

int64_t ApplyInBatches(const std::vector<ApplyInput>& inputs, const ApplyBatchOptions& options,
                       const ApplyBatchHooks& hooks) {
  LEDGER_CHECK(options.batch_size >= 1 && options.batch_size <= kMaxApplyBatchSize);
  LEDGER_CHECK(options.retries >= 0);
  const size_t batch_size = static_cast<size_t>(options.batch_size);
  int64_t calls = 0;
  for (size_t begin = 0; begin < inputs.size(); begin += batch_size) {
    const size_t end = std::min(begin + batch_size, inputs.size());
    BatchRun batch(inputs, begin, end, options, hooks);
    const bool go_on = batch.Run();
    calls += batch.calls();
    for (size_t i = begin; i < end; ++i) hooks.outcome(i, batch.outcomes()[i - begin]);
    if (go_on) continue;
    // The failed call's code, so that what was never sent has that failure's class.
    ApplyOperationOutcome not_sent{.sent = false};
    not_sent.result.set_code(static_cast<int32_t>(batch.failure_code()));
    not_sent.result.set_message(absl::StrCat("not sent: the Apply call for ",
                                             LinesOf(inputs, {begin, end - 1}), " failed (",
                                             CodeName(batch.failure_code()),
                                             ") and ledgerctl stopped there; nothing of it was "
                                             "applied"));
    for (size_t i = end; i < inputs.size(); ++i) hooks.outcome(i, not_sent);
    break;
  }
  return calls;
}

}  // namespace ledger
