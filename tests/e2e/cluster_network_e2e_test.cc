// Three replicas, each on a host of its own (a network namespace, tests/e2e/replica_network.h),
// and a network that fails between them (issue 32): a leader cut off from both followers, and a
// follower cut off until it is behind the leader's snapshot. The test's client reaches every
// replica throughout, as a client on its own machine would.
#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/e2e/ledgerd_cluster.h"
#include "tests/e2e/replica_network.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using testing_util::kEventTimeout;
using testing_util::LedgerdCluster;
using testing_util::OnReplicaNetwork;
using testing_util::WaitUntil;

// Snapshots every 16 entries (libraft keeps 128 behind one), so that a follower cut off for 200
// deposits is behind the leader's log.
class ClusterNetworkTest : public ::testing::Test,
                           protected OnReplicaNetwork,
                           protected LedgerdCluster {
 protected:
  ClusterNetworkTest()
      : LedgerdCluster({.flags = {"--raft_snapshot_entries=16"}, .hosts = network.hosts()}) {}
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(NeedReplicaNetwork());
    ASSERT_NO_FATAL_FAILURE(StartAll());
  }

  // Waits until replica i holds the newest entry replica `leader` holds now.
  void WaitUntilCaughtUp(int i, int leader) {
    const std::optional<double> target = LogPosition(leader);
    ASSERT_TRUE(target.has_value());
    ASSERT_TRUE(WaitUntil([&] { return LogPosition(i).value_or(0) >= *target; },
                          absl::StrCat("node ", i + 1, " catches up")));
  }
};

TEST_F(ClusterNetworkTest, ALeaderCutOffFromBothFollowersAcknowledgesNothingAndServesNoStaleRead) {
  EXPECT_EQ(DepositOnLeader("erin", 100, "n-1"), 100);
  const int old_leader = WaitForServing();
  ASSERT_GE(old_leader, 0);
  for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(WaitUntilCaughtUp(i, old_leader));
  network.CutOff(old_leader);

  // A write sent to the cut-off leader cannot reach a majority: it is never acknowledged.
  v1::DepositResponse response;
  const grpc::Status unacknowledged = Deposit(old_leader, "erin", 5, "n-cut", &response);
  EXPECT_FALSE(unacknowledged.ok()) << "balance " << response.balance();
  EXPECT_TRUE(unacknowledged.error_code() == grpc::StatusCode::UNAVAILABLE ||
              unacknowledged.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)
      << unacknowledged.error_code() << ": " << unacknowledged.error_message();

  // The two others elect a leader, which holds every acknowledged write and takes new ones: the
  // cut-off leader's last acknowledged write came before the cut.
  const int new_leader = WaitForServingOtherThan(old_leader);
  ASSERT_GE(new_leader, 0);
  ASSERT_EQ(Deposit(new_leader, "erin", 10, "n-2", &response).error_code(), grpc::StatusCode::OK);
  EXPECT_EQ(response.balance(), 110);

  // No stale read: the cut-off replica, asked again and again, never answers the balance it
  // holds (100). Once it has stepped down (and started again as a follower, its connections
  // refused meanwhile), it refuses NOT_LEADER, as a minority must.
  bool refused_not_leader = false;
  int asked = 0;
  const auto start = std::chrono::steady_clock::now();
  while (!refused_not_leader ||
         std::chrono::steady_clock::now() - start < std::chrono::seconds(3)) {
    int64_t balance = 0;
    const grpc::Status read = Balance(old_leader, "erin", &balance, std::chrono::milliseconds(500));
    ++asked;
    ASSERT_FALSE(read.ok()) << "the cut-off replica answered balance " << balance << " on read "
                            << asked;
    const std::optional<ErrorDetails> details = DecodeErrorDetails(read.error_details());
    if (read.error_code() == grpc::StatusCode::UNAVAILABLE && details.has_value() &&
        details->reason == v1::NOT_LEADER) {
      refused_not_leader = true;
    }
    ASSERT_LT(std::chrono::steady_clock::now() - start, kEventTimeout)
        << "the cut-off replica never refused NOT_LEADER; last: " << read.error_code() << " "
        << read.error_message() << "\n"
        << node(old_leader).log();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  // Healed: it rejoins as a follower and takes the new leader's log; the write it took alone is
  // settled by sending it again (same request_id) to the leader: applied at most once.
  network.Heal();
  ASSERT_NO_FATAL_FAILURE(WaitUntilCaughtUp(old_leader, new_leader));
  EXPECT_EQ(DepositOnLeader("erin", 5, "n-cut"), 115);
  EXPECT_EQ(DepositOnLeader("erin", 5, "n-cut"), 115);
  // The replicas' logs agree (the cut-off one's unacknowledged entry was replaced, never
  // applied).
  StopAllAndExpectEqualLogs();
}

// Healed, the follower catches up from the leader's log, or from its state when the leader has
// snapshotted past what the follower holds (which a loaded machine, taking fewer snapshots, may
// not have done); either way its log ends as the others'.
TEST_F(ClusterNetworkTest, AFollowerCutOffPastItsConnectionsCatchesUpWhenHealed) {
  EXPECT_EQ(DepositOnLeader("fay", 1, "f-0"), 1);
  const int leader = WaitForServing();
  ASSERT_GE(leader, 0);
  const int cut = (leader + 1) % 3;
  // Both followers hold the deposit: the leader reaches the one that stays, so the two are a
  // majority without the one cut off (just after the start, the leader may have heard from one
  // follower only, and a cut of that one leaves it without a quorum).
  for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(WaitUntilCaughtUp(i, leader));
  network.CutOff(cut);
  const auto cut_at = std::chrono::steady_clock::now();
  // The leader and the other follower are a majority: every deposit is acknowledged meanwhile.
  for (int n = 1; n <= 200; ++n) {
    v1::DepositResponse response;
    const grpc::Status status = Deposit(leader, "fay", 1, absl::StrCat("f-", n), &response);
    ASSERT_TRUE(status.ok()) << "deposit " << n << ": " << status.error_code() << " "
                             << status.error_message() << "\n"
                             << node(leader).log();
    ASSERT_EQ(response.balance(), n + 1);
  }
  // The cut-off follower cannot show a read is fresh: it refuses.
  int64_t balance = 0;
  EXPECT_EQ(Balance(cut, "fay", &balance).error_code(), grpc::StatusCode::UNAVAILABLE);
  // Cut off for longer than its connections last: what the leader sent it is lost (after a
  // shorter cut TCP delivers it late, and the follower needs no snapshot).
  std::this_thread::sleep_until(cut_at + testing_util::ReplicaNetwork::kConnectionsGiveUpAfter);
  EXPECT_LT(LogPosition(cut).value_or(0), 10);

  network.Heal();
  ASSERT_NO_FATAL_FAILURE(WaitUntilCaughtUp(cut, leader));
  const bool took_state = node(cut).log().find("the leader's state is now") != std::string::npos;
  // Pre-vote kept the cut-off follower from raising the term while it was alone: the leader
  // still leads.
  EXPECT_EQ(WaitForServing(), leader);
  // A replica that took the leader's state has a log that starts there; from there (or from the
  // start) it is the leader's.
  StopAllAndExpectEqualLogs();
  const std::map<uint64_t, std::string> log = LogOf(cut);
  ASSERT_FALSE(log.empty());
  if (took_state) {
    EXPECT_GT(log.begin()->first, 1u);
  }
}

}  // namespace
}  // namespace ledger
