// ledgerctl in front of a cluster: the binary run against fake replicas on loopback that refuse
// every ledger call NOT_LEADER as a follower does (UNAVAILABLE, the reason in
// grpc-status-details-bin, node_id and, when a leader is known, leader_id and leader_address,
// else a RetryInfo delay), or answer as the leader. Each test asserts what ledgerctl printed, its
// exit code, and which replica received which request.
#include <chrono>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "client/exit_codes.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ledger/v1/ledger.grpc.pb.h"
#include "proto/error_details.h"
#include "tests/e2e/subprocess.h"
#include "tests/scratch_dir.h"
#include "tests/test_paths.h"

namespace ledger {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;

// The bound ledgerctl documents in --help ("at most 10 hops per call").
constexpr int kHopsMax = 10;

// One replica of a fake cluster: the leader (answers every write as a fresh ledger would: the
// balance is the amount) or a follower that refuses NOT_LEADER. Thread-safe (a sync service:
// gRPC calls it from its own threads).
class FakeReplica final : public v1::Ledger::Service {
 public:
  // What a follower's refusals say; a replica without one leads.
  struct Follower {
    std::string leader_id = "";       // Empty: no leader known.
    std::string leader_address = "";  // Empty: not sent.
    std::optional<std::chrono::milliseconds> retry_delay = std::nullopt;
  };

  explicit FakeReplica(std::string node_id) : node_id_(std::move(node_id)) {}
  ~FakeReplica() override {
    if (server_ == nullptr) return;
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
  }
  FakeReplica(const FakeReplica&) = delete;
  FakeReplica& operator=(const FakeReplica&) = delete;

  // Listens on 127.0.0.1, a free port; returns "127.0.0.1:PORT".
  std::string Start() {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    address_ = absl::StrCat("127.0.0.1:", port);
    return address_;
  }
  const std::string& address() const { return address_; }

  void Follow(Follower follower) {
    absl::MutexLock lock(&mu_);
    follower_ = std::move(follower);
  }

  // The request_id (transfer_id) of every write received, in arrival order; an Apply call adds
  // its operations' ids.
  std::vector<std::string> ids() const {
    absl::MutexLock lock(&mu_);
    return ids_;
  }
  int apply_calls() const {
    absl::MutexLock lock(&mu_);
    return apply_calls_;
  }

  grpc::Status Deposit(grpc::ServerContext* /*context*/, const v1::DepositRequest* request,
                       v1::DepositResponse* response) override {
    absl::MutexLock lock(&mu_);
    ids_.push_back(request->request_id());
    if (follower_.has_value()) return Refusal();
    response->set_balance(request->amount());
    return grpc::Status::OK;
  }

  grpc::Status Transfer(grpc::ServerContext* /*context*/, const v1::TransferRequest* request,
                        v1::TransferResponse* response) override {
    absl::MutexLock lock(&mu_);
    ids_.push_back(request->transfer_id());
    if (follower_.has_value()) return Refusal();
    response->set_from_balance(1000 - request->amount());
    response->set_to_balance(request->amount());
    return grpc::Status::OK;
  }

  grpc::Status Balance(grpc::ServerContext* /*context*/, const v1::BalanceRequest* /*request*/,
                       v1::BalanceResponse* response) override {
    absl::MutexLock lock(&mu_);
    ids_.push_back("balance");
    if (follower_.has_value()) return Refusal();
    response->set_balance(42);
    return grpc::Status::OK;
  }

  grpc::Status Apply(grpc::ServerContext* /*context*/, const v1::ApplyRequest* request,
                     v1::ApplyResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++apply_calls_;
    for (const v1::ApplyOperation& operation : request->operations()) {
      ids_.push_back(operation.deposit().request_id());
    }
    if (follower_.has_value()) return Refusal();
    for (const v1::ApplyOperation& operation : request->operations()) {
      response->add_results()->set_balance(operation.deposit().amount());
    }
    return grpc::Status::OK;
  }

