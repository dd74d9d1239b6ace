#include "storage/log_entry.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ledger::storage {
namespace {

using ::testing::HasSubstr;

struct Change {
  LogFamily family;
  std::string key;
  std::optional<std::string> value;
  friend bool operator==(const Change&, const Change&) = default;
};

absl::StatusOr<std::vector<Change>> Changes(absl::string_view payload) {
  std::vector<Change> changes;
  absl::Status read = ForEachLogChange(payload, [&](const LogChange& change) {
    changes.push_back(Change{
        change.family, std::string(change.key),
        change.value.has_value() ? std::optional<std::string>(*change.value) : std::nullopt});
  });
  if (!read.ok()) return read;
  return changes;
}

TEST(LogEntryTest, ChangesAreReadBackInOrderWithBinaryKeysAndLongValues) {
  LogEntryBuilder builder;
  const std::string binary_key("a\0b\xff", 4);
  const std::string long_value(70000, 'v');  // A three-byte varint length.
  builder.Put(LogFamily::kAccounts, binary_key, "state");
  builder.Put(LogFamily::kJournal, "j", long_value);
  builder.Delete(LogFamily::kDefault, "pending");
  builder.Put(LogFamily::kRequests, "r", "");
  absl::StatusOr<std::vector<Change>> changes = Changes(builder.payload());
  ASSERT_TRUE(changes.ok()) << changes.status();
  EXPECT_EQ(*changes, (std::vector<Change>{{LogFamily::kAccounts, binary_key, "state"},
                                           {LogFamily::kJournal, "j", long_value},
                                           {LogFamily::kDefault, "pending", std::nullopt},
                                           {LogFamily::kRequests, "r", ""}}));
  builder.Reset();
  EXPECT_TRUE(Changes(builder.payload())->empty());
}

// Every cut of a payload that is not at a change's boundary is refused, never read as a shorter
// change (the log's checksum catches damage first; this is the second line).
TEST(LogEntryTest, APayloadCutShortOrMalformedIsDataLossNamingWhere) {
  LogEntryBuilder builder;
  builder.Put(LogFamily::kAccounts, "alice", "1234");
  const size_t first_change_end = builder.payload().size();
  builder.Delete(LogFamily::kDefault, "key");
  const std::string payload = builder.payload();
  for (size_t cut = 0; cut < payload.size(); ++cut) {
    absl::StatusOr<std::vector<Change>> changes = Changes(payload.substr(0, cut));
    // 0: an empty payload, a replicated log's own entry, has no change; 2: the header alone.
    if (cut == 0 || cut == first_change_end || cut == 2) {
      EXPECT_TRUE(changes.ok()) << "cut at " << cut;
    } else {
      ASSERT_FALSE(changes.ok()) << "cut at " << cut;
      EXPECT_EQ(changes.status().code(), absl::StatusCode::kDataLoss);
    }
  }
  std::string unknown_version = payload;
  unknown_version[0] = 9;
  EXPECT_THAT(Changes(unknown_version).status().message(), HasSubstr("not of version 1"));
  std::string flags = payload;
  flags[1] = 1;
  EXPECT_THAT(Changes(flags).status().message(), HasSubstr("unknown flags"));
  std::string family = payload;
  family[3] = 7;
  EXPECT_THAT(Changes(family).status().message(), HasSubstr("unknown change (kind 1, family 7)"));
}

}  // namespace
}  // namespace ledger::storage
