#include "client/loadtest_options.h"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "client/leader_router.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
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

TEST(ValidateOptionsTest, ATargetListIsParsedAddressByAddressInOrder) {
  LoadtestOptions given;
  given.target = ":6001,127.0.0.1:6002,[::1]:6003";
  absl::StatusOr<LoadtestOptions> options = Validate(given);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->targets,
            (std::vector<std::string>{"localhost:6001", "127.0.0.1:6002", "[::1]:6003"}));
  EXPECT_EQ(options->target, "localhost:6001,127.0.0.1:6002,[::1]:6003");
}

TEST(ValidateOptionsTest, OneTargetIsTheListOfOne) {
  LoadtestOptions given;
  given.target = "127.0.0.1:7000";
  absl::StatusOr<LoadtestOptions> options = Validate(given);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->targets, std::vector<std::string>{"127.0.0.1:7000"});
  EXPECT_EQ(options->target, "127.0.0.1:7000");
}

TEST(ValidateOptionsTest, ATargetListTakesSixteenAddressesAndRefusesSeventeenOrAnEmptyOne) {
  const auto list_of = [](size_t count) {
    std::string list;
    for (size_t i = 0; i < count; ++i) list += (i == 0 ? ":" : ",:") + std::to_string(6000 + i);
    return list;
  };
  LoadtestOptions given;
  given.target = list_of(kTargetsMax);
  EXPECT_TRUE(Validate(given).ok());
  given.target = list_of(kTargetsMax + 1);
  EXPECT_THAT(Validate(given).status().message(), HasSubstr("at most 16"));
  given.target = ":6000,,:6001";
  EXPECT_THAT(Validate(given).status().message(), HasSubstr("--target"));
  given.target = ":6000,nonsense:port";
  EXPECT_THAT(Validate(given).status().message(), HasSubstr("--target"));
}

// LeaderRouter over channels that never connect (nothing listens; a channel stays IDLE until a
// call wants it), so that only the refusals and the lost calls move it.
class LeaderRouterTest : public ::testing::Test {
 protected:
  static LeaderRouter NewRouter(const std::vector<std::string>& targets) {
    return LeaderRouter(targets, /*channels_per_address=*/2,
                        [](const std::string& address, int32_t) {
                          return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
                        });
  }
  // A NOT_LEADER refusal naming `leader_address` ("": none known, with the server's 300 ms).
  static CallOutcome Refusal(const std::string& leader_address) {
    CallOutcome refusal;
    refusal.code = grpc::StatusCode::UNAVAILABLE;
    refusal.reason = v1::NOT_LEADER;
    refusal.from_ledgerd = true;
    refusal.effect = CallEffect::kNotApplied;
    if (leader_address.empty()) {
      refusal.retry_delay = std::chrono::milliseconds(300);
    } else {
      refusal.metadata = {{"node_id", "2"}, {"leader_id", "3"}, {"leader_address", leader_address}};
    }
    return refusal;
  }
  const std::vector<std::string> members_ = {"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"};
};

TEST_F(LeaderRouterTest, CallsGoToTheFirstTargetWithItsChannels) {
  LeaderRouter router = NewRouter(members_);
  EXPECT_EQ(router.Current()->address, "127.0.0.1:1");
  EXPECT_EQ(router.Current()->stubs.size(), 2u);
  ASSERT_EQ(router.targets().size(), 3u);
  EXPECT_EQ(router.targets()[2]->address, "127.0.0.1:3");
}

TEST_F(LeaderRouterTest, ARefusalNamingTheLeaderMovesEveryCallThereAtOnce) {
  LeaderRouter router = NewRouter(members_);
  const LeaderRouter::Route* follower = router.Current();
  const LeaderRouter::Hop hop = router.Follow(follower, Refusal("127.0.0.1:3"));
  EXPECT_EQ(hop.route->address, "127.0.0.1:3");
  EXPECT_EQ(hop.wait, std::chrono::milliseconds(0));
  EXPECT_EQ(router.Current(), hop.route);
  // Another worker's refusal by the same follower finds the leader known: no second move.
  EXPECT_EQ(router.Follow(follower, Refusal("127.0.0.1:3")).route, hop.route);
  EXPECT_EQ(router.Current(), hop.route);
}

