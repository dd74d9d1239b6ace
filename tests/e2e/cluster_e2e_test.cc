// Three ledgerd replicas (--node_id, --peers) as three processes on loopback ports: only the
// leader serves; a follower refuses NOT_LEADER naming the leader's gRPC address; a SIGKILLed
// leader is replaced and nothing it acknowledged is lost; a leader paused (SIGSTOP) while the
// others elect another starts again as a follower in the same process when it resumes, unless it
// is asked to stop meanwhile; and in the end every replica's log (the mirror of what the cluster
// committed) is the same, entry for entry; and `ledgerctl cluster status` asked of one member
// names them all, the leader, and who is down.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/ledgerctl_output.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "proto/error_details.h"
#include "tests/e2e/ledgerd_cluster.h"
#include "tests/e2e/subprocess.h"
#include "tests/test_paths.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing_util::LedgerdCluster;
using testing_util::ProcessState;
using testing_util::WaitUntil;

class ClusterTest : public ::testing::Test, protected LedgerdCluster {};

TEST_F(ClusterTest, AFollowerRefusesNotLeaderNamingTheLeadersAddressAndAppliesNothing) {
  ASSERT_NO_FATAL_FAILURE(StartAll());
  const int leader = WaitForServing();
  ASSERT_GE(leader, 0);
  EXPECT_EQ(DepositOnLeader("alice", 100, "d-1"), 100);
  const int follower = (leader + 1) % 3;
  v1::DepositResponse response;
  const grpc::Status refused = Deposit(follower, "alice", 5, "d-2", &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  const std::optional<ErrorDetails> details = DecodeErrorDetails(refused.error_details());
  ASSERT_TRUE(details.has_value()) << refused.error_message();
  EXPECT_EQ(details->reason, v1::NOT_LEADER);
  EXPECT_EQ(MetadataValue(details->metadata, "node_id"), absl::StrCat(follower + 1));
  EXPECT_EQ(MetadataValue(details->metadata, "leader_id"), absl::StrCat(leader + 1));
  EXPECT_EQ(MetadataValue(details->metadata, "leader_address"), Address(leader));
  EXPECT_THAT(refused.error_message(), HasSubstr(Address(leader)));
  // Reads too: a follower serves none.
  int64_t balance = 0;
  EXPECT_EQ(Balance(follower, "alice", &balance).error_code(), grpc::StatusCode::UNAVAILABLE);
  // Nothing was applied: the leader still says 100, and d-2 on the leader is new.
  ASSERT_TRUE(Balance(leader, "alice", &balance).ok());
  EXPECT_EQ(balance, 100);
  EXPECT_EQ(DepositOnLeader("alice", 5, "d-2"), 105);
  // What the metrics say of it: one replica serves, and all know which (a follower that has
  // not heard from the leader yet, on a loaded machine, knows none for a moment).
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Metric(i, "ledger_replica_serving"), i == leader ? 1 : 0) << "node " << i + 1;
    EXPECT_EQ(Metric(i, "ledger_replica_leader"), i == leader ? 1 : 0) << "node " << i + 1;
    EXPECT_TRUE(WaitUntil([&] { return Metric(i, "ledger_replica_leader_id") == leader + 1; },
                          absl::StrCat("node ", i + 1, " knows the leader")));
    EXPECT_EQ(Metric(i, "ledger_replica_node_id"), i + 1);
    EXPECT_EQ(Metric(i, "ledger_replica_needs_state_through"), 0);
  }
  // The leader's reads went through barriers (the Balance above, and WaitForServing's probes).
  EXPECT_GE(Metric(leader, "ledger_replica_read_barriers_total").value_or(0), 1);
  EXPECT_EQ(Metric(follower, "ledger_replica_read_barriers_total"), 0);
}

TEST_F(ClusterTest, AKilledLeaderIsReplacedAndNothingItAcknowledgedIsLost) {
  ASSERT_NO_FATAL_FAILURE(StartAll());
  int64_t expected = 0;
  for (int n = 0; n < 20; ++n) expected = DepositOnLeader("acct", 10, absl::StrCat("k-", n));
  ASSERT_EQ(expected, 200);
  const int old_leader = WaitForServing();
  nodes_[old_leader]->Kill();
  const int leader = WaitForServing();
  ASSERT_NE(leader, old_leader);
  int64_t balance = 0;
  ASSERT_TRUE(Balance(leader, "acct", &balance).ok());
  EXPECT_EQ(balance, 200);
  // A retry of an acknowledged deposit is recognised by the new leader: applied once.
  EXPECT_EQ(DepositOnLeader("acct", 10, "k-19"), 200);
  EXPECT_EQ(DepositOnLeader("acct", 1, "after"), 201);

  // The old leader comes back as a follower, and names the new leader once it has heard from
  // it.
  ASSERT_TRUE(nodes_[old_leader]->Restart());
  EXPECT_TRUE(RefusesNamingTheLeader(old_leader, leader));
}

