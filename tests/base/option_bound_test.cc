#include "base/option_bound.h"

#include <limits>

#include "gtest/gtest.h"

namespace ledger {
namespace {

constexpr OptionBound kShardsLike{"--shards", 2, 1024};

TEST(CheckOptionBoundTest, TheLimitsAreInsideAndOnePastThemIsOutside) {
  EXPECT_TRUE(CheckOptionBound(kShardsLike, 2).ok());
  EXPECT_TRUE(CheckOptionBound(kShardsLike, 1024).ok());
  EXPECT_EQ(CheckOptionBound(kShardsLike, 1).message(), "--shards must be 2 to 1024; got 1");
  EXPECT_EQ(CheckOptionBound(kShardsLike, 1025).message(), "--shards must be 2 to 1024; got 1025");
  EXPECT_EQ(CheckOptionBound(kShardsLike, 1025).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckOptionBoundTest, ABoundWithoutAMaximumSaysAtLeast) {
  constexpr OptionBound kAtLeastZero{"--overdraft_limit", 0, std::numeric_limits<int64_t>::max()};
  EXPECT_TRUE(CheckOptionBound(kAtLeastZero, 0).ok());
  EXPECT_TRUE(CheckOptionBound(kAtLeastZero, std::numeric_limits<int64_t>::max()).ok());
  EXPECT_EQ(CheckOptionBound(kAtLeastZero, -1).message(),
            "--overdraft_limit must be at least 0; got -1");
}

TEST(CheckDurationAtLeastTest, TheMinimumIsInsideAndBelowItIsOutside) {
  EXPECT_TRUE(
      CheckDurationAtLeast("--keepalive_time", absl::Milliseconds(1), absl::Milliseconds(1)).ok());
  EXPECT_EQ(CheckDurationAtLeast("--keepalive_time", absl::ZeroDuration(), absl::Milliseconds(1))
                .message(),
            "--keepalive_time must be at least 1ms; got 0");
  EXPECT_EQ(
      CheckDurationAtLeast("--shutdown_grace", absl::Seconds(-1), absl::ZeroDuration()).message(),
      "--shutdown_grace must be at least 0; got -1s");
}

}  // namespace
}  // namespace ledger
