#include "storage/raft_catch_up.h"

#include <algorithm>
#include <iterator>
#include <limits>

namespace ledger::storage {

void CatchUpWindow::Committed(uint64_t position, int64_t bytes) {
  if (!started_) {
    started_ = true;
    known_after_ = position - 1;
  }
  if (position <= known_after_ || (!cumulative_.empty() && position <= cumulative_.back().first)) {
    return;
  }
  const int64_t before = cumulative_.empty() ? base_ : cumulative_.back().second;
  cumulative_.emplace_back(position, before + bytes);
}

std::optional<int64_t> CatchUpWindow::BytesThrough(uint64_t position) const {
  if (!started_ || position < known_after_) return std::nullopt;
  // The last remembered position at or before `position`: none, and it is `base_`.
  const auto after = std::upper_bound(
      cumulative_.begin(), cumulative_.end(), position,
      [](uint64_t p, const std::pair<uint64_t, int64_t>& entry) { return p < entry.first; });
  return after == cumulative_.begin() ? base_ : std::prev(after)->second;
}

unsigned CatchUpWindow::TrailingFor(uint64_t snapshot_position, std::optional<uint64_t> slowest) {
  unsigned trailing = floor_;
  // The slowest's own last entry too: libraft sends entries after it only with its term.
  if (slowest.has_value() && *slowest > 0 && *slowest + floor_ <= snapshot_position) {
    const std::optional<int64_t> from = BytesThrough(*slowest - 1);
    const std::optional<int64_t> to = BytesThrough(snapshot_position);
    const uint64_t wanted = snapshot_position - *slowest + 1;
    if (from.has_value() && to.has_value() && *to - *from <= max_bytes_ &&
        wanted <= std::numeric_limits<unsigned>::max()) {
      trailing = static_cast<unsigned>(wanted);
    }
  }
  // libraft keeps the positions after snapshot_position - trailing; the rest is forgotten.
  if (snapshot_position > trailing) {
    const uint64_t kept_after = snapshot_position - trailing;
    if (started_ && kept_after > known_after_) {
      base_ = *BytesThrough(kept_after);
      while (!cumulative_.empty() && cumulative_.front().first <= kept_after) {
        cumulative_.pop_front();
      }
      known_after_ = kept_after;
    }
  }
  return trailing;
}

}  // namespace ledger::storage
