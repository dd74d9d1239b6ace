// Test harness: `LedgerdCluster`, three ledgerd replicas (--node_id, --peers) as three processes
// (LedgerdProcess each) on loopback ports, or each on its own address in its own network
// namespace (`ReplicaHosts`, from tests/e2e/replica_network.h), with what the cluster tests ask of
// them: which one serves, a deposit through whichever does, the refusals of the others, each
// replica's newest log position (from /metrics) and, once stopped, its log entry by entry.
#ifndef LEDGER_TESTS_E2E_LEDGERD_CLUSTER_H_
#define LEDGER_TESTS_E2E_LEDGERD_CLUSTER_H_

#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ledger/v1/ledger.grpc.pb.h"
#include "proto/error_details.h"
#include "storage/local_log.h"
#include "tests/clock_shift/clock_shift_file.h"
#include "tests/e2e/ledgerd_process.h"
#include "tests/e2e/subprocess.h"
#include "tests/http_get.h"
#include "tests/metrics_text.h"
#include "tests/scratch_dir.h"
#include "tests/test_paths.h"
#include "tests/unused_port.h"
#include "tests/wait_until.h"

namespace ledger::testing_util {

// The state letter of /proc/PID/stat ('T' once stopped by a signal), or 0.
inline char ProcessState(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(stat, line);
  const size_t name_end = line.rfind(')');
  return name_end == std::string::npos || name_end + 2 >= line.size() ? 0 : line[name_end + 2];
}

// Where each replica runs: its IPv4 address, and the named network namespace it runs in (this
// process's when empty). This process must reach every address.
struct ReplicaHosts {
  std::array<std::string, 3> address{"127.0.0.1", "127.0.0.1", "127.0.0.1"};
  std::array<std::string, 3> netns;
};

// How LedgerdCluster starts its three replicas.
struct ClusterOptions {
  std::vector<std::string> flags{};  // Added to every replica's.
  ReplicaHosts hosts{};
  // Each replica's wall clock can be moved while it runs (ShiftClock).
  bool shiftable_clocks = false;
  // What the test (its calls, and the harness's health checks) reaches the replicas with;
  // plaintext when null.
  std::shared_ptr<grpc::ChannelCredentials> credentials{};
  // When above 0: the replicas reach each other's Raft port through the delay relay
  // (tests/relay/delay_proxy.cc), which holds every byte this many microseconds each way.
  // Each replica's relay runs beside it (in its namespace) on the address --peers names, and
  // forwards to the replica's --raft_listen on its loopback; so a cut between two hosts
  // (ReplicaNetwork) still cuts their Raft traffic, and a round trip between two replicas takes
  // twice this. This kernel has no netem.
  int raft_delay_us = 0;
};

class LedgerdCluster {
 public:
  explicit LedgerdCluster(ClusterOptions options = {}) : hosts_(options.hosts) {
    std::vector<std::string> peers;
    std::vector<std::string> clients;
    std::array<std::string, 3> raft_listen;
    for (int i = 0; i < 3; ++i) {
      grpc_ports_[i] = UnusedPort();
      const std::string peer = absl::StrCat(hosts_.address[i], ":", UnusedPort());
      peers.push_back(absl::StrCat(i + 1, "=", peer));
      clients.push_back(absl::StrCat(i + 1, "=", Address(i)));
      if (options.raft_delay_us <= 0) continue;
      raft_listen[i] = absl::StrCat("127.0.0.1:", UnusedPort());
      std::vector<std::string> relay{DelayProxyPath(), peer, raft_listen[i],
                                     std::to_string(options.raft_delay_us)};
      if (!hosts_.netns[i].empty()) {
        relay.insert(relay.begin(), {"/bin/ip", "netns", "exec", hosts_.netns[i]});
      }
      relays_[i] = std::make_unique<Subprocess>(std::move(relay));
    }
    for (int i = 0; i < 3; ++i) {
      std::vector<std::string> node_flags{
          absl::StrCat("--node_id=", i + 1), "--peers=" + absl::StrJoin(peers, ","),
          "--peer_clients=" + absl::StrJoin(clients, ","), "--listen=" + Address(i),
          // Fixed, so that a replica that starts again in its process keeps its address.
          absl::StrCat("--metrics_listen=", hosts_.address[i], ":", UnusedPort()), "--shards=2",
          "--shutdown_grace=2s"};
      // A replica on a host of its own serves the test's client from beyond its loopback.
      if (hosts_.address[i] != "127.0.0.1") node_flags.push_back("--plaintext_beyond_loopback");
      if (!raft_listen[i].empty()) node_flags.push_back("--raft_listen=" + raft_listen[i]);
      node_flags.insert(node_flags.end(), options.flags.begin(), options.flags.end());
      LedgerdProcess::Options process;
      process.netns = hosts_.netns[i];
      process.ledger_id = ledger_id_;  // Replicas of one ledger: ledgerd refuses others.
      process.credentials = options.credentials;
      if (options.shiftable_clocks) {
        clocks_[i] =
            std::make_unique<ClockShiftFile>(clocks_dir_.Sub(absl::StrCat("clock", i + 1)));
        process.environment = clocks_[i]->Environment();
      }
      nodes_[i] = std::make_unique<LedgerdProcess>(std::move(node_flags), process);
    }
    const std::shared_ptr<grpc::ChannelCredentials> credentials =
        options.credentials != nullptr ? options.credentials : grpc::InsecureChannelCredentials();
    for (int i = 0; i < 3; ++i) {
      // Reconnects soon after a replica starts again (gRPC's first backoff is a second).
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
      args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
      args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
      stubs_[i] = v1::Ledger::NewStub(grpc::CreateCustomChannel(Address(i), credentials, args));
    }
  }

