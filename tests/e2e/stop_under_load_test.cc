// A graceful stop under load at full speed (issue 30, goal 1): SIGTERM or SIGHUP while clients
// call as fast as they can leaves no call CANCELLED or DEADLINE_EXCEEDED. Each call that reached
// ledgerd is answered OK (applied, and found after a restart) or refused unapplied
// (SHUTTING_DOWN); the others were never sent, because ledgerd told each connection to go
// elsewhere (GOAWAY) and stopped listening before it stopped serving. Three clients: a plain gRPC
// client that knows only the API, ledgerctl, and ledger-loadtest.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ledger/v1/ledger.grpc.pb.h"
#include "proto/error_details.h"
#include "tests/e2e/ledgerd_process.h"
#include "tests/e2e/loadtest_report.h"
#include "tests/e2e/subprocess.h"
#include "tests/scratch_dir.h"
#include "tests/test_paths.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing_util::JsonNumber;
using testing_util::LedgerdProcess;
using testing_util::Subprocess;

// How long the clients call before the signal, and the most a test's load runs in all.
constexpr std::chrono::milliseconds kLoadBeforeSignal{1500};
constexpr std::chrono::seconds kLoadMax{60};

// What a client that knows only the API can tell from a status. kClosedUnderTheCall is an unknown
// outcome of one kind: the call's connection failed under it at the stop (see the test).
enum class Verdict { kApplied, kRefusedUnapplied, kNeverSent, kClosedUnderTheCall, kUnknown };

Verdict Judge(const grpc::Status& status) {
  if (status.ok()) return Verdict::kApplied;
  if (std::optional<ErrorDetails> details = DecodeErrorDetails(status.error_details())) {
    return details->reason == v1::SHUTTING_DOWN ? Verdict::kRefusedUnapplied : Verdict::kUnknown;
  }
  // gRPC's own answer when no connection could take the call (pick_first in gRPC 1.51): the call
  // never left the client.
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
      absl::StartsWith(status.error_message(), "failed to connect to all addresses")) {
    return Verdict::kNeverSent;
  }
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    for (const char* words : {"Broken pipe", "Connection reset by peer"}) {
      if (absl::StrContains(status.error_message(), words)) return Verdict::kClosedUnderTheCall;
    }
  }
  return Verdict::kUnknown;
}

std::string CodeName(const grpc::Status& status) {
  return absl::StrCat(static_cast<int>(status.error_code()), " ", status.error_message());
}

// Balances after a restart on the same data directory: account -> balance (-1: unreadable).
std::map<std::string, int64_t> BalancesAfterRestart(LedgerdProcess& ledgerd,
                                                    const std::vector<std::string>& accounts) {
  std::map<std::string, int64_t> balances;
  if (!ledgerd.Restart()) {
    ADD_FAILURE() << "no restart: " << ledgerd.log();
    return balances;
  }
  auto stub = v1::Ledger::NewStub(
      grpc::CreateChannel(ledgerd.target(), grpc::InsecureChannelCredentials()));
  for (const std::string& account : accounts) {
    v1::BalanceRequest request;
    request.set_account_id(account);
    v1::BalanceResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const grpc::Status status = stub->Balance(&context, request, &response);
    balances[account] = status.ok()                                          ? response.balance()
                        : status.error_code() == grpc::StatusCode::NOT_FOUND ? 0
                                                                             : -1;
  }
  return balances;
}

class StopUnderLoadTest : public testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(Signals, StopUnderLoadTest, testing::Values(SIGTERM, SIGHUP),
                         [](const testing::TestParamInfo<int>& info) {
                           return std::string(info.param == SIGTERM ? "Sigterm" : "Sighup");
                         });