 private:
  // UNAVAILABLE, NOT_LEADER, as a follower of ledgerd sends it (server/leadership.cc), with the
  // fake's own words: ledgerctl must decide by the reason and the metadata.
  grpc::Status Refusal() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ErrorDetails details{.reason = v1::NOT_LEADER,
                         .metadata = {{"node_id", node_id_}},
                         .retry_delay = follower_->retry_delay};
    if (!follower_->leader_id.empty()) {
      details.metadata.emplace_back("leader_id", follower_->leader_id);
    }
    if (!follower_->leader_address.empty()) {
      details.metadata.emplace_back("leader_address", follower_->leader_address);
    }
    const std::string words = absl::StrCat("fake replica ", node_id_, " does not lead");
    return {grpc::StatusCode::UNAVAILABLE, words,
            EncodeErrorDetails(static_cast<int>(grpc::StatusCode::UNAVAILABLE), words, details)};
  }

  const std::string node_id_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  mutable absl::Mutex mu_;
  std::optional<Follower> follower_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> ids_ ABSL_GUARDED_BY(mu_);
  int apply_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

// What a ledgerctl run ended with.
struct LedgerctlRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs ledgerctl with `args` (each passed as one word), `stdin_text` as its standard input.
LedgerctlRun Ledgerctl(const std::vector<std::string>& args, const std::string& stdin_text = "") {
  testing_util::ScratchDir files;
  std::ofstream(files.Sub("stdin")) << stdin_text;
  std::string command = "'" + testing_util::LedgerctlPath() + "'";
  for (const std::string& arg : args) absl::StrAppend(&command, " '", arg, "'");
  absl::StrAppend(&command, " <'", files.Sub("stdin"), "' 2>'", files.Sub("stderr"), "'");
  testing_util::Subprocess ledgerctl({"/bin/sh", "-c", command});
  LedgerctlRun run;
  run.exit_code = ledgerctl.WaitForExit().value_or(-1);
  run.out = ledgerctl.output();
  std::ifstream err(files.Sub("stderr"));
  run.err.assign(std::istreambuf_iterator<char>(err), std::istreambuf_iterator<char>());
  return run;
}

std::string Target(const std::vector<const FakeReplica*>& replicas) {
  std::vector<std::string> addresses;
  for (const FakeReplica* replica : replicas) addresses.push_back(replica->address());
  return "--target=" + absl::StrJoin(addresses, ",");
}

TEST(LedgerctlLeaderTest, ADepositRefusedNotLeaderIsSentOnceToTheLeaderItNames) {
  FakeReplica follower("2");
  FakeReplica leader("1");
  follower.Start();
  leader.Start();
  follower.Follow({.leader_id = "1", .leader_address = leader.address()});

  const LedgerctlRun run =
      Ledgerctl({Target({&follower}), "deposit", "alice", "1500", "--request_id=pay-1"});

  EXPECT_EQ(run.exit_code, kExitOk) << run.err;
  EXPECT_EQ(run.out, "alice: 1500\n");  // The leader's answer.
  EXPECT_THAT(follower.ids(), ElementsAre("pay-1"));
  EXPECT_THAT(leader.ids(), ElementsAre("pay-1"));  // Exactly once, with the same request_id.
  EXPECT_THAT(run.err, HasSubstr(absl::StrCat("ledgerctl: node 2 at ", follower.address(),
                                              " does not lead; sending the same call to the "
                                              "leader, node 1 at ",
                                              leader.address(), " (hop 1 of ", kHopsMax, ")\n")));
}

TEST(LedgerctlLeaderTest, ATransferRefusedNotLeaderKeepsItsTransferId) {
  FakeReplica follower("3");
  FakeReplica leader("1");
  follower.Start();
  leader.Start();
  follower.Follow({.leader_id = "1", .leader_address = leader.address()});

  const LedgerctlRun run =
      Ledgerctl({Target({&follower}), "transfer", "alice", "bob", "300", "--transfer_id=rent-12"});

  EXPECT_EQ(run.exit_code, kExitOk) << run.err;
  EXPECT_EQ(run.out, "alice: 700\nbob: 300\n");
  EXPECT_THAT(follower.ids(), ElementsAre("rent-12"));
  EXPECT_THAT(leader.ids(), ElementsAre("rent-12"));
}

TEST(LedgerctlLeaderTest, WithoutALeaderAddressTheNextTargetIsTriedAfterTheRetryDelay) {
  FakeReplica electing("1");  // Knows no leader: only a RetryInfo delay.
  FakeReplica unnamed("2");   // Knows the leader's id, not its address.
  FakeReplica leader("3");
  electing.Start();
  unnamed.Start();
  leader.Start();
  electing.Follow({.retry_delay = std::chrono::milliseconds(300)});
  unnamed.Follow({.leader_id = "3"});

  const LedgerctlRun run = Ledgerctl(
      {Target({&electing, &unnamed, &leader}), "deposit", "alice", "5", "--request_id=pay-2"});

  EXPECT_EQ(run.exit_code, kExitOk) << run.err;
  EXPECT_EQ(run.out, "alice: 5\n");
  EXPECT_THAT(electing.ids(), ElementsAre("pay-2"));
  EXPECT_THAT(unnamed.ids(), ElementsAre("pay-2"));
  EXPECT_THAT(leader.ids(), ElementsAre("pay-2"));
  EXPECT_THAT(run.err, HasSubstr(absl::StrCat("sending the same call to the next --target, ",
                                              unnamed.address(), " in 300 ms (hop 1 of ")));
  EXPECT_THAT(run.err, HasSubstr(absl::StrCat("sending the same call to the next --target, ",
                                              leader.address(), " (hop 2 of ")));
}

TEST(LedgerctlLeaderTest, ALeaderThatCannotBeReachedIsPassedOverForTheNextTarget) {
  FakeReplica follower("1");
  FakeReplica leader("2");
  follower.Start();
  leader.Start();
  follower.Follow({.leader_id = "9", .leader_address = "127.0.0.1:1"});  // Nothing listens.

  const LedgerctlRun run =
      Ledgerctl({Target({&follower, &leader}), "deposit", "alice", "7", "--request_id=pay-3"});

  EXPECT_EQ(run.exit_code, kExitOk) << run.err;
  EXPECT_EQ(run.out, "alice: 7\n");
  EXPECT_THAT(follower.ids(), ElementsAre("pay-3"));
  EXPECT_THAT(leader.ids(), ElementsAre("pay-3"));
  EXPECT_THAT(run.err, HasSubstr("no connection to 127.0.0.1:1"));
}

TEST(LedgerctlLeaderTest, TwoReplicasNamingEachOtherStopAfterTheHopBoundWithNotLeader) {
  FakeReplica first("1");
  FakeReplica second("2");
  first.Start();
  second.Start();
  first.Follow({.leader_id = "2", .leader_address = second.address()});
  second.Follow({.leader_id = "1", .leader_address = first.address()});

  const LedgerctlRun run =
      Ledgerctl({Target({&first}), "deposit", "alice", "5", "--request_id=pay-4"});

  EXPECT_EQ(run.exit_code, kExitUnavailable) << run.err;
  EXPECT_EQ(run.out, "");
  // The first send and kHopsMax hops, alternating (the even hops back to the first), all the
  // same request; the last refusal is the first replica's.
  EXPECT_THAT(first.ids(), SizeIs(kHopsMax / 2 + 1));
  EXPECT_THAT(second.ids(), SizeIs(kHopsMax / 2));
  EXPECT_THAT(first.ids(), Each("pay-4"));
  EXPECT_THAT(second.ids(), Each("pay-4"));
  EXPECT_THAT(run.err, HasSubstr(absl::StrCat("not following further: ", kHopsMax, " hops")));
  // The last refusal, reported as what it is: nothing was applied.
  EXPECT_THAT(run.err, HasSubstr("ledgerctl: UNAVAILABLE: fake replica 1 does not lead\n"));
  EXPECT_THAT(run.err, HasSubstr("NOT_LEADER), so nothing was applied"));
  EXPECT_THAT(run.err, Not(HasSubstr("outcome unknown")));
}

TEST(LedgerctlLeaderTest, HopsStopAtTheDeadline) {
  FakeReplica electing("1");
  electing.Start();
  electing.Follow({.retry_delay = std::chrono::milliseconds(300)});

  const auto start = std::chrono::steady_clock::now();
  const LedgerctlRun run = Ledgerctl(
      {Target({&electing}), "--deadline=1s", "deposit", "alice", "5", "--request_id=pay-5"});
  const auto took = std::chrono::steady_clock::now() - start;

  EXPECT_EQ(run.exit_code, kExitUnavailable) << run.err;
  // 0, 300, 600 and 900 ms at the most: a wait that would end past the deadline is not made.
  EXPECT_THAT(electing.ids(), SizeIs(::testing::AllOf(::testing::Ge(2u), ::testing::Le(4u))));
  EXPECT_THAT(run.err, HasSubstr("not following further: --deadline leaves"));
  EXPECT_THAT(run.err, Not(HasSubstr("outcome unknown")));
  EXPECT_LT(took, std::chrono::seconds(5));
}

TEST(LedgerctlLeaderTest, ReadsFollowTheLeaderToo) {
  FakeReplica follower("2");
  FakeReplica leader("1");
  follower.Start();
  leader.Start();
  follower.Follow({.leader_id = "1", .leader_address = leader.address()});

  const LedgerctlRun run = Ledgerctl({Target({&follower}), "--json", "balance", "alice"});

  EXPECT_EQ(run.exit_code, kExitOk) << run.err;
  EXPECT_EQ(run.out, "{\"account_id\":\"alice\",\"balance\":\"42\"}\n");
  // The hop note in JSON names where the call went.
  EXPECT_THAT(run.err, HasSubstr(absl::StrCat("\"next_address\":\"", leader.address(), "\"")));
}

TEST(LedgerctlLeaderTest, ApplySendsItsLaterCallsToTheLeaderItFound) {
  FakeReplica follower("2");
  FakeReplica leader("1");
  follower.Start();
  leader.Start();
  follower.Follow({.leader_id = "1", .leader_address = leader.address()});
  const std::string lines =
      "{\"deposit\":{\"account_id\":\"a\",\"amount\":\"1\",\"request_id\":\"op-1\"}}\n"
      "{\"deposit\":{\"account_id\":\"b\",\"amount\":\"2\",\"request_id\":\"op-2\"}}\n"
      "{\"deposit\":{\"account_id\":\"c\",\"amount\":\"3\",\"request_id\":\"op-3\"}}\n";

  const LedgerctlRun run = Ledgerctl({Target({&follower}), "--batch_size=1", "apply", "-"}, lines);

  EXPECT_EQ(run.exit_code, kExitOk) << run.err;
  const std::vector<std::string> out = absl::StrSplit(run.out, '\n', absl::SkipEmpty());
  ASSERT_THAT(out, SizeIs(3)) << run.out;
  for (const std::string& line : out) EXPECT_THAT(line, HasSubstr("\"code\":\"OK\""));
  EXPECT_EQ(follower.apply_calls(), 1);  // Only the first call went to the follower.
  EXPECT_THAT(follower.ids(), ElementsAre("op-1"));
  EXPECT_EQ(leader.apply_calls(), 3);
  EXPECT_THAT(leader.ids(), ElementsAre("op-1", "op-2", "op-3"));
}

// A malformed address anywhere in the list is a usage error with ParseHostPort's words, and
// nothing is sent, not even to the good addresses before it.
TEST(LedgerctlLeaderTest, AMalformedAddressInTheListIsAUsageError) {
  FakeReplica replica("1");
  replica.Start();
  const std::string good = replica.address();
  const std::pair<std::string, std::string> cases[] = {
      {good + ",localhost", "got \"localhost\": no port"},
      {good + ",127.0.0.1:0", "got \"127.0.0.1:0\": port 0 is out of range (1 to 65535)"},
      {good + ",127.0.0.1:65536",
       "got \"127.0.0.1:65536\": port 65536 is out of range (1 to 65535)"},
      {good + ",", "got an empty value"},
      {good + ",,127.0.0.1:2", "got an empty value"},
  };
  for (const auto& [target, words] : cases) {
    SCOPED_TRACE(target);
    const LedgerctlRun run = Ledgerctl({"--target=" + target, "deposit", "alice", "5"});
    EXPECT_EQ(run.exit_code, kExitUsage) << run.err;
    EXPECT_THAT(
        run.err,
        HasSubstr("ledgerctl: --target needs HOST:PORT, e.g. 127.0.0.1:50051 or :50051; " + words));
  }
  EXPECT_THAT(replica.ids(), SizeIs(0));
  // The limit: every address good.
  replica.Follow({});
  FakeReplica leader("2");
  leader.Start();
  const LedgerctlRun ok =
      Ledgerctl({"--target=" + good + "," + leader.address(), "deposit", "alice", "5"});
  EXPECT_EQ(ok.exit_code, kExitOk) << ok.err;
}

}  // namespace
}  // namespace ledger