TEST_F(ClusterTest, APausedLeaderStartsAgainAsAFollowerAndEveryLogEndsTheSame) {
  ASSERT_NO_FATAL_FAILURE(StartAll());
  EXPECT_EQ(DepositOnLeader("bob", 7, "b-1"), 7);
  const int paused = WaitForServing();
  const pid_t pid = nodes_[paused]->pid();
  nodes_[paused]->Signal(SIGSTOP);
  // kill() returns before every thread has stopped: a call sent meanwhile is still answered.
  ASSERT_TRUE(WaitUntil([&] { return ProcessState(pid) == 'T'; }, "the leader is stopped"));
  // The others elect a leader and go on without it.
  EXPECT_EQ(DepositOnLeader("bob", 3, "b-2"), 10);
  const int leader = WaitForServing();
  ASSERT_NE(leader, paused);
  nodes_[paused]->Signal(SIGCONT);
  ASSERT_TRUE(nodes_[paused]->WaitForLog("no longer leads the cluster"));
  ASSERT_TRUE(nodes_[paused]->WaitForLog("starting again as a follower"));
  EXPECT_EQ(nodes_[paused]->pid(), pid);
  // Started again (the same process), it refuses and names the leader.
  EXPECT_TRUE(RefusesNamingTheLeader(paused, leader));
  EXPECT_EQ(DepositOnLeader("bob", 5, "b-3"), 15);

  // Every replica reaches the same newest entry; once stopped, their logs are equal.
  std::optional<double> newest;
  ASSERT_TRUE(WaitUntil(
      [&] {
        std::array<std::optional<double>, 3> positions;
        for (int i = 0; i < 3; ++i) positions[i] = LogPosition(i);
        newest = positions[0];
        return positions[0].has_value() && positions[0] == positions[1] &&
               positions[1] == positions[2];
      },
      "every replica holds the newest entry"));
  // Stopped together: each drains on its own.
  for (auto& node : nodes_) node->Signal(SIGTERM);
  for (auto& node : nodes_) EXPECT_EQ(node->WaitForExit(), 0) << node->log();
  const std::map<uint64_t, std::string> first = LogOf(0);
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(static_cast<double>(first.rbegin()->first), *newest);
  EXPECT_EQ(LogOf(1), first);
  EXPECT_EQ(LogOf(2), first);
}

// Stopping a cluster a replica at a time: once both followers are gone the leader loses its
// quorum and drains to start again as a follower, and a SIGTERM that comes during that drain
// stops it (it does not start again and run on).
TEST_F(ClusterTest, AStopAskedWhileTheLastLeaderDrainsEndsIt) {
  ASSERT_NO_FATAL_FAILURE(StartAll());
  EXPECT_EQ(DepositOnLeader("dave", 9, "v-1"), 9);
  const int leader = WaitForServing();
  ASSERT_GE(leader, 0);
  // Both followers at once (each drains for as long as an idle client takes to read its GOAWAY).
  for (int i = 0; i < 3; ++i) {
    if (i != leader) nodes_[i]->Signal(SIGTERM);
  }
  for (int i = 0; i < 3; ++i) {
    if (i == leader) continue;
    EXPECT_EQ(nodes_[i]->WaitForExit(), 0) << nodes_[i]->log();
  }
  ASSERT_TRUE(nodes_[leader]->WaitForLog("draining, to start again as a follower"))
      << nodes_[leader]->log();
  nodes_[leader]->Signal(SIGTERM);
  EXPECT_EQ(nodes_[leader]->WaitForExit(), 0) << nodes_[leader]->log();
}

TEST_F(ClusterTest, ALeaderCutOffFromBothFollowersServesNoRead) {
  ASSERT_NO_FATAL_FAILURE(StartAll());
  EXPECT_EQ(DepositOnLeader("carol", 40, "c-1"), 40);
  const int leader = WaitForServing();
  int64_t balance = 0;
  ASSERT_TRUE(Balance(leader, "carol", &balance).ok());
  EXPECT_EQ(balance, 40);
  // Both followers paused: the leader can no longer show that it leads, so it must not answer a
  // read from what it holds (the others could be electing a leader that takes writes).
  for (int i = 0; i < 3; ++i) {
    if (i == leader) continue;
    node(i).Signal(SIGSTOP);
    ASSERT_TRUE(WaitUntil([&] { return ProcessState(node(i).pid()) == 'T'; }, "stopped"));
  }
  const grpc::Status refused = Balance(leader, "carol", &balance);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  const std::optional<ErrorDetails> details = DecodeErrorDetails(refused.error_details());
  ASSERT_TRUE(details.has_value()) << refused.error_message();
  EXPECT_EQ(details->reason, v1::NOT_LEADER);
  for (int i = 0; i < 3; ++i) {
    if (i != leader) node(i).Signal(SIGCONT);
  }
  // Healed: a leader (this one or another) serves the balance again, unchanged.
  EXPECT_TRUE(WaitUntil(
      [&] {
        const int serving = Serving();
        return serving >= 0 && Balance(serving, "carol", &balance).ok() && balance == 40;
      },
      "a leader serves the balance again"));
}