  // All three at once: each drains on its own (stopped one after another, the last leader
  // would lose its quorum on the way, and each would wait out its idle clients' GOAWAY in turn).
  ~LedgerdCluster() {
    for (auto& node : nodes_) {
      node->Signal(SIGTERM);
      node->Signal(SIGCONT);
    }
    for (auto& node : nodes_) {
      node->WaitForExit();
      EXPECT_FALSE(node->running())
          << "ledgerd " << node->pid() << " did not exit after SIGTERM; killing it. Its log:\n"
          << node->log();
      node->Kill();
    }
  }
  LedgerdCluster(const LedgerdCluster&) = delete;
  LedgerdCluster& operator=(const LedgerdCluster&) = delete;

  std::string Address(int i) const { return absl::StrCat(hosts_.address[i], ":", grpc_ports_[i]); }
  // Stops replica i and makes its data directory again with `ledgerd init` without --ledger_id:
  // a ledger of its own, which its start must refuse to join to this cluster.
  void MakeAnotherLedgersReplica(int i) {
    ASSERT_EQ(nodes_[i]->Stop(), 0) << nodes_[i]->log();
    std::filesystem::remove_all(nodes_[i]->data_dir());
    Subprocess init({LedgerdPath(), "init", "--data_dir=" + nodes_[i]->data_dir()});
    ASSERT_EQ(init.WaitForExit(), 0) << init.output();
  }

  // Every replica's address, for a client's --target.
  std::string Targets() const { return absl::StrCat(Address(0), ",", Address(1), ",", Address(2)); }
  LedgerdProcess& node(int i) { return *nodes_[i]; }
  // Replica i's wall clock reads the true time plus `shift` from now on, as if its machine's clock
  // had been set (its monotonic clock does not move). Needs shiftable_clocks.
  void ShiftClock(int i, absl::Duration shift) {
    ASSERT_NE(clocks_[i], nullptr) << "the cluster was made without shiftable_clocks";
    clocks_[i]->Set(shift);
  }

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

