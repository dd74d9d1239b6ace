// Defines `InKeyOrder`: the entries of a map with string keys in the keys' byte-wise order
// (RocksDB's comparator), found without comparing whole strings.
//
// A checkpoint sorts every idempotency record, account and journal account it writes
// (RocksDbStore::IngestRecentRecords), and each replica of a cluster pays for it. Sorted as
// pointers with `std::string::operator<`, every comparison followed two pointers to the keys'
// bytes and ran memcmp over the prefix they share (a load test's keys share their run id and
// account name): `perf` put sorting at about a quarter of a follower's CPU under Apply load
// (docs/replication.md 9.7). Here the keys are read 8 bytes at a time into integers kept beside
// them, the integers are sorted, and only keys still equal after 8 bytes are read further (a
// most-significant-digit radix sort with 8-byte digits), after skipping the prefix all of them
// share. It holds 40 bytes per entry while it sorts (std::sort of pointers: 8).
#ifndef LEDGER_STORAGE_KEY_ORDER_H_
#define LEDGER_STORAGE_KEY_ORDER_H_

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "base/check.h"

namespace ledger::storage {

// A key being sorted and the index of what it belongs to. `digit` is the sort's own.
struct KeyToSort {
  uint64_t digit = 0;
  const char* data = nullptr;
  uint32_t size = 0;
  uint32_t index = 0;
};

// Puts `keys` in ascending byte-wise order of their bytes; equal keys keep no particular order.
void SortKeys(absl::Span<KeyToSort> keys);

// Pointers to the entries of `map` (any container of pairs whose `first` is a string, fewer
// than 2^32 of them, each key shorter than 4 GiB) in the order of their keys.
template <typename Map>
std::vector<const typename Map::value_type*> InKeyOrder(const Map& map) {
  using Entry = typename Map::value_type;
  std::vector<const Entry*> entries;
  std::vector<KeyToSort> keys;
  entries.reserve(map.size());
  keys.reserve(map.size());
  for (const Entry& entry : map) {
    const absl::string_view key = entry.first;
    LEDGER_CHECK(key.size() < UINT32_MAX && entries.size() < UINT32_MAX);
    keys.push_back({.data = key.data(),
                    .size = static_cast<uint32_t>(key.size()),
                    .index = static_cast<uint32_t>(entries.size())});
    entries.push_back(&entry);
  }
  SortKeys(absl::MakeSpan(keys));
  std::vector<const Entry*> sorted;
  sorted.reserve(entries.size());
  for (const KeyToSort& key : keys) sorted.push_back(entries[key.index]);
  return sorted;
}

}  // namespace ledger::storage

#endif  // LEDGER_STORAGE_KEY_ORDER_H_
