// RecentRequests: the idempotency records since the last checkpoint, answered from memory until a
// checkpoint has written them to RocksDB.
#include "storage/recent_requests.h"

#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ledger::storage {
namespace {

std::optional<std::optional<std::string>> Held(const std::string& value) {
  return std::optional<std::string>(value);
}

TEST(RecentRequestsTest, ARecordIsFoundFromItsAddUntilAWrittenSealIsReleased) {
  RecentRequests records;
  EXPECT_EQ(records.Find("a\0r1"), std::nullopt);
  records.Add("k1", "v1");
  records.Add("k2", "v2");
  records.Add("k1", "v1-newer");
  EXPECT_EQ(records.Find("k1"), Held("v1-newer"));
  EXPECT_EQ(records.bytes(), 2 + 8 + 2 + 2);

  const auto sealed = RecentRequests::SortedForTable(*records.Seal());
  ASSERT_EQ(sealed.size(), 2u);  // Sorted by key, the newest value of each.
  EXPECT_EQ(sealed[0]->first, "k1");
  EXPECT_EQ(sealed[0]->second, std::optional<std::string>("v1-newer"));
  EXPECT_EQ(sealed[1]->first, "k2");
  // Sealed records are still answered, and new ones are taken beside them.
  records.Add("k3", "v3");
  EXPECT_EQ(records.Find("k2"), Held("v2"));
  EXPECT_EQ(records.Find("k3"), Held("v3"));
  EXPECT_EQ(records.size(), 3u);

  records.Release(/*written=*/true);
  EXPECT_EQ(records.Find("k1"), std::nullopt);  // RocksDB answers for it now.
  EXPECT_EQ(records.Find("k3"), Held("v3"));
  EXPECT_EQ(records.size(), 1u);
  EXPECT_EQ(records.bytes(), 4);
}

TEST(RecentRequestsTest, AFailedCheckpointPutsTheSealedRecordsBackUnderNewerOnes) {
  RecentRequests records;
  records.Add("k1", "old");
  records.Add("k2", std::nullopt);  // A deletion is held as one.
  const auto sealed = RecentRequests::SortedForTable(*records.Seal());
  ASSERT_EQ(sealed.size(), 2u);
  EXPECT_EQ(sealed[1]->second, std::nullopt);
  records.Add("k1", "new");
  records.Release(/*written=*/false);
  EXPECT_EQ(records.Find("k1"), Held("new"));
  EXPECT_EQ(records.Find("k2"), std::make_optional(std::optional<std::string>()));  // Deleted.
  EXPECT_EQ(records.size(), 2u);
  EXPECT_EQ(records.bytes(), 2 + 3 + 2);
  // The next seal holds both again.
  EXPECT_EQ(records.Seal()->size(), 2u);
  records.Release(/*written=*/true);
  EXPECT_EQ(records.size(), 0u);
  EXPECT_EQ(records.bytes(), 0);
}

// A log entry's records are added at once, in its order: a later change of a key wins, and the
// bytes count what is held.
TEST(RecentRequestsTest, AnEntrysRecordsAddedAtOnceKeepTheLastChangeOfEachKey) {
  RecentRequests records;
  const std::vector<RecentRequests::Change> entry = {
      {.key = "k1", .value = "first"},
      {.key = "k2", .value = "v2"},
      {.key = "k1", .value = std::nullopt},
      {.key = "k2", .value = "v2-newer"},
  };
  records.Add(entry);
  EXPECT_EQ(records.Find("k1"), std::make_optional(std::optional<std::string>()));  // Deleted.
  EXPECT_EQ(records.Find("k2"), Held("v2-newer"));
  EXPECT_EQ(records.size(), 2u);
  EXPECT_EQ(records.bytes(), 2 + 2 + 8);
}

}  // namespace
}  // namespace ledger::storage