  // The replica that serves: the one whose Balance is not refused NOT_LEADER (`excluded` is not
  // asked). -1 while none does.
  int Serving(int excluded = -1) {
    for (int i = 0; i < 3; ++i) {
      if (i == excluded || !nodes_[i]->running()) continue;
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

  // The replica other than `excluded` that serves, once one does (a new leader after `excluded`
  // was paused, killed or cut off); -1, and a test failure, when none does.
  int WaitForServingOtherThan(int excluded) {
    int leader = -1;
    EXPECT_TRUE(WaitUntil(
        [&] {
          leader = Serving(excluded);
          return leader >= 0;
        },
        absl::StrCat("a replica other than node ", excluded + 1, " serves")));
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

  // The value of `series` in replica i's /metrics; nullopt when it cannot be scraped or lacks it.
  std::optional<double> Metric(int i, const std::string& series) {
    std::optional<testing_util::HttpResponse> scrape =
        HttpGet(nodes_[i]->metrics_host(), nodes_[i]->metrics_port(), "/metrics");
    if (!scrape.has_value()) return std::nullopt;
    return SampleValue(scrape->body, series);
  }
  // ledger_log_position of replica i (the newest committed entry it has).
  std::optional<double> LogPosition(int i) { return Metric(i, "ledger_log_position"); }

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

  // Waits until every replica holds the newest entry, stops all three, and expects their logs to
  // hold the same entries wherever they overlap (a replica restored from the leader's state
  // starts later). Returns the first position compared (0 after a failure).
  uint64_t StopAllAndExpectEqualLogs() {
    const bool level = WaitUntil(
        [&] {
          const std::optional<double> newest = LogPosition(0);
          return newest.has_value() && LogPosition(1) == newest && LogPosition(2) == newest;
        },
        "every replica holds the newest entry");
    EXPECT_TRUE(level);
    for (auto& node : nodes_) node->Signal(SIGTERM);
    for (auto& node : nodes_) EXPECT_EQ(node->WaitForExit(), 0) << node->log();
    if (!level) return 0;
    std::array<std::map<uint64_t, std::string>, 3> logs;
    uint64_t from = 0;
    for (int i = 0; i < 3; ++i) {
      logs[i] = LogOf(i);
      if (logs[i].empty()) {
        ADD_FAILURE() << "node " << i + 1 << "'s log is empty";
        return 0;
      }
      from = std::max(from, logs[i].begin()->first);
    }
    const auto suffix = [from](const std::map<uint64_t, std::string>& log) {
      return std::map<uint64_t, std::string>(log.lower_bound(from), log.end());
    };
    EXPECT_GT(suffix(logs[0]).size(), 0u);
    EXPECT_EQ(suffix(logs[1]), suffix(logs[0])) << "node 2 against node 1, from " << from;
    EXPECT_EQ(suffix(logs[2]), suffix(logs[0])) << "node 3 against node 1, from " << from;
    return from;
  }

 protected:
  ReplicaHosts hosts_;
  std::array<int, 3> grpc_ports_{};
  // 32 lowercase hexadecimal digits, as `ledgerd init --ledger_id` takes.
  const std::string ledger_id_ = [] {
    std::random_device random;
    std::string id;
    for (int i = 0; i < 32; ++i) id += "0123456789abcdef"[random() % 16];
    return id;
  }();
  ScratchDir clocks_dir_;
  std::array<std::unique_ptr<ClockShiftFile>, 3> clocks_;  // Null without shiftable_clocks.
  // Null without raft_delay_us. Declared before nodes_, so stopped after the replicas.
  std::array<std::unique_ptr<Subprocess>, 3> relays_;
  std::array<std::unique_ptr<LedgerdProcess>, 3> nodes_;
  std::array<std::unique_ptr<v1::Ledger::Stub>, 3> stubs_;
};

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_E2E_LEDGERD_CLUSTER_H_