// 64 callers on 4 connections, each depositing 1 into its own account with a fresh request_id
// as fast as answers come, straight through the stop.
//
// One gap is known, and bounded here, not fixed: about one stop in 120 under ASan (4 of about
// 500 runs, issue 31's notes), calls fail with their connection's transport error at the stop,
// which no client can tell apart from a call that was applied: "Broken pipe" (a call never seen:
// the balance matched the OK answers) or "recvmsg: Connection reset by peer" (once a call that
// WAS applied: the balance was one more than the OK answers), once 15 calls of one connection.
// The likely path, from gRPC 1.51's source and Linux's: gRPC shuts a connection down for reading
// and writing once its final GOAWAY and last answer are handed to the kernel; a byte the client
// sends after that (a new call crossing the GOAWAY, or its flow-control update for the answers
// it is reading) makes Linux reset the connection, which destroys whatever the kernel had not yet
// sent, the last answer included. The shutdown and the reset are gRPC's and the kernel's, so
// ledgerd cannot hold them back without taking the sockets' closing from gRPC. So: only after
// the signal, at most one call per caller, all on one connection, and each balance is the
// applied calls or one more (the lost answer's call, applied or not).
TEST_P(StopUnderLoadTest, APlainGrpcClientGetsADefiniteAnswerForEveryCallThatReachedLedgerd) {
  constexpr int kConnections = 4;
  constexpr int kCallersPerConnection = 16;
  constexpr int kCallers = kConnections * kCallersPerConnection;
  LedgerdProcess ledgerd({"--shards=4"});
  ASSERT_TRUE(ledgerd.Start());
  std::vector<std::unique_ptr<v1::Ledger::Stub>> stubs;
  for (int c = 0; c < kConnections; ++c) {
    grpc::ChannelArguments arguments;
    arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // A connection of its own.
    stubs.push_back(v1::Ledger::NewStub(grpc::CreateCustomChannel(
        ledgerd.target(), grpc::InsecureChannelCredentials(), arguments)));
  }
  std::atomic<bool> stopped{false};
  std::atomic<bool> signalled{false};
  std::atomic<int64_t> applied_total{0};
  struct Tally {
    int64_t applied = 0, refused = 0, never_sent = 0, closed_under = 0;
    std::vector<std::string> unknown;
  };
  std::vector<Tally> tallies(kCallers);
  std::vector<std::thread> callers;
  const auto load_end = std::chrono::steady_clock::now() + kLoadMax;
  for (int i = 0; i < kCallers; ++i) {
    callers.emplace_back([&, i] {
      v1::Ledger::Stub& stub = *stubs[i % kConnections];
      Tally& tally = tallies[i];
      for (int n = 0; !stopped.load() && std::chrono::steady_clock::now() < load_end; ++n) {
        v1::DepositRequest request;
        request.set_account_id(absl::StrCat("stop-", i));
        request.set_amount(1);
        request.set_request_id(absl::StrCat("c", i, "-", n));
        v1::DepositResponse response;
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        const grpc::Status status = stub.Deposit(&context, request, &response);
        switch (Judge(status)) {
          case Verdict::kApplied:
            ++tally.applied;
            applied_total.fetch_add(1);
            break;
          case Verdict::kRefusedUnapplied:
            ++tally.refused;
            break;
          case Verdict::kNeverSent:
            ++tally.never_sent;
            break;
          case Verdict::kClosedUnderTheCall:
            if (!signalled.load()) {
              tally.unknown.push_back(absl::StrCat("before the signal: ", CodeName(status)));
            } else {
              ++tally.closed_under;
            }
            break;
          case Verdict::kUnknown:
            tally.unknown.push_back(CodeName(status));
            break;
        }
      }
    });
  }
  // Full speed first, then the signal while every caller has a call on its way.
  std::this_thread::sleep_for(kLoadBeforeSignal);
  const int64_t applied_before_signal = applied_total.load();
  signalled.store(true);
  ledgerd.Signal(GetParam());
  const std::optional<int> exit_code = ledgerd.WaitForExit(std::chrono::seconds(30));
  // The callers go on a moment after the exit: a call now is never sent.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  stopped.store(true);
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(exit_code, 0) << ledgerd.log();
  EXPECT_THAT(ledgerd.log(), HasSubstr("stopped cleanly"));

  int64_t applied = 0, refused = 0, never_sent = 0, closed_under = 0;
  std::vector<std::string> unknown;
  std::vector<std::string> accounts;
  std::set<int> connections_closed_under;
  for (int i = 0; i < kCallers; ++i) {
    if (tallies[i].closed_under > 0) connections_closed_under.insert(i % kConnections);
    applied += tallies[i].applied;
    refused += tallies[i].refused;
    never_sent += tallies[i].never_sent;
    closed_under += tallies[i].closed_under;
    EXPECT_LE(tallies[i].closed_under, 1) << "caller " << i;
    unknown.insert(unknown.end(), tallies[i].unknown.begin(), tallies[i].unknown.end());
    accounts.push_back(absl::StrCat("stop-", i));
  }
  std::cout << "plain client: " << applied << " applied, " << refused << " refused unapplied, "
            << never_sent << " never sent, " << closed_under
            << " closed under the call (the known gap above), " << unknown.size()
            << " otherwise unknown\n";
  // Full speed: hundreds of calls before the signal, even under a sanitizer.
  EXPECT_GT(applied_before_signal, 100);
  EXPECT_GT(never_sent, 0);  // The callers outlived ledgerd.
  EXPECT_LE(connections_closed_under.size(), 1u) << ledgerd.log();
  EXPECT_TRUE(unknown.empty()) << unknown.size() << " calls with an unknown outcome, such as "
                               << unknown.front() << "\n(applied " << applied << ", refused "
                               << refused << ", never sent " << never_sent << ")\n"
                               << ledgerd.log();
  // Exactly the calls answered OK were applied, each once (and a call closed under it, or not).
  const std::map<std::string, int64_t> balances = BalancesAfterRestart(ledgerd, accounts);
  for (int i = 0; i < kCallers; ++i) {
    const auto found = balances.find(accounts[i]);
    ASSERT_NE(found, balances.end());
    EXPECT_GE(found->second, tallies[i].applied) << accounts[i];
    EXPECT_LE(found->second, tallies[i].applied + tallies[i].closed_under) << accounts[i];
  }
  EXPECT_EQ(ledgerd.Stop(), 0) << ledgerd.log();
}

