#include "client/loadtest_options.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;

constexpr char kDefaultMix[] = "deposit=70,withdraw=25,balance=5";

absl::StatusOr<LoadtestOptions> Validate(const LoadtestOptions& options) {
  return ValidateOptions(options, kDefaultMix, "any");
}

TEST(ValidateOptionsTest, TheDefaultsPassAndGetTheirDerivedValues) {
  absl::StatusOr<LoadtestOptions> options = Validate(LoadtestOptions{});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->target, "localhost:50051");
  EXPECT_EQ(options->max_in_flight, 400);  // kStreamsPerChannel for each of the 4 channels.
  EXPECT_EQ(options->mix.deposit, 70);
  EXPECT_EQ(options->mix.withdraw, 25);
  EXPECT_EQ(options->mix.balance, 5);
  EXPECT_EQ(options->mix.transfer, 0);
  EXPECT_EQ(options->transfer_scope, TransferScope::kAny);
  EXPECT_THAT(options->run_id, ::testing::MatchesRegex("run[0-9a-f]{8}"));
  EXPECT_NE(options->credentials, nullptr);
}

TEST(ValidateOptionsTest, AGivenMaxInFlightAndRunIdAreKept) {
  LoadtestOptions given;
  given.max_in_flight = 7;
  given.run_id = "mine";
  given.target = ":6000";
  absl::StatusOr<LoadtestOptions> options = ValidateOptions(given, "transfer=1", "cross_shard");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->max_in_flight, 7);
  EXPECT_EQ(options->run_id, "mine");
  EXPECT_EQ(options->target, "localhost:6000");
  EXPECT_EQ(options->mix.transfer, 1);
  EXPECT_EQ(options->mix.deposit, 0);
  EXPECT_EQ(options->transfer_scope, TransferScope::kCrossShard);
}

TEST(ValidateOptionsTest, MaxInFlightDefaultsToOneConnectionOfStreamsPerChannel) {
  LoadtestOptions given;
  given.channels = 2;
  EXPECT_EQ(Validate(given)->max_in_flight, 2 * kStreamsPerChannel);
}

// Each bound at its limit passes, and one past it is refused with a message naming the flag.
TEST(ValidateOptionsTest, BoundsAcceptTheLimitAndRefuseOnePast) {
  struct Case {
    const char* flag;
    void (*set)(LoadtestOptions&, bool past);
  };
  const Case cases[] = {
      {"--concurrency", [](LoadtestOptions& o, bool past) { o.concurrency = past ? 0 : 1; }},
      {"--batch", [](LoadtestOptions& o, bool past) { o.batch = past ? 8193 : 8192; }},
      {"--fund", [](LoadtestOptions& o, bool past) { o.fund = past ? -1 : 0; }},
      {"--max_retries",
       [](LoadtestOptions& o, bool past) { o.max_retries = kMaxRetriesLimit + (past ? 1 : 0); }},
      {"--retry_budget", [](LoadtestOptions& o, bool past) { o.retry_budget = past ? 1.01 : 1; }},
      {"--throttle_k", [](LoadtestOptions& o, bool past) { o.throttle_k = past ? 1000.5 : 1000; }},
      {"--amount_min", [](LoadtestOptions& o, bool past) { o.amount_min = past ? 0 : 1; }},
      {"--channels", [](LoadtestOptions& o, bool past) { o.channels = past ? 0 : 1; }},
      {"--server_shards",
       [](LoadtestOptions& o, bool past) { o.shards = kServerShardsMax + (past ? 1 : 0); }},
      {"--resolve_for", [](LoadtestOptions& o, bool past) {
         o.resolve_for = past ? -absl::Nanoseconds(1) : absl::ZeroDuration();
       }}};
  for (const Case& c : cases) {
    LoadtestOptions at_limit;
    c.set(at_limit, /*past=*/false);
    EXPECT_TRUE(Validate(at_limit).ok()) << c.flag << ": " << Validate(at_limit).status();
    LoadtestOptions past_limit;
    c.set(past_limit, /*past=*/true);
    const absl::StatusOr<LoadtestOptions> refused = Validate(past_limit);
    ASSERT_FALSE(refused.ok()) << c.flag;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << c.flag;
    EXPECT_THAT(refused.status().message(), HasSubstr(c.flag));
  }
}

TEST(ValidateOptionsTest, TheFirstBadFlagInTheDocumentedOrderIsTheOneReported) {
  LoadtestOptions given;
  given.concurrency = 0;
  given.channels = 0;
  EXPECT_EQ(Validate(given).status().message(), "--concurrency must be at least 1");
  // The texts are parsed before any bound is checked.
  EXPECT_THAT(ValidateOptions(given, "deposit=x", "any").status().message(), HasSubstr("--mix"));
}

TEST(ValidateOptionsTest, ARunIdMustLeaveRoomForTheAccountNumberWithinAnAccountId) {
  LoadtestOptions given;
  given.accounts = 1000;  // "<run_id>-1000": the run id may have 128 - 5 bytes.
  given.run_id = std::string(123, 'r');
  EXPECT_TRUE(Validate(given).ok());
  given.run_id = std::string(124, 'r');
  EXPECT_THAT(Validate(given).status().message(), HasSubstr("--run_id"));
  given.run_id = "has space";
  EXPECT_THAT(Validate(given).status().message(), HasSubstr("--run_id"));
}

TEST(IsValidAccountIdTest, AcceptsOneTo128AllowedBytes) {
  EXPECT_TRUE(IsValidAccountId("a"));
  EXPECT_TRUE(IsValidAccountId("A-z_0.9:x@y"));
  EXPECT_TRUE(IsValidAccountId(std::string(kAccountIdMaxBytes, 'a')));
  EXPECT_FALSE(IsValidAccountId(std::string(kAccountIdMaxBytes + 1, 'a')));
  EXPECT_FALSE(IsValidAccountId(""));
  EXPECT_FALSE(IsValidAccountId("a b"));
  EXPECT_FALSE(IsValidAccountId("a/b"));
}

TEST(AccountNameTest, PrefixesTheIndexWithTheRunId) {
  EXPECT_EQ(AccountName("run1", 0), "run1-acct-0");
  EXPECT_EQ(AccountName("x", 999), "x-acct-999");
}

}  // namespace
}  // namespace ledger
