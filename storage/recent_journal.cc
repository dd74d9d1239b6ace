#include "storage/recent_journal.h"

#include <algorithm>
#include <utility>

#include "base/check.h"
#include "storage/key_order.h"
#include "storage/record_codec.h"

namespace ledger::storage {
namespace {

// Inserts `entry` in sequence order: at the end, but for an entry written again (a replay after
// the database was reopened), which replaces its twin. Returns the change in values' bytes.
int64_t Insert(std::vector<RecentJournal::Entry>& entries, RecentJournal::Entry entry) {
  const auto added = static_cast<int64_t>(entry.value.size());
  if (entries.empty() || entries.back().sequence < entry.sequence) {
    entries.push_back(std::move(entry));
    return added;
  }
  auto at = std::lower_bound(
      entries.begin(), entries.end(), entry.sequence,
      [](const RecentJournal::Entry& held, uint64_t sequence) { return held.sequence < sequence; });
  if (at != entries.end() && at->sequence == entry.sequence) {
    const auto replaced = static_cast<int64_t>(at->value.size());
    at->value = std::move(entry.value);
    return added - replaced;
  }
  entries.insert(at, std::move(entry));
  return added;
}

void CollectThrough(const std::vector<RecentJournal::Entry>& entries, uint64_t through,
                    std::map<uint64_t, std::string>& out) {
  for (const RecentJournal::Entry& entry : entries) {
    if (entry.sequence > through) break;
    out.try_emplace(entry.sequence, entry.value);
  }
}

}  // namespace

size_t RecentJournal::Add(absl::Span<const Put> puts) {
  size_t left_out = 0;
  absl::MutexLock lock(&mu_);
  for (const auto& [key, value] : puts) {
    const std::optional<uint64_t> sequence = JournalKeySequence(key);
    if (!sequence.has_value()) {
      ++left_out;
      continue;
    }
    const absl::string_view prefix = key.substr(0, key.size() - 8);
    std::vector<Entry>& entries = current_[prefix];
    const size_t before = entries.size();
    current_bytes_ += Insert(entries, Entry{.sequence = *sequence, .value = std::string(value)});
    current_count_ += entries.size() - before;
  }
  return left_out;
}

std::map<uint64_t, std::string> RecentJournal::Read(absl::string_view prefix,
                                                    uint64_t through) const {
  std::map<uint64_t, std::string> found;
  absl::MutexLock lock(&mu_);
  if (auto held = current_.find(prefix); held != current_.end()) {
    CollectThrough(held->second, through, found);
  }
  if (sealed_ != nullptr) {
    if (auto held = sealed_->find(prefix); held != sealed_->end()) {
      CollectThrough(held->second, through, found);  // Older: a newer twin above wins.
    }
  }
  return found;
}

std::shared_ptr<const RecentJournal::Entries> RecentJournal::Seal() {
  absl::MutexLock lock(&mu_);
  LEDGER_CHECK(sealed_ == nullptr);
  sealed_ = std::make_shared<const Entries>(std::move(current_));
  current_ = Entries();
  sealed_count_ = std::exchange(current_count_, 0);
  sealed_bytes_ = std::exchange(current_bytes_, 0);
  return sealed_;
}

void RecentJournal::Release(bool written) {
  absl::MutexLock lock(&mu_);
  LEDGER_CHECK(sealed_ != nullptr);
  if (!written) {
    for (const auto& [prefix, sealed_entries] : *sealed_) {
      std::vector<Entry>& entries = current_[prefix];
      const size_t before = entries.size();
      for (const Entry& entry : sealed_entries) current_bytes_ += Insert(entries, entry);
      current_count_ += entries.size() - before;
    }
  }
  sealed_ = nullptr;
  sealed_count_ = 0;
  sealed_bytes_ = 0;
}

bool RecentJournal::ForEachInTableOrder(
    const Entries& entries,
    const std::function<bool(absl::string_view key, absl::string_view value)>& write) {
  std::string key;
  // The prefixes end in a separator no account id holds, so their order is their keys' order.
  for (const Entries::value_type* account : InKeyOrder(entries)) {
    // The prefix is the account id and its separator.
    const absl::string_view account_id(account->first.data(), account->first.size() - 1);
    for (const Entry& entry : account->second) {
      key = JournalKey(account_id, entry.sequence);
      if (!write(key, entry.value)) return false;
    }
  }
  return true;
}

size_t RecentJournal::size() const {
  absl::MutexLock lock(&mu_);
  return current_count_ + sealed_count_;
}

int64_t RecentJournal::bytes() const {
  absl::MutexLock lock(&mu_);
  return current_bytes_ + sealed_bytes_;
}

}  // namespace ledger::storage
