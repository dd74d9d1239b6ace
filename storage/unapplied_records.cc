#include "storage/unapplied_records.h"

#include <utility>

namespace ledger::storage {

std::string UnappliedRecords::MapKey(LogFamily family, absl::string_view key) {
  std::string map_key;
  map_key.reserve(key.size() + 1);
  map_key.push_back(static_cast<char>(family));
  map_key.append(key.data(), key.size());
  return map_key;
}

void UnappliedRecords::Add(uint64_t position, LogFamily family, absl::string_view key,
                           std::optional<absl::string_view> value) {
  Record record{.position = position};
  if (value.has_value()) record.value = std::string(*value);
  std::string map_key = MapKey(family, key);
  absl::MutexLock lock(&mu_);
  records_.insert_or_assign(std::move(map_key), std::move(record));
}

void UnappliedRecords::Forget(uint64_t position, LogFamily family, absl::string_view key) {
  const std::string map_key = MapKey(family, key);
  absl::MutexLock lock(&mu_);
  auto found = records_.find(map_key);
  if (found != records_.end() && found->second.position <= position) records_.erase(found);
}

std::optional<std::optional<std::string>> UnappliedRecords::Find(LogFamily family,
                                                                 absl::string_view key) const {
  const std::string map_key = MapKey(family, key);
  absl::MutexLock lock(&mu_);
  auto found = records_.find(map_key);
  if (found == records_.end()) return std::nullopt;
  return found->second.value;
}

size_t UnappliedRecords::size() const {
  absl::MutexLock lock(&mu_);
  return records_.size();
}

}  // namespace ledger::storage
