#include "client/loadtest_progress.h"

#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_code_names.h"

namespace ledger {

absl::Duration GoneAfter(const LoadtestOptions& options) {
  return std::max(kGoneAfter, 2 * options.deadline);
}

bool ShowProgress(const LoadtestOptions& options) {
  return options.progress || isatty(STDERR_FILENO);
}

std::string Describe(const grpc::Status& status) {
  return absl::StrCat(StatusCodeName(status.error_code()), ": ", status.error_message());
}

ProgressTicker::ProgressTicker(bool show, std::function<std::string(double seconds)> line) {
  using Clock = std::chrono::steady_clock;
  if (!show) return;
  thread_ = std::thread([this, line = std::move(line)] {
    const auto start = Clock::now();
    for (int second = 1;; ++second) {
      const absl::Duration to_next_line =
          absl::FromChrono(start + std::chrono::seconds(second) - Clock::now());
      if (done_.WaitForNotificationWithTimeout(to_next_line)) return;
      std::cerr << line(std::chrono::duration<double>(Clock::now() - start).count()) << "\n";
    }
  });
}

ProgressTicker::~ProgressTicker() {
  if (!thread_.joinable()) return;
  done_.Notify();
  thread_.join();
}

void ServerWatch::Answered() {
  absl::MutexLock lock(&mu_);
  last_answer_ = Clock::now();
}

void ServerWatch::NotAnswered(const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  last_error_ = Describe(status);
}

bool ServerWatch::Gone(absl::Duration gone_after) const {
  absl::MutexLock lock(&mu_);
  return Clock::now() - last_answer_ >= absl::ToChronoNanoseconds(gone_after);
}

std::string ServerWatch::Silence() const {
  absl::MutexLock lock(&mu_);
  const auto silent = Clock::now() - last_answer_;
  if (silent < std::chrono::seconds(1)) return "";
  return absl::StrCat("; no answer from ledgerd for ",
                      absl::FormatDuration(absl::Trunc(absl::FromChrono(silent), absl::Seconds(1))),
                      last_error_.empty() ? "" : absl::StrCat(" (last error: ", last_error_, ")"));
}

}  // namespace ledger