// Snapshots every 16 entries (libraft keeps 128 behind one), so that a replica stopped for 200
// deposits is behind the leader's log.
class ClusterSnapshotTest : public ::testing::Test, protected LedgerdCluster {
 protected:
  ClusterSnapshotTest() : LedgerdCluster({.flags = {"--raft_snapshot_entries=16"}}) {}
};

TEST_F(ClusterSnapshotTest, AFollowerBehindTheLeadersLogFetchesItsStateAndCatchesUp) {
  ASSERT_NO_FATAL_FAILURE(StartAll());
  EXPECT_EQ(DepositOnLeader("dora", 1, "s-0"), 1);
  const int leader = WaitForServing();
  const int behind = (leader + 1) % 3;
  const int other = (leader + 2) % 3;
  EXPECT_EQ(node(behind).Stop(), 0) << node(behind).log();
  for (int n = 1; n <= 200; ++n) DepositOnLeader("dora", 1, absl::StrCat("s-", n));
  ASSERT_TRUE(node(behind).Restart());
  ASSERT_TRUE(node(behind).WaitForLog("fetched the leader's state")) << node(behind).log();
  ASSERT_TRUE(node(behind).WaitForLog("the leader's state is now")) << node(behind).log();
  // Started again on it, the replica follows: it reaches the leader's newest entry.
  EXPECT_EQ(DepositOnLeader("dora", 1, "s-after"), 202);
  ASSERT_TRUE(WaitUntil(
      [&] {
        const std::optional<double> theirs = LogPosition(leader);
        return theirs.has_value() && LogPosition(behind) == theirs && LogPosition(other) == theirs;
      },
      "the replica that was behind holds the newest entry"));
  EXPECT_THAT(node(behind).log(), Not(HasSubstr("could not fetch")));
  // Its log, from where the leader's state began, is the others' entry for entry.
  for (int i = 0; i < 3; ++i) node(i).Signal(SIGTERM);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(node(i).WaitForExit(), 0) << node(i).log();
  const std::map<uint64_t, std::string> restored = LogOf(behind);
  const std::map<uint64_t, std::string> full = LogOf(other);
  ASSERT_FALSE(restored.empty());
  EXPECT_EQ(restored.rbegin()->first, full.rbegin()->first);
  for (const auto& [position, payload] : restored) {
    ASSERT_TRUE(full.contains(position)) << position;
    EXPECT_EQ(full.at(position), payload) << position;
  }
}

}  // namespace
}  // namespace ledger

