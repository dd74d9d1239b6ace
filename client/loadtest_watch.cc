#include "client/loadtest_watch.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/call_outcome.h"
#include "client/loadtest_progress.h"
#include "ledger/v1/ledger.grpc.pb.h"

namespace ledger {
namespace {

// Between the streams opened again: from the first to the longest.
constexpr std::chrono::milliseconds kFirstBackoff{50};
constexpr std::chrono::milliseconds kLongestBackoff{1000};

}  // namespace

WatchRebuild::WatchRebuild(LoadtestDriver& driver, absl::Duration timeout) : driver_(driver) {
  const std::vector<std::string>& names = driver_.names();
  index_.reserve(names.size());
  for (size_t i = 0; i < names.size(); ++i) index_.emplace(names[i], i);
  {
    ::ledger::MutexLock lock(&mu_);
    balances_.assign(names.size(), 0);
    sequences_.assign(names.size(), 0);
  }
  thread_ = std::thread([this] { Follow(); });
  ::ledger::MutexLock lock(&mu_);
  changed_.WaitFor(mu_, timeout, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return started_ || !failure_.empty();
  });
}

WatchRebuild::~WatchRebuild() {
  stopping_.store(true);
  {
    ::ledger::MutexLock lock(&mu_);
    if (context_ != nullptr) context_->TryCancel();
  }
  thread_.join();
}

bool WatchRebuild::Apply(const v1::WatchResponse& message) {
  for (const v1::WatchEvent& event : message.events()) {
    const auto found = index_.find(event.account_id());
    if (found == index_.end()) continue;  // Another client's account.
    const size_t account = found->second;
    const uint64_t sequence = event.entry().sequence();
    // The run's accounts are new: each one's operations come 1, 2, 3, ... A resumed stream that
    // repeated or skipped one shows here.
    if (sequence != sequences_[account] + 1) {
      failure_ = absl::StrCat("account ", event.account_id(), ": operation ", sequence,
                              " arrived after operation ", sequences_[account], " (position ",
                              event.position(), ")");
      out_of_sequence_ = true;
      return false;
    }
    sequences_[account] = sequence;
    balances_[account] = event.entry().balance_after();
    ++events_;
  }
  position_ = message.position();
  return true;
}

void WatchRebuild::Follow() {
  auto backoff = kFirstBackoff;
  while (!stopping_.load()) {
    bool went_wrong = false;
    const LoadtestDriver::Attempt stream = [&](v1::Ledger::Stub& stub,
                                               grpc::ClientContext* context) {
      v1::WatchRequest request;
      {
        ::ledger::MutexLock lock(&mu_);
        if (started_) {
          request.set_from_position(position_);
        } else {
          request.set_start_at_end(true);
        }
        context_ = context;
        if (stopping_.load()) context->TryCancel();
      }
      std::unique_ptr<grpc::ClientReader<v1::WatchResponse>> reader = stub.Watch(context, request);
      v1::WatchResponse message;
      while (reader->Read(&message)) {
        ::ledger::MutexLock lock(&mu_);
        started_ = true;
        if (!Apply(message)) {
          went_wrong = true;
          context->TryCancel();
        }
        changed_.NotifyAll();
        backoff = kFirstBackoff;  // It was heard from.
      }
      grpc::Status status = reader->Finish();
      ::ledger::MutexLock lock(&mu_);
      context_ = nullptr;
      return status;
    };
    const grpc::Status status = driver_.CallLeader(
        stream, std::chrono::system_clock::time_point::max(), /*wait_for_ready=*/false);
    if (stopping_.load() || went_wrong) break;
    // The server went (a restart, a new leader, a connection lost): open it again from the last
    // position. Anything else (the log no longer keeps that position, a refusal) ends it.
    const CallOutcome outcome = ReadCallOutcome(status);
    const bool again = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                       status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                       !ServerAnswered(outcome) ||
                       status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
    if (!again) {
      ::ledger::MutexLock lock(&mu_);
      failure_ = absl::StrCat("the stream ended: ", Describe(status));
      changed_.NotifyAll();
      break;
    }
    {
      ::ledger::MutexLock lock(&mu_);
      ++reconnects_;
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, kLongestBackoff);
  }
  ::ledger::MutexLock lock(&mu_);
  changed_.NotifyAll();
}

WatchCheck WatchRebuild::Check(const std::vector<size_t>& touched,
                               const std::vector<std::optional<int64_t>>& read) {
  WatchCheck check;
  std::vector<size_t> differ;
  {
    ::ledger::MutexLock lock(&mu_);
    const auto same = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      differ.clear();
      for (size_t account : touched) {
        if (balances_[account] != read[account].value_or(0)) differ.push_back(account);
      }
      return differ.empty();
    };
    changed_.WaitFor(mu_, kCatchUpLimit, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return same() || !failure_.empty();
    });
    check.events = events_;
    check.reconnects = reconnects_;
    check.last_position = position_;
    if (!started_) {
      check.verdict = "INCOMPLETE";
      check.note = failure_.empty() ? "the stream never started" : failure_;
    } else if (out_of_sequence_) {
      check.verdict = "FAIL";
      check.note = failure_;
    } else if (differ.empty()) {
      check.verdict = "PASS";
    } else if (!failure_.empty()) {
      check.verdict = "INCOMPLETE";
      check.note = failure_;
    } else {
      check.verdict = "FAIL";
      std::string accounts;
      for (size_t i = 0; i < std::min<size_t>(differ.size(), 3); ++i) {
        absl::StrAppend(&accounts, i == 0 ? "" : "; ", driver_.names()[differ[i]], " rebuilt ",
                        balances_[differ[i]], ", read ", read[differ[i]].value_or(0));
      }
      check.note = absl::StrCat(differ.size(), " of ", touched.size(), " accounts differ after ",
                                absl::FormatDuration(kCatchUpLimit), ": ", accounts);
    }
  }
  stopping_.store(true);
  ::ledger::MutexLock lock(&mu_);
  if (context_ != nullptr) context_->TryCancel();
  return check;
}

}  // namespace ledger
