// Three ledgerd replicas (--node_id, --peers) as three processes on loopback ports: only the
// leader serves; a follower refuses NOT_LEADER naming the leader's gRPC address; a SIGKILLed
// leader is replaced and nothing it acknowledged is lost; a leader paused (SIGSTOP) while the
// others elect another starts again as a follower in the same process when it resumes; and in
// the end every replica's log (the mirror of what the cluster committed) is the same, entry for
// entry.
#include <signal.h>

#include <array>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ledger/v1/ledger.grpc.pb.h"
#include "proto/error_details.h"
#include "storage/local_log.h"
#include "tests/e2e/ledgerd_process.h"
#include "tests/http_get.h"
#include "tests/metrics_text.h"
#include "tests/unused_port.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;
using testing_util::HttpGet;
using testing_util::LedgerdProcess;
using testing_util::SampleValue;
using testing_util::UnusedPort;
using testing_util::WaitUntil;

// The state letter of /proc/PID/stat ('T' once stopped by a signal), or 0.
char ProcessState(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(stat, line);
  const size_t name_end = line.rfind(')');
  return name_end == std::string::npos || name_end + 2 >= line.size() ? 0 : line[name_end + 2];
}

class ClusterTest : public ::testing::Test {
 protected:
  ClusterTest() {
    std::vector<std::string> peers;
    std::vector<std::string> clients;
    for (int i = 0; i < 3; ++i) {
      grpc_ports_[i] = UnusedPort();
      peers.push_back(absl::StrCat(i + 1, "=127.0.0.1:", UnusedPort()));
      clients.push_back(absl::StrCat(i + 1, "=127.0.0.1:", grpc_ports_[i]));
    }
    for (int i = 0; i < 3; ++i) {
      nodes_[i] = std::make_unique<LedgerdProcess>(std::vector<std::string>{
          absl::StrCat("--node_id=", i + 1), "--peers=" + absl::StrJoin(peers, ","),
          "--peer_clients=" + absl::StrJoin(clients, ","),
          absl::StrCat("--listen=127.0.0.1:", grpc_ports_[i]),
          // Fixed, so that a replica that starts again in its process keeps its address.
          absl::StrCat("--metrics_listen=127.0.0.1:", UnusedPort()), "--shards=2",
          "--shutdown_grace=2s"});
      // Reconnects soon after a replica starts again (gRPC's first backoff is a second).
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
      args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
      args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
      stubs_[i] = v1::Ledger::NewStub(
          grpc::CreateCustomChannel(Address(i), grpc::InsecureChannelCredentials(), args));
    }
  }

  std::string Address(int i) const { return absl::StrCat("127.0.0.1:", grpc_ports_[i]); }

  void StartAll() {
    for (auto& node : nodes_) ASSERT_TRUE(node->Start());
  }

  grpc::Status Deposit(int i, const std::string& account, int64_t amount,
                       const std::string& request_id, v1::DepositResponse* response) {
    v1::DepositRequest request;
    request.set_account_id(account);
    request.set_amount(amount);
    request.set_request_id(request_id);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    return stubs_[i]->Deposit(&context, request, response);
  }

  // `deadline` short for a probe, which a paused replica never answers.
  grpc::Status Balance(int i, const std::string& account, int64_t* balance,
                       std::chrono::milliseconds deadline = std::chrono::seconds(5)) {
    v1::BalanceRequest request;
    request.set_account_id(account);
    v1::BalanceResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + deadline);
    grpc::Status status = stubs_[i]->Balance(&context, request, &response);
    *balance = response.balance();
    return status;
  }

  // The replica that serves: the one whose Balance is not refused NOT_LEADER. -1 while none
  // does.
  int Serving() {
    for (int i = 0; i < 3; ++i) {
      if (!nodes_[i]->running()) continue;
      int64_t balance = 0;
      const grpc::Status status = Balance(i, "nobody", &balance, std::chrono::milliseconds(300));
      if (status.error_code() == grpc::StatusCode::NOT_FOUND) return i;
    }
    return -1;
  }
  int WaitForServing() {
    int leader = -1;
    EXPECT_TRUE(WaitUntil([&] { return (leader = Serving()) >= 0; }, "a replica serves"));
    return leader;
  }

  // Deposits through whichever replica serves, retrying (same request_id: at most once) while
  // none does.
  int64_t DepositOnLeader(const std::string& account, int64_t amount,
                          const std::string& request_id) {
    v1::DepositResponse response;
    EXPECT_TRUE(WaitUntil(
        [&] {
          const int leader = Serving();
          return leader >= 0 && Deposit(leader, account, amount, request_id, &response).ok();
        },
        absl::StrCat("the leader applies ", request_id)));
    return response.balance();
  }

  // Whether replica i comes to refuse a Deposit NOT_LEADER naming `leader`'s address (at once,
  // or after it has heard from the leader).
  bool RefusesNamingTheLeader(int i, int leader) {
    return WaitUntil(
        [&] {
          v1::DepositResponse response;
          const grpc::Status refused = Deposit(i, "acct", 1, "refused", &response);
          const std::optional<ErrorDetails> details = DecodeErrorDetails(refused.error_details());
          return refused.error_code() == grpc::StatusCode::UNAVAILABLE && details.has_value() &&
                 details->reason == v1::NOT_LEADER &&
                 MetadataValue(details->metadata, "leader_address") == Address(leader);
        },
        absl::StrCat("node ", i + 1, " refuses NOT_LEADER naming node ", leader + 1));
  }

  // ledger_log_position of replica i (the newest committed entry it has), from /metrics.
  std::optional<double> LogPosition(int i) {
    std::optional<testing_util::HttpResponse> scrape =
        HttpGet(nodes_[i]->metrics_port(), "/metrics");
    if (!scrape.has_value()) return std::nullopt;
    return SampleValue(scrape->body, "ledger_log_position");
  }

  // Every committed entry replica i's log holds, by position (read once it has stopped).
  std::map<uint64_t, std::string> LogOf(int i) {
    storage::LocalLogOptions options;
    options.dir = nodes_[i]->data_dir() + "/ledger_log";
    absl::StatusOr<std::unique_ptr<storage::LocalLog>> log = storage::LocalLog::Open(options);
    EXPECT_TRUE(log.ok()) << log.status();
    std::map<uint64_t, std::string> entries;
    if (!log.ok()) return entries;
    EXPECT_TRUE((*log)
                    ->ReadFrom((*log)->first_position(),
                               [&](uint64_t position, absl::string_view payload) {
                                 entries[position] = std::string(payload);
                                 return absl::OkStatus();
                               })
                    .ok());
    return entries;
  }

  std::array<int, 3> grpc_ports_{};
  std::array<std::unique_ptr<LedgerdProcess>, 3> nodes_;
  std::array<std::unique_ptr<v1::Ledger::Stub>, 3> stubs_;
};

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

}  // namespace
}  // namespace ledger
