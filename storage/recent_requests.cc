#include "storage/recent_requests.h"

#include <cstdint>

#include "base/check.h"
#include "storage/key_order.h"

namespace ledger::storage {
namespace {

int64_t RecordBytes(absl::string_view key, const std::optional<std::string>& value) {
  return static_cast<int64_t>(key.size() + (value.has_value() ? value->size() : 0));
}

}  // namespace

void RecentRequests::Add(absl::Span<const Change> changes) {
  absl::MutexLock lock(&mu_);
  for (const auto& [key, value] : changes) {
    auto [record, inserted] = current_.try_emplace(key);
    if (!inserted) current_bytes_ -= RecordBytes(key, record->second);
    if (value.has_value()) {
      record->second.emplace(*value);
    } else {
      record->second.reset();
    }
    current_bytes_ += RecordBytes(key, record->second);
  }
}

std::optional<std::optional<std::string>> RecentRequests::Find(absl::string_view key) const {
  std::shared_ptr<const Records> sealed;
  {
    absl::MutexLock lock(&mu_);
    auto found = current_.find(key);
    if (found != current_.end()) return found->second;
    sealed = sealed_;
  }
  // Outside the lock: the sealed records never change.
  if (sealed != nullptr) {
    auto found = sealed->find(key);
    if (found != sealed->end()) return found->second;
  }
  return std::nullopt;
}

std::shared_ptr<const RecentRequests::Records> RecentRequests::Seal() {
  absl::MutexLock lock(&mu_);
  LEDGER_CHECK(sealed_ == nullptr);
  sealed_ = std::make_shared<const Records>(std::move(current_));
  current_ = Records();
  sealed_bytes_ = current_bytes_;
  current_bytes_ = 0;
  return sealed_;
}

std::vector<const RecentRequests::Records::value_type*> RecentRequests::SortedForTable(
    const Records& records) {
  return InKeyOrder(records);
}

void RecentRequests::Release(bool written) {
  absl::MutexLock lock(&mu_);
  LEDGER_CHECK(sealed_ != nullptr);
  if (!written) {
    for (const auto& [key, value] : *sealed_) {
      if (current_.try_emplace(key, value).second) current_bytes_ += RecordBytes(key, value);
    }
  }
  sealed_ = nullptr;
  sealed_bytes_ = 0;
}

size_t RecentRequests::size() const {
  absl::MutexLock lock(&mu_);
  return current_.size() + (sealed_ == nullptr ? 0 : sealed_->size());
}

int64_t RecentRequests::bytes() const {
  absl::MutexLock lock(&mu_);
  return current_bytes_ + sealed_bytes_;
}

}  // namespace ledger::storage
