#include "sim/sim_log.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace ledger::sim {

void SimLog::Commit(std::string payload) {
  bytes_ += static_cast<int64_t>(payload.size());
  entries_.push_back(std::move(payload));
}

absl::StatusOr<uint64_t> SimLog::Append(absl::string_view payload) {
  const AppendFault fault = planned_;
  planned_ = AppendFault::kNone;
  if (!poison_.ok()) return poison_;
  const uint64_t position = last_position() + 1;
  if (fault == AppendFault::kNone) {
    Commit(std::string(payload));
    return position;
  }
  const bool lost = fault == AppendFault::kLeadershipLost;
  failed_.push_back(FailedEntry{.payload = std::string(payload),
                                .written = fault == AppendFault::kSyncFails || lost,
                                .leadership_lost = lost});
  poison_ = absl::UnavailableError(
      lost ? absl::StrCat("simulated loss of leadership with the log entry at position ", position,
                          " in flight; the next leader decides it")
           : absl::StrCat("simulated ", fault == AppendFault::kSyncFails ? "sync" : "write",
                          " failure of the log entry at position ", position,
                          "; writes stop until it is repaired"));
  return poison_;
}

absl::Status SimLog::AppendBehindLostLeadership(absl::string_view payload) {
  planned_ = AppendFault::kNone;
  LEDGER_CHECK(!poison_.ok());
  if (!failed_.empty() && failed_.front().leadership_lost) {
    failed_.push_back(
        FailedEntry{.payload = std::string(payload), .written = true, .leadership_lost = true});
  }
  return poison_;
}

absl::Status SimLog::Repair() {
  if (poison_.ok()) return absl::OkStatus();
  if (!failed_.empty() && failed_.front().leadership_lost) {
    if (bug_ == SimLogBugForTesting::kRepairsALostLeadership) {
      poison_ = absl::OkStatus();
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError(
        "this replica no longer leads: the entry in flight is the next leader's to decide, and "
        "nothing is written before it starts again as a follower");
  }
  if (bug_ == SimLogBugForTesting::kRepairKeepsTheFailedEntry) {
    Commit(std::move(failed_.front().payload));
  }
  failed_.clear();
  poison_ = absl::OkStatus();
  return absl::OkStatus();
}

SimLogRecovery SimLog::Reopen() {
  SimLogRecovery recovery;
  planned_ = AppendFault::kNone;
  poison_ = absl::OkStatus();
  if (failed_.empty()) return recovery;
  recovery.had_failed_entry = true;
  recovery.leadership_lost = failed_.front().leadership_lost;
  recovery.undecided_entries = failed_.size();
  // Whole, in order, as long as the seed says; the first that is not is torn (or was never
  // committed), and so is everything after it.
  for (FailedEntry& entry : failed_) {
    if (!entry.written || (*rng_)() % 2 != 0) {
      const int64_t size = static_cast<int64_t>(entry.payload.size());
      // Cut anywhere short of its end, or whole with a bad checksum: LocalLog zeroes it either
      // way.
      recovery.torn_bytes =
          size == 0 ? 0 : static_cast<int64_t>((*rng_)() % static_cast<uint64_t>(size)) + 1;
      ++torn_tails_;
      break;
    }
    ++recovery.kept_entries;
    ++kept_failed_entries_;
    Commit(std::move(entry.payload));
  }
  recovery.kept = recovery.kept_entries > 0;
  failed_.clear();
  return recovery;
}

absl::Status SimLog::ReadFrom(
    uint64_t from,
    const std::function<absl::Status(uint64_t position, absl::string_view payload)>& read) const {
  LEDGER_CHECK(from >= first_position_);
  for (uint64_t position = from; position <= last_position(); ++position) {
    if (absl::Status status = read(position, entries_[position - first_position_]); !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

namespace {

class SimLogReader final : public storage::LogReader {
 public:
  SimLogReader(const SimLog& log, uint64_t from) : log_(log), next_(from) {}
  absl::StatusOr<int> Read(
      uint64_t last, int64_t max_bytes,
      const std::function<void(uint64_t position, absl::string_view payload)>& read) override {
    if (next_ > last) return 0;
    if (next_ < log_.first_position()) {
      return absl::OutOfRangeError(absl::StrCat("the log keeps entries from position ",
                                                log_.first_position(), " on, not ", next_));
    }
    last = std::min(last, log_.last_position());
    int passed = 0;
    int64_t bytes = 0;
    absl::Status copied = log_.ReadFrom(next_, [&](uint64_t position, absl::string_view payload) {
      if (position > last || (passed > 0 && bytes >= max_bytes)) {
        return absl::CancelledError();  // Enough for this call.
      }
      read(position, payload);
      ++passed;
      bytes += static_cast<int64_t>(payload.size());
      next_ = position + 1;
      return absl::OkStatus();
    });
    if (!copied.ok() && !absl::IsCancelled(copied)) return copied;
    return passed;
  }
  uint64_t next_position() const override { return next_; }

 private:
  const SimLog& log_;
  uint64_t next_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<storage::LogReader>> SimLog::NewReader(uint64_t from) const {
  if (from < first_position_) {
    return absl::OutOfRangeError(
        absl::StrCat("the log keeps entries from position ", first_position_, " on, not ", from));
  }
  return std::make_unique<SimLogReader>(*this, from);
}

absl::StatusOr<int> SimLog::DropBefore(uint64_t position) {
  // Whole segments only, and never the one appended to (the segment of the next position).
  const uint64_t keep_from = std::min(SegmentStart(position), SegmentStart(last_position() + 1));
  int dropped = 0;
  while (first_position_ + kEntriesPerSegment <= keep_from) {
    for (uint64_t k = 0; k < kEntriesPerSegment; ++k) {
      bytes_ -= static_cast<int64_t>(entries_.front().size());
      entries_.pop_front();
    }
    first_position_ += kEntriesPerSegment;
    ++dropped;
  }
  return dropped;
}

std::vector<std::string> SimLog::SegmentPaths() const {
  std::vector<std::string> paths;
  for (uint64_t start = first_position_; start <= last_position() + 1;
       start += kEntriesPerSegment) {
    paths.push_back(absl::StrCat("sim-segment-", start));
  }
  return paths;
}

size_t SimLog::SegmentCount() const { return SegmentPaths().size(); }

}  // namespace ledger::sim