// The transport errors of a connection that closed under a call (gRPC's words, not ledgerd's).
bool ClosedUnderTheCall(const std::string& output) {
  for (const char* words : {"UNAVAILABLE: Broken pipe", "UNAVAILABLE: Connection reset by peer",
                            "UNAVAILABLE: Socket closed", "UNAVAILABLE: failed to connect"}) {
    if (absl::StrContains(output, words)) return true;
  }
  return false;
}

// ledgerctl at full speed: 8 loops, each starting one deposit after another through the stop.
// None says "outcome unknown": each deposit was applied (exit 0), or refused or never sent with
// nothing applied (exit 5, which it says). One exception, a known gap of the drain (issue 31's
// note): a connection accepted in the instant before the stop can still be in gRPC's handshake
// when the GOAWAYs go out, so it gets none and is closed at the end of the drain; a request
// written into it then fails ("Broken pipe", or the connection gone before the call was picked),
// and no client can know whether it was read, so ledgerctl rightly says "outcome unknown". At most
// one per loop (only at the stop), and the balance then allows that deposit either way.
TEST_P(StopUnderLoadTest, LedgerctlNeverSaysOutcomeUnknown) {
  constexpr int kLoops = 8;
  LedgerdProcess ledgerd({"--shards=2"});
  ASSERT_TRUE(ledgerd.Start());
  std::atomic<bool> stopped{false};
  std::atomic<int64_t> runs{0};
  struct Tally {
    int64_t applied = 0, unapplied = 0, unknown_at_stop = 0;
    std::vector<std::string> other;
  };
  std::vector<Tally> tallies(kLoops);
  std::vector<std::thread> loops;
  const auto load_end = std::chrono::steady_clock::now() + kLoadMax;
  for (int i = 0; i < kLoops; ++i) {
    loops.emplace_back([&, i] {
      Tally& tally = tallies[i];
      for (int n = 0; !stopped.load() && std::chrono::steady_clock::now() < load_end; ++n) {
        Subprocess ledgerctl({testing_util::LedgerctlPath(),
                              absl::StrCat("--target=", ledgerd.target()), "--deadline=10s",
                              "deposit", absl::StrCat("ctl-", i), "1",
                              absl::StrCat("--request_id=ctl", i, "-", n)});
        const std::optional<int> exit_code = ledgerctl.WaitForExit(std::chrono::seconds(20));
        const std::string output = ledgerctl.output();
        runs.fetch_add(1);
        if (exit_code == 0) {
          ++tally.applied;
        } else if (exit_code == 5 && !absl::StrContains(output, "outcome unknown") &&
                   (absl::StrContains(output, "nothing was applied"))) {
          ++tally.unapplied;
        } else if (exit_code == 5 && absl::StrContains(output, "outcome unknown") &&
                   ClosedUnderTheCall(output)) {
          ++tally.unknown_at_stop;
        } else {
          tally.other.push_back(absl::StrCat("exit ", exit_code.value_or(-1), ": ", output));
        }
      }
    });
  }
  ASSERT_TRUE(testing_util::WaitUntil([&] { return runs.load() >= 40; },
                                      "ledgerctl has made 40 deposits", testing_util::kEventTimeout,
                                      std::chrono::milliseconds(10)));
  ledgerd.Signal(GetParam());
  const std::optional<int> exit_code = ledgerd.WaitForExit(std::chrono::seconds(30));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  stopped.store(true);
  for (std::thread& loop : loops) loop.join();
  EXPECT_EQ(exit_code, 0) << ledgerd.log();

  std::vector<std::string> accounts, other;
  int64_t unapplied = 0;
  for (int i = 0; i < kLoops; ++i) {
    accounts.push_back(absl::StrCat("ctl-", i));
    unapplied += tallies[i].unapplied;
    other.insert(other.end(), tallies[i].other.begin(), tallies[i].other.end());
  }
  EXPECT_GT(unapplied, 0);  // The loops outlived ledgerd.
  EXPECT_TRUE(other.empty()) << other.size() << " ledgerctl runs ended otherwise, such as\n"
                             << other.front();
  const std::map<std::string, int64_t> balances = BalancesAfterRestart(ledgerd, accounts);
  for (int i = 0; i < kLoops; ++i) {
    EXPECT_LE(tallies[i].unknown_at_stop, 1) << accounts[i];
    EXPECT_GE(balances.at(accounts[i]), tallies[i].applied) << accounts[i];
    EXPECT_LE(balances.at(accounts[i]), tallies[i].applied + tallies[i].unknown_at_stop)
        << accounts[i];
  }
  EXPECT_EQ(ledgerd.Stop(), 0) << ledgerd.log();
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

// ledger-loadtest, closed loop at full speed: ledgerd is stopped mid-run and started again on the
// same port; the load test calls straight through both and then verifies every balance. No call
// of its ended CANCELLED or DEADLINE_EXCEEDED, and none was ambiguous (needing a retry to learn
// whether it was applied).
TEST_P(StopUnderLoadTest, LedgerLoadtestHasNoAmbiguousCallAndVerifiesExactly) {
  testing_util::ScratchDir scratch;
  LedgerdProcess ledgerd({"--shards=2"});
  ASSERT_TRUE(ledgerd.Start());
  const std::string json_path = scratch.Sub("report.json");
  Subprocess loadtest({testing_util::LoadtestPath(), absl::StrCat("--target=", ledgerd.target()),
                       "--duration=6s", "--warmup=0s", "--accounts=200", "--concurrency=32",
                       "--deadline=5s", "--resolve_for=60s",
                       "--mix=deposit=60,withdraw=20,balance=5,transfer=15", "--progress",
                       absl::StrCat("--json_file=", json_path)});
  ASSERT_TRUE(loadtest.WaitForOutput("OK/s")) << loadtest.output();
  ledgerd.Signal(GetParam());
  EXPECT_EQ(ledgerd.WaitForExit(std::chrono::seconds(30)), 0) << ledgerd.log();
  ASSERT_TRUE(ledgerd.Restart());
  const std::optional<int> exit_code = loadtest.WaitForExit(std::chrono::seconds(120));
  const std::string report = ReadFile(json_path);
  EXPECT_EQ(exit_code, 0) << loadtest.output();
  EXPECT_THAT(report, HasSubstr("\"verification\":\"PASS\"")) << loadtest.output();
  EXPECT_GT(JsonNumber(report, "OK"), 0) << report;
  EXPECT_THAT(report, Not(HasSubstr("CANCELLED"))) << report;
  EXPECT_THAT(report, Not(HasSubstr("DEADLINE_EXCEEDED"))) << report;
  // No call had to be settled: each had a definite outcome when it ended.
  EXPECT_LE(JsonNumber(report, "ambiguous\":{\"calls"), 0) << report;
  EXPECT_EQ(ledgerd.Stop(), 0) << ledgerd.log();
}

}  // namespace
}  // namespace ledger
