#include "sim/sim_watcher.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace ledger::sim {

// One Follow in this many starts over as a new consumer, from a snapshot of balances.
constexpr uint64_t kFreshStartOneIn = 150;

void SimWatcher::StartFromSnapshot(const FaultStore& store) {
  std::vector<std::string> ids;
  for (const auto& [id, state] : store.accounts()) ids.push_back(id);
  for (const auto& [id, state] : accounts_) {
    if (!store.accounts().contains(id)) ids.push_back(id);
  }
  const FaultStore::AccountsAt at = store.AccountsAtApplied(ids);
  accounts_.clear();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (at.states[i].has_value()) accounts_[ids[i]] = *at.states[i];
  }
  next_ = at.position + 1;
  reader_.reset();
  ++resyncs_;
}

std::string SimWatcher::Follow(const FaultStore& store) {
  const uint64_t acknowledged = store.acknowledged_position();
  // Draws are the generator's output modulo n, the same on every standard library (as in
  // simulator.cc).
  if ((*rng_)() % kFreshStartOneIn == 0) {
    StartFromSnapshot(store);
  }
  if (reader_ == nullptr || reader_->next_position() != next_) {
    absl::StatusOr<std::unique_ptr<storage::LogReader>> reader = store.log().NewReader(next_);
    if (!reader.ok()) {
      if (!absl::IsOutOfRange(reader.status())) {
        return absl::StrCat("the watcher's reader: ", reader.status().message());
      }
      // Behind what the log keeps: start again from a snapshot, whose position the log keeps
      // everything after.
      StartFromSnapshot(store);
      absl::StatusOr<std::unique_ptr<storage::LogReader>> again = store.log().NewReader(next_);
      if (!again.ok()) {
        return absl::StrCat(
            "the log no longer keeps position ", next_,
            " after a snapshot at the applied position: ", again.status().message());
      }
      reader = std::move(again);
    }
    reader_ = *std::move(reader);
  }
  std::string failure;
  while (failure.empty() && next_ <= acknowledged) {
    const int64_t max_bytes = static_cast<int64_t>((*rng_)() % 64) + 1;
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
