#include "storage/key_order.h"

#include <algorithm>
#include <cstddef>

namespace ledger::storage {
namespace {

// A key's `digit` is the 8 bytes of it from the current depth as a big-endian integer, so that
// integer order is byte order. A key that ends inside the 8 bytes is padded with zeros; its
// length then puts it before a longer key with the same bytes (a key's prefix sorts first).
constexpr size_t kDigitBytes = 8;
// Fewer keys than this are sorted by comparing their remaining bytes: a pass over them to read
// the next digits costs more than the comparisons.
constexpr ptrdiff_t kCompareBelow = 16;
// How many keys ahead a pass asks for the bytes it will read: the keys are scattered over the
// heap, and a pass that waited for each in turn spent most of its time waiting (twice as long).
constexpr ptrdiff_t kPrefetchAhead = 8;

void ReadDigit(size_t depth, KeyToSort& key) {
  const size_t read = std::min(key.size - depth, kDigitBytes);
  uint64_t digit = 0;
  for (size_t i = 0; i < kDigitBytes; ++i) {
    digit = (digit << 8) | (i < read ? static_cast<uint8_t>(key.data[depth + i]) : 0);
  }
  key.digit = digit;
}

// The key's bytes from `depth` on, counting any more than 8 as 9: with the digit, its place.
size_t LengthFrom(size_t depth, const KeyToSort& key) {
  return std::min(key.size - depth, kDigitBytes + 1);
}

absl::string_view From(size_t depth, const KeyToSort& key) {
  return {key.data + depth, key.size - depth};
}

// The bytes every key starts with.
size_t SharedPrefix(absl::Span<const KeyToSort> keys) {
  const absl::string_view first = From(0, keys.front());
  size_t shared = first.size();
  for (size_t k = 1; k < keys.size() && shared > 0; ++k) {
    if (k + kPrefetchAhead < keys.size()) __builtin_prefetch(keys[k + kPrefetchAhead].data);
    const absl::string_view key = From(0, keys[k]);
    shared = std::min(shared, key.size());
    size_t same = 0;
    while (same < shared && key[same] == first[same]) ++same;
    shared = same;
  }
  return shared;
}

}  // namespace

void SortKeys(absl::Span<KeyToSort> keys) {
  if (keys.size() < 2) return;
  // Ranges of `keys` equal before `depth`, still to be put in order: an explicit stack, since
  // its depth grows with the keys' length.
  struct Range {
    KeyToSort* begin;
    KeyToSort* end;
    size_t depth;
  };
  std::vector<Range> pending = {{keys.data(), keys.data() + keys.size(), SharedPrefix(keys)}};
  while (!pending.empty()) {
    const Range range = pending.back();
    pending.pop_back();
    const size_t depth = range.depth;
    if (range.end - range.begin < kCompareBelow) {
      std::sort(range.begin, range.end, [depth](const KeyToSort& a, const KeyToSort& b) {
        return From(depth, a) < From(depth, b);
      });
      continue;
    }
    for (KeyToSort* key = range.begin; key != range.end; ++key) {
      if (range.end - key > kPrefetchAhead) __builtin_prefetch(key[kPrefetchAhead].data);
      ReadDigit(depth, *key);
    }
    const auto digit_order = [depth](const KeyToSort& a, const KeyToSort& b) {
      if (a.digit != b.digit) return a.digit < b.digit;
      return LengthFrom(depth, a) < LengthFrom(depth, b);
    };
    std::sort(range.begin, range.end, digit_order);
    // Keys with the same 8 bytes and more after them: ordered by what follows.
    for (KeyToSort* run = range.begin; run != range.end;) {
      KeyToSort* const run_end = std::upper_bound(run, range.end, *run, digit_order);
      if (LengthFrom(depth, *run) > kDigitBytes && run_end - run > 1) {
        pending.push_back({run, run_end, depth + kDigitBytes});
      }
      run = run_end;
    }
  }
}

}  // namespace ledger::storage