TEST_F(LeaderRouterTest, ALeaderNamedOutsideTheTargetsGetsItsOwnChannels) {
  LeaderRouter router = NewRouter(members_);
  const LeaderRouter::Hop hop = router.Follow(router.Current(), Refusal("localhost:3"));
  EXPECT_EQ(hop.route->address, "localhost:3");
  EXPECT_EQ(hop.route->stubs.size(), 2u);
}

TEST_F(LeaderRouterTest, NoLeaderKnownMovesToTheNextTargetAfterTheRefusalsDelay) {
  LeaderRouter router = NewRouter(members_);
  const LeaderRouter::Route* first = router.Current();
  const LeaderRouter::Hop hop = router.Follow(first, Refusal(""));
  EXPECT_EQ(hop.route->address, "127.0.0.1:2");
  EXPECT_EQ(hop.wait, std::chrono::milliseconds(300));
  // A stale refusal by the first does not move it on again.
  EXPECT_EQ(router.Follow(first, Refusal("")).route->address, "127.0.0.1:2");
  EXPECT_EQ(router.Follow(hop.route, Refusal("")).route->address, "127.0.0.1:3");
  EXPECT_EQ(router.Follow(router.Current(), Refusal("")).route->address, "127.0.0.1:1");
}

TEST_F(LeaderRouterTest, ALostLeaderIsPassedOverEvenWhenAFollowerStillNamesIt) {
  LeaderRouter router = NewRouter(members_);
  const LeaderRouter::Route* killed = router.Current();
  router.Unanswered(killed);
  const LeaderRouter::Route* second = router.Current();
  EXPECT_EQ(second->address, "127.0.0.1:2");
  router.Unanswered(killed);  // Another call lost with it: no second move.
  EXPECT_EQ(router.Current(), second);
  // The second has not noticed: it names the killed one. The hop goes to the third instead.
  const LeaderRouter::Hop hop = router.Follow(second, Refusal("127.0.0.1:1"));
  EXPECT_EQ(hop.route->address, "127.0.0.1:3");
  EXPECT_EQ(hop.wait, kDownLeaderNamedWait);
  // From the third, with no leader known, the next target that is not down is the second.
  EXPECT_EQ(router.Follow(hop.route, Refusal("")).route->address, "127.0.0.1:2");
  // Once it answers again, the killed one is a leader to follow.
  LeaderRouter::Answered(killed);
  EXPECT_EQ(router.Follow(router.Current(), Refusal("127.0.0.1:1")).route, killed);
}

// A call that waited out its deadline tells a missing server (a paused one) from a busy one by
// whether the server answered anything meanwhile.
TEST_F(LeaderRouterTest, AnsweredSinceTellsWhetherTheServerAnsweredAnyCallMeanwhile) {
  LeaderRouter router = NewRouter(members_);
  const LeaderRouter::Route* leader = router.Current();
  const auto sent = std::chrono::steady_clock::now();
  EXPECT_FALSE(LeaderRouter::AnsweredSince(leader, sent));  // Never answered.
  LeaderRouter::Answered(leader);
  EXPECT_TRUE(LeaderRouter::AnsweredSince(leader, sent));
  // Sent after that answer, and nothing answered since (the time is kept to a millisecond).
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_FALSE(LeaderRouter::AnsweredSince(leader, std::chrono::steady_clock::now()));
  // Another route's answers are not this one's.
  LeaderRouter::Answered(router.targets()[1]);
  EXPECT_FALSE(LeaderRouter::AnsweredSince(
      leader, std::chrono::steady_clock::now() - std::chrono::milliseconds(2)));
}

TEST_F(LeaderRouterTest, OneTargetStaysWhereItIsWhenACallIsLost) {
  LeaderRouter router = NewRouter({"127.0.0.1:1"});
  const LeaderRouter::Route* only = router.Current();
  router.Unanswered(only);
  EXPECT_EQ(router.Current(), only);
  EXPECT_EQ(router.Follow(only, Refusal("")).route, only);
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
