#include "sim/sim_watcher.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace ledger::sim {

std::string SimWatcher::Follow(const FaultStore& store) {
  const uint64_t acknowledged = store.acknowledged_position();
  if (reader_ == nullptr || reader_->next_position() != next_) {
    absl::StatusOr<std::unique_ptr<storage::LogReader>> reader = store.log().NewReader(next_);
    if (!reader.ok()) {
      if (!absl::IsOutOfRange(reader.status())) {
        return absl::StrCat("the watcher's reader: ", reader.status().message());
      }
      // Behind what the log keeps: resync from the durable accounts, which hold every entry
      // acknowledged (the store's truth), and follow from there.
      accounts_ = store.accounts();
      next_ = acknowledged + 1;
      ++resyncs_;
      return "";
    }
    reader_ = *std::move(reader);
  }
  std::string failure;
  while (failure.empty() && next_ <= acknowledged) {
    const int64_t max_bytes = std::uniform_int_distribution<int64_t>(1, 64)(*rng_);
    absl::StatusOr<int> read =
        reader_->Read(acknowledged, max_bytes, [&](uint64_t position, absl::string_view payload) {
          if (!failure.empty()) return;
          if (position != next_) {
            failure = absl::StrCat("the watcher's reader passed position ", position, " after ",
                                   next_ - 1);
            return;
          }
          next_ = position + 1;
          if (skips_positions_ && position % 50 == 0) return;
          for (const JournalEntry& entry : store.JournalOf(payload)) {
            AccountState& account = accounts_[entry.account_id];
            if (entry.sequence != account.sequence + 1) {
              failure = absl::StrCat("the watcher got operation ", entry.sequence, " of account ",
                                     entry.account_id, " after operation ", account.sequence,
                                     " (position ", position, ")");
              return;
            }
            account = {.balance = entry.balance_after, .sequence = entry.sequence};
            ++events_;
          }
        });
    if (!read.ok()) {
      if (!absl::IsOutOfRange(read.status())) {
        return absl::StrCat("the watcher's reader: ", read.status().message());
      }
      reader_.reset();  // Its place was dropped: the next call resyncs.
      return failure;
    }
    if (*read == 0) break;
  }
  return failure;
}

std::string SimWatcher::Check(const FaultStore& store) const {
  const uint64_t acknowledged = store.acknowledged_position();
  if (next_ != acknowledged + 1 || store.log().last_position() != acknowledged) return "";
  const std::map<std::string, AccountState>& durable = store.accounts();
  for (const auto& [id, state] : durable) {
    const auto rebuilt = accounts_.find(id);
    if (rebuilt == accounts_.end() || rebuilt->second.balance != state.balance ||
        rebuilt->second.sequence != state.sequence) {
      return absl::StrCat("the watcher rebuilt account ", id,
                          rebuilt == accounts_.end()
                              ? std::string(" as never opened")
                              : absl::StrCat(" at balance ", rebuilt->second.balance, ", sequence ",
                                             rebuilt->second.sequence),
                          " but the store holds balance ", state.balance, ", sequence ",
                          state.sequence, " (log position ", acknowledged, ")");
    }
  }
  if (accounts_.size() != durable.size()) {
    return absl::StrCat("the watcher rebuilt ", accounts_.size(), " accounts, the store holds ",
                        durable.size());
  }
  return "";
}

}  // namespace ledger::sim
