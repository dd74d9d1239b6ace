// InKeyOrder: a checkpoint's entries in RocksDB's byte-wise order of their keys, checked against
// std::sort of the keys themselves.
#include "storage/key_order.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ledger::storage {
namespace {

using Entries = std::vector<std::pair<std::string, int>>;

// The entries in the order InKeyOrder gives, each once, beside the keys std::sort puts in order.
void ExpectSortedLikeStdSort(const std::vector<std::string>& keys) {
  Entries entries;
  for (const std::string& key : keys) entries.emplace_back(key, static_cast<int>(entries.size()));
  const std::vector<const Entries::value_type*> sorted = InKeyOrder(entries);
  ASSERT_EQ(sorted.size(), keys.size());
  std::vector<std::string> ordered;
  std::vector<int> seen;
  for (const auto* entry : sorted) {
    ordered.push_back(entry->first);
    seen.push_back(entry->second);
  }
  std::sort(seen.begin(), seen.end());
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], static_cast<int>(i)) << "once each";
  std::vector<std::string> expected = keys;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(ordered, expected);
}

TEST(KeyOrderTest, NoEntriesAndOneEntry) {
  EXPECT_TRUE(InKeyOrder(Entries()).empty());
  const Entries one = {{"only", 7}};
  const auto sorted = InKeyOrder(one);
  ASSERT_EQ(sorted.size(), 1u);
  EXPECT_EQ(sorted[0], &one[0]);
}

TEST(KeyOrderTest, AKeyComesBeforeTheKeysItIsAPrefixOf) {
  // Zero bytes where a shorter key is padded, and bytes above 0x7f (unsigned order); enough
  // keys (more than 16) that they are sorted by digits, not by comparisons.
  std::vector<std::string> keys;
  for (const std::string& stem :
       {std::string("ab"), std::string("ab\0", 3), std::string("ab\0\0\0\0\0\0", 8),
        std::string("ab\xff", 3), std::string("abcdefgh"), std::string("abcdefghi"),
        std::string("abcdefgh\0", 9), std::string("a"), std::string()}) {
    keys.push_back(stem);
    keys.push_back(stem + "z");
    keys.push_back(stem + std::string(1, '\0'));
  }
  ExpectSortedLikeStdSort(keys);
  // Many keys equal but for their length, in zeros: only the length orders them, digit after
  // digit.
  std::vector<std::string> zeros;
  for (int k = 40; k >= 0; --k) zeros.push_back("ab" + std::string(static_cast<size_t>(k), '\0'));
  ExpectSortedLikeStdSort(zeros);
}

TEST(KeyOrderTest, KeysSharingLongPrefixesAndDuplicates) {
  std::vector<std::string> keys;
  const std::string shared(997, 'p');
  for (int i = 0; i < 300; ++i) keys.push_back(absl::StrCat(shared, 300 - i));
  for (int i = 0; i < 50; ++i) keys.push_back(keys[static_cast<size_t>(i) * 3]);
  keys.push_back(shared);
  ExpectSortedLikeStdSort(keys);
  std::vector<std::string> same(40, "the same key");
  ExpectSortedLikeStdSort(same);
}

// The shapes a checkpoint sees (an account id, a separator, a request id, in a load test all
// sharing a run id), and random bytes of random lengths.
TEST(KeyOrderTest, RandomKeysOfEveryShape) {
  std::mt19937_64 random(20261206);
  for (int round = 0; round < 200; ++round) {
    std::vector<std::string> keys;
    const size_t count = random() % 3000;
    const int alphabet = 1 + static_cast<int>(random() % 256);
    const size_t max_length = 1 + random() % 40;
    for (size_t i = 0; i < count; ++i) {
      if (round % 2 == 0) {
        keys.push_back(absl::StrCat("run1f2e3d4c-", random() % 500, std::string(1, '\0'),
                                    "run1f2e3d4c-", random() % 100000));
      } else {
        std::string key(random() % max_length, '\0');
        for (char& byte : key) byte = static_cast<char>(random() % alphabet);
        keys.push_back(std::move(key));
      }
    }
    ASSERT_NO_FATAL_FAILURE(ExpectSortedLikeStdSort(keys)) << "round " << round;
  }
}

}  // namespace
}  // namespace ledger::storage
