#include "server/watch_retention.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;

TEST(WatchRetentionTest, ReadsASizeAnAgeOrNothing) {
  EXPECT_EQ(ParseWatchRetention("0")->bytes, 0);
  EXPECT_EQ(ParseWatchRetention("0")->age, absl::ZeroDuration());
  EXPECT_EQ(ParseWatchRetention("512MiB")->bytes, int64_t{512} << 20);
  EXPECT_EQ(ParseWatchRetention("20GiB")->bytes, int64_t{20} << 30);
  EXPECT_EQ(ParseWatchRetention("3TiB")->bytes, int64_t{3} << 40);
  EXPECT_EQ(ParseWatchRetention("4096B")->bytes, 4096);
  EXPECT_EQ(ParseWatchRetention("24h")->age, absl::Hours(24));
  EXPECT_EQ(ParseWatchRetention("24h")->bytes, 0);
  EXPECT_EQ(ParseWatchRetention("1h30m")->age, absl::Minutes(90));
}

TEST(WatchRetentionTest, RefusesAnythingElseNamingTheFlagAndTheForms) {
  for (const char* bad : {"", "-1GiB", "0GiB", "1.5GiB", "10GB", "lots", "1025TiB", "0s", "500ms",
                          "87601h", "-5h", "GiB"}) {
    absl::StatusOr<WatchRetention> parsed = ParseWatchRetention(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status())) << bad;
    EXPECT_THAT(parsed.status().message(), HasSubstr("--watch_retention must be 0, a size")) << bad;
  }
}

}  // namespace
}  // namespace ledger
