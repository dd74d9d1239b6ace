// A clock jump on one machine of the cluster (issue 32's fault schedule): three replicas on
// loopback, each with a wall clock the test moves while it runs (tests/clock_shift/).
//
// What a jump may change: the times ledgerd records (History's, from the leader's wall clock).
// What it must not change: who leads, how soon a new leader serves, and that every acknowledged
// write is kept. Raft's timers run on the monotonic clock; ledgerd's own waits did not: Abseil's
// timed waits (Debian 12's) sleep until a wall-clock deadline, and the kernel compares it with
// the true clock. With a replica's clock moved an hour ahead, every such wait it began lasted an
// hour more; a real machine whose clock is set back an hour stretches the waits in progress the
// same way. Measured before base/steady_wait.h: the replica elected after the leader was killed
// (ledger_replica_leader_id named it) refused every call NOT_LEADER, its leadership poll asleep
// for the hour.
#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/e2e/ledgerd_cluster.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using testing_util::LedgerdCluster;
using testing_util::WaitUntil;

class ClusterClockJumpTest : public ::testing::Test, protected LedgerdCluster {
 protected:
  ClusterClockJumpTest() : LedgerdCluster({.shiftable_clocks = true}) {}

  // The time History gives the newest entry of `account` on replica i.
  std::optional<absl::Time> NewestEntryTime(int i, const std::string& account) {
    v1::HistoryRequest request;
    request.set_account_id(account);
    request.set_page_size(1);
    v1::HistoryResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    const grpc::Status status = stubs_[i]->History(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    if (!status.ok() || response.entries().empty()) return std::nullopt;
    const google::protobuf::Timestamp& time = response.entries(0).time();
    return absl::FromUnixSeconds(time.seconds()) + absl::Nanoseconds(time.nanos());
  }

  // Every replica holds the newest entry the leader holds: a quorum without any one of them.
  void WaitUntilEveryReplicaHoldsTheLeadersLog(int leader) {
    const std::optional<double> target = LogPosition(leader);
    ASSERT_TRUE(target.has_value());
    ASSERT_TRUE(WaitUntil(
        [&] {
          for (int i = 0; i < 3; ++i) {
            if (LogPosition(i).value_or(0) < *target) return false;
          }
          return true;
        },
        "every replica holds the leader's log"));
  }

  // Both followers' clocks moved by `shift`, then the leader killed: one of them leads, serves
  // within seconds, keeps what the old leader acknowledged, and stamps History with its clock.
  void KillTheLeaderAfterTheFollowersClocksJumped(absl::Duration shift) {
    ASSERT_NO_FATAL_FAILURE(StartAll());
    ASSERT_EQ(DepositOnLeader("acct", 10, "before"), 10);
    const int old_leader = WaitForServing();
    ASSERT_GE(old_leader, 0);
    ASSERT_NO_FATAL_FAILURE(WaitUntilEveryReplicaHoldsTheLeadersLog(old_leader));
    for (int i = 0; i < 3; ++i) {
      if (i != old_leader) ShiftClock(i, shift);
    }
    // Abseil's clock reads the system's again within about 2 s: by then every reader sees it.
    std::this_thread::sleep_for(std::chrono::seconds(3));
    node(old_leader).Kill();
    // kEventTimeout (30 s); the failure this guards against lasted the hour of the shift.
    const int leader = WaitForServingOtherThan(old_leader);
    ASSERT_GE(leader, 0);
    v1::DepositResponse response;
    ASSERT_TRUE(Deposit(leader, "acct", 5, "after", &response).ok());
    EXPECT_EQ(response.balance(), 15);
    const std::optional<absl::Time> stamped = NewestEntryTime(leader, "acct");
    ASSERT_TRUE(stamped.has_value());
    EXPECT_LT(absl::AbsDuration(*stamped - (absl::Now() + shift)), absl::Minutes(1))
        << "History's time is the leader's clock, moved by " << shift;

    // The old leader, its clock not moved, joins as a follower; every log ends the same.
    ASSERT_TRUE(node(old_leader).Restart());
    EXPECT_TRUE(RefusesNamingTheLeader(old_leader, leader));
    ASSERT_EQ(DepositOnLeader("acct", 1, "last"), 16);
    StopAllAndExpectEqualLogs();
  }
};

TEST_F(ClusterClockJumpTest, AReplicaWhoseClockJumpedAnHourAheadIsElectedAndServes) {
  KillTheLeaderAfterTheFollowersClocksJumped(absl::Hours(1));
}

TEST_F(ClusterClockJumpTest, AReplicaWhoseClockJumpedAnHourBackIsElectedAndServes) {
  KillTheLeaderAfterTheFollowersClocksJumped(-absl::Hours(1));
}

// The leader's own clock jumps an hour ahead and then two hours back while it serves: it keeps
// the lead and acknowledges every write; History's times follow its clock, back as well.
TEST_F(ClusterClockJumpTest, ALeaderWhoseClockJumpsBothWaysKeepsLeadingAndServing) {
  ASSERT_NO_FATAL_FAILURE(StartAll());
  ASSERT_EQ(DepositOnLeader("acct", 1, "first"), 1);
  const int leader = WaitForServing();
  ASSERT_GE(leader, 0);
  const double term = Metric(leader, "ledger_replica_term").value_or(-1);
  int64_t expected = 1;
  for (const absl::Duration shift : {absl::Hours(1), -absl::Hours(1)}) {
    ShiftClock(leader, shift);
    std::this_thread::sleep_for(std::chrono::seconds(3));
    for (int n = 0; n < 20; ++n) {
      v1::DepositResponse response;
      const std::string id = absl::StrCat("shift-", absl::FormatDuration(shift), "-", n);
      ASSERT_TRUE(Deposit(leader, "acct", 1, id, &response).ok()) << id;
      EXPECT_EQ(response.balance(), ++expected);
    }
    const std::optional<absl::Time> stamped = NewestEntryTime(leader, "acct");
    ASSERT_TRUE(stamped.has_value());
    EXPECT_LT(absl::AbsDuration(*stamped - (absl::Now() + shift)), absl::Minutes(1));
  }
  EXPECT_EQ(Serving(), leader);
  EXPECT_EQ(Metric(leader, "ledger_replica_term").value_or(-2), term);
  ShiftClock(leader, absl::ZeroDuration());
  StopAllAndExpectEqualLogs();
}

}  // namespace
}  // namespace ledger