namespace ledger {
namespace {

// What `ledgerctl --target=TARGET cluster status --json` printed, one line per member.
struct ClusterStatusRun {
  int exit_code = -1;
  std::vector<ctl::ClusterMemberLine> members;
  std::string output;
};

ClusterStatusRun RunClusterStatus(const std::string& target, const std::string& flag) {
  // JSON lines on stdout; stderr (a sanitizer's report, say) is not among them.
  testing_util::Subprocess ledgerctl({"/bin/sh", "-c",
                                      testing_util::LedgerctlPath() + " --target=" + target +
                                          " cluster status " + flag +
                                          (flag == "--json" ? " 2>/dev/null" : "")});
  ClusterStatusRun run;
  run.exit_code = ledgerctl.WaitForExit().value_or(-1);
  run.output = ledgerctl.output();
  if (flag != "--json") return run;
  for (const absl::string_view line : absl::StrSplit(run.output, '\n', absl::SkipEmpty())) {
    ctl::ClusterMemberLine member;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(std::string(line), &member).ok())
        << line;
    run.members.push_back(member);
  }
  return run;
}

TEST_F(ClusterTest, ClusterStatusFromOneFollowerNamesEveryMemberTheLeaderAndWhoIsDown) {
  ASSERT_NO_FATAL_FAILURE(StartAll());
  for (int n = 0; n < 5; ++n) DepositOnLeader("erin", 1, absl::StrCat("s-", n));
  const int leader = WaitForServing();
  ASSERT_GE(leader, 0);
  const int follower = (leader + 1) % 3;
  const int other = (leader + 2) % 3;
  const double term = Metric(leader, "ledger_replica_term").value_or(-1);
  // Each member has applied the five deposits (and learnt that they are committed).
  const double committed = Metric(leader, "ledger_replica_commit_position").value_or(-1);
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (int i = 0; i < 3; ++i) {
          if (Metric(i, "ledger_replica_applied_position").value_or(0) < committed) return false;
        }
        return true;
      },
      "every member applies what the leader committed"));

  // One follower's address is enough: the others come from its answer.
  ClusterStatusRun run = RunClusterStatus(Address(follower), "--json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ASSERT_EQ(run.members.size(), 3u) << run.output;
  const std::string ledger_id = run.members[0].ledger_id();
  EXPECT_EQ(ledger_id.size(), 32u);
  for (int i = 0; i < 3; ++i) {
    const ctl::ClusterMemberLine& member = run.members[i];
    EXPECT_EQ(member.ledger_id(), ledger_id);
    EXPECT_EQ(member.node_id(), static_cast<uint64_t>(i + 1));
    EXPECT_EQ(member.address(), Address(i));
    EXPECT_EQ(member.role(), i == leader ? "leader" : "follower") << run.output;
    EXPECT_EQ(member.term(), static_cast<uint64_t>(term));
    EXPECT_GE(member.applied_position(), static_cast<uint64_t>(committed));
    EXPECT_GE(member.replicated_position(), static_cast<uint64_t>(committed));
    EXPECT_TRUE(member.has_behind());
    EXPECT_FALSE(member.has_error());
  }

  // Named by another address than its --peer_clients one: asked there only, shown there.
  const std::string alias =
      absl::StrCat("localhost:", Address(follower).substr(Address(follower).rfind(':') + 1));
  run = RunClusterStatus(alias, "--json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ASSERT_EQ(run.members.size(), 3u) << run.output;
  EXPECT_EQ(run.members[follower].address(), alias);

  ClusterStatusRun text = RunClusterStatus(Address(other), "--deadline=5s");
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output,
              HasSubstr(absl::StrCat("ledger ", ledger_id, ": node ", leader + 1, " leads in term ",
                                     static_cast<uint64_t>(term), " and serves")));
  // Its header is the one docs/operations.md shows.
  std::ifstream operations(testing_util::SourceDir() + "/docs/operations.md");
  std::string doc_header;
  for (std::string line; std::getline(operations, line);) {
    if (absl::StartsWith(absl::StripLeadingAsciiWhitespace(line), "NODE  ADDRESS")) {
      doc_header = std::string(absl::StripLeadingAsciiWhitespace(line));
    }
  }
  ASSERT_FALSE(doc_header.empty());
  EXPECT_THAT(text.output, HasSubstr("\n" + doc_header + "\n"));

  // A follower down: named down, with why and with what the leader knows of its log; exit 5.
  nodes_[other]->Kill();
  run = RunClusterStatus(Address(follower), "--json");
  EXPECT_EQ(run.exit_code, 5) << run.output;
  ASSERT_EQ(run.members.size(), 3u) << run.output;
  const ctl::ClusterMemberLine& down = run.members[other];
  EXPECT_EQ(down.role(), "down");
  EXPECT_THAT(down.error(), HasSubstr("UNAVAILABLE"));
  EXPECT_GE(down.replicated_position(), static_cast<uint64_t>(committed));
  EXPECT_FALSE(down.has_term());
  EXPECT_EQ(run.members[leader].role(), "leader");
}

// A replica whose data directory holds another ledger (here: made again by `ledgerd init`
// without --ledger_id) is refused before libraft starts: it never joins the elections.
TEST_F(ClusterTest, AReplicaOfAnotherLedgerIsRefusedBeforeItJoins) {
  ASSERT_NO_FATAL_FAILURE(StartAll());
  EXPECT_EQ(DepositOnLeader("frank", 3, "f-1"), 3);
  const int leader = WaitForServing();
  ASSERT_GE(leader, 0);
  const int other = (leader + 1) % 3;
  ASSERT_NO_FATAL_FAILURE(MakeAnotherLedgersReplica(other));

  EXPECT_FALSE(nodes_[other]->Restart());
  EXPECT_NE(nodes_[other]->WaitForExit(), std::optional<int>(0));
  EXPECT_THAT(nodes_[other]->log(), HasSubstr("is not a replica of this cluster"));
  EXPECT_THAT(nodes_[other]->log(), HasSubstr("`ledgerd init --ledger_id=" + ledger_id_ + "`"));
  EXPECT_FALSE(std::filesystem::exists(nodes_[other]->data_dir() + "/raft/metadata1"))
      << "libraft started on it";
  // The other two go on, and keep what they had.
  EXPECT_EQ(DepositOnLeader("frank", 4, "f-2"), 7);
}

}  // namespace
}  // namespace ledger
