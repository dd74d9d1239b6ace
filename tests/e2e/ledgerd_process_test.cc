// End-to-end tests of the ledgerd binary as an operator runs it: flags, start-up line, refusals,
// and signals. Each test starts its own ledgerd on an ephemeral loopback port and stops it by PID.
#include "tests/e2e/ledgerd_process.h"

#include <signal.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ledger/v1/ledger.grpc.pb.h"
#include "tests/e2e/calls_at_shards.h"
#include "tests/e2e/ledger_dir.h"
#include "tests/e2e/subprocess.h"
#include "tests/http_get.h"
#include "tests/scratch_dir.h"
#include "tests/test_paths.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;
using testing_util::LedgerdProcess;
using testing_util::Subprocess;

// The command line of a ledgerd that is to refuse to start and exit (LedgerdProcess starts the
// ones that serve): `flags` with metrics on a free port and a new ledger.
std::vector<std::string> RefusedLedgerdArgs(std::vector<std::string> flags) {
  flags.insert(flags.begin(), {testing_util::LedgerdPath(), "--metrics_listen=127.0.0.1:0",
                               testing_util::NewLedgerDirFlag()});
  return flags;
}

std::unique_ptr<v1::Ledger::Stub> StubFor(const std::string& target) {
  return v1::Ledger::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
}

// A stub whose channel is already connected, so that calls made right after reach the server at
// once even on a busy machine; null when it cannot connect within 10 s.
std::unique_ptr<v1::Ledger::Stub> ConnectedStubFor(const std::string& target) {
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
    return nullptr;
  }
  return v1::Ledger::NewStub(channel);
}

grpc::Status Deposit(v1::Ledger::Stub& stub, const std::string& account, int64_t amount,
                     int64_t* balance = nullptr) {
  v1::DepositRequest request;
  request.set_account_id(account);
  request.set_amount(amount);
  v1::DepositResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  grpc::Status status = stub.Deposit(&context, request, &response);
  if (balance != nullptr) *balance = response.balance();
  return status;
}

// The balance of `account`, or -1 when the call fails (so that it cannot equal a real count).
int64_t BalanceOf(v1::Ledger::Stub& stub, const std::string& account) {
  v1::BalanceRequest request;
  request.set_account_id(account);
  v1::BalanceResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  return stub.Balance(&context, request, &response).ok() ? response.balance() : -1;
}

// How many calls of a drain were answered OK; every other one must have been refused
// UNAVAILABLE, definitely unapplied, never CANCELLED: a caller always learns whether its call was
// applied.
int CountOkRestRefusedUnapplied(const std::vector<grpc::Status>& outcomes) {
  int ok = 0;
  for (const grpc::Status& outcome : outcomes) {
    if (outcome.ok()) {
      ++ok;
    } else {
      EXPECT_EQ(outcome.error_code(), grpc::StatusCode::UNAVAILABLE) << outcome.error_message();
      EXPECT_THAT(outcome.error_message(), HasSubstr("shutting down; nothing was applied"));
    }
  }
  return ok;
}

// The one test of the start-up line's wording (README shows it to operators); every other test
// learns the ports from --ports_file.
TEST(LedgerdProcessTest, PrintsOneStartUpLineServesAndStopsCleanlyOnSigterm) {
  LedgerdProcess ledgerd(
      {"--shards=3", "--mailbox_capacity=512", "--max_in_flight=300", "--max_batch=64"});
  ASSERT_TRUE(ledgerd.Start());
  EXPECT_THAT(ledgerd.log(),
              HasSubstr(": listening on 127.0.0.1:" + std::to_string(ledgerd.grpc_port()) +
                        ", metrics on http://127.0.0.1:" + std::to_string(ledgerd.metrics_port()) +
                        "/metrics, 3 shards, mailbox capacity 512, max in flight 300, max batch "
                        "64, overdraft limit 0, durability sync, data dir " +
                        ledgerd.data_dir() + ", gRPC plaintext (no TLS)\n"));
  auto stub = StubFor(ledgerd.target());
  int64_t balance = 0;
  ASSERT_TRUE(Deposit(*stub, "alice", 1500, &balance).ok());
  EXPECT_EQ(balance, 1500);
  EXPECT_EQ(ledgerd.Stop(), 0) << ledgerd.log();
  EXPECT_THAT(ledgerd.log(), HasSubstr("stopped cleanly"));
}

// Issue 30: under glibc's malloc ledgerd's RSS kept rising under a steady load; it allocates
// through jemalloc (docs/operations.md, "Memory"). The mapped library proves it is the one in use.
// ledgerd allocates through jemalloc (server/CMakeLists.txt), except in a sanitizer build, where
// the sanitizer's own allocator must own malloc and jemalloc is not linked at all.
TEST(LedgerdProcessTest, AllocatesThroughJemallocUnlessASanitizerOwnsMalloc) {
  LedgerdProcess ledgerd({});
  ASSERT_TRUE(ledgerd.Start());
  std::ifstream maps("/proc/" + std::to_string(ledgerd.pid()) + "/maps");
  const std::string mapped{std::istreambuf_iterator<char>(maps), std::istreambuf_iterator<char>()};
#ifdef LEDGER_LEDGERD_ON_JEMALLOC
  EXPECT_THAT(mapped, HasSubstr("libjemalloc.so"));
#else
  EXPECT_THAT(mapped, ::testing::Not(HasSubstr("libjemalloc.so")));
#endif
  EXPECT_EQ(ledgerd.Stop(), 0) << ledgerd.log();
}

TEST(LedgerdProcessTest, PortsFileNamesTheBoundPortsUntilACleanStop) {
  LedgerdProcess ledgerd({});
  ASSERT_TRUE(ledgerd.Start());
  EXPECT_EQ(ledgerd.ReadPortsFile(),
            "{\"pid\":" + std::to_string(ledgerd.pid()) +
                ",\"grpc\":\"127.0.0.1:" + std::to_string(ledgerd.grpc_port()) +
                "\",\"metrics\":\"127.0.0.1:" + std::to_string(ledgerd.metrics_port()) + "\"}\n");
  EXPECT_FALSE(std::filesystem::exists(ledgerd.ports_file() + ".tmp"));
  // The ports it names are the ones served.
  int64_t balance = 0;
  ASSERT_TRUE(Deposit(*StubFor(ledgerd.target()), "ported", 5, &balance).ok());
  EXPECT_EQ(balance, 5);
  const std::optional<testing_util::HttpResponse> scrape =
      testing_util::HttpGet(ledgerd.metrics_port(), "/metrics");
  ASSERT_TRUE(scrape.has_value());
  EXPECT_EQ(scrape->status, 200);
  EXPECT_EQ(ledgerd.Stop(), 0) << ledgerd.log();
  EXPECT_FALSE(std::filesystem::exists(ledgerd.ports_file()));
}

TEST(LedgerdProcessTest, APortsFileThatCannotBeWrittenIsRefusedBeforeServing) {
  testing_util::ScratchDir scratch;
  const struct {
    std::string path, message;
  } cases[] = {
      {scratch.Sub("missing/ports.json"),
       "--ports_file: cannot write " + scratch.Sub("missing/ports.json.tmp") +
           ": No such file or directory (its directory must exist and be writable)"},
      {scratch.path(), "--ports_file: " + scratch.path() + " is a directory; it must name a file"},
  };
  for (const auto& c : cases) {
    Subprocess ledgerd(RefusedLedgerdArgs({"--listen=127.0.0.1:0", "--ports_file=" + c.path}));
    EXPECT_EQ(ledgerd.WaitForExit(), 2) << ledgerd.output();
    EXPECT_EQ(ledgerd.output(),
              "ledgerd: " + c.message + "\n`ledgerd --help` explains the usage and every flag\n");
  }
  EXPECT_TRUE(std::filesystem::is_empty(scratch.path())) << "nothing is left behind";
}

TEST(LedgerdProcessTest, SigintAnswersEveryCallInFlightBeforeExiting) {
  constexpr int kCalls = 20;
  const std::string data_dir_flag = testing_util::NewLedgerDirFlag();
  // Each handler takes 100 ms, so the calls are still queued when the signal arrives (2 s of
  // work for the one account's shard, well within the 10 s grace); max batch 1 keeps them in
  // the mailbox, where the metrics count them.
  LedgerdProcess ledgerd(
      {data_dir_flag, "--shards=2", "--max_batch=1", "--debug_handler_delay=100ms"});
  ASSERT_TRUE(ledgerd.Start());
  const int metrics_port = ledgerd.metrics_port();
  ASSERT_GT(metrics_port, 0) << ledgerd.log();
  auto stub = ConnectedStubFor(ledgerd.target());
  ASSERT_NE(stub, nullptr);
  std::vector<grpc::Status> outcomes(kCalls);
  std::vector<std::thread> callers;
  callers.reserve(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    callers.emplace_back([&, i] { outcomes[i] = Deposit(*stub, "drain", 1); });
  }
  // All but at most one (being handled, so in no series) are known to be at the shard.
  int64_t arrived = 0;
  const bool all_arrived = testing_util::WaitUntil(
      [&] {
        arrived = testing_util::CallsAtShards(metrics_port, 2, "deposit").value_or(0);
        return arrived >= kCalls - 1;
      },
      "the deposits reach the shard", testing_util::kEventTimeout, std::chrono::milliseconds(10));
  EXPECT_TRUE(all_arrived) << arrived << " of " << kCalls << " arrived";
  ledgerd.Signal(SIGINT);
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(ledgerd.WaitForExit(), 0) << ledgerd.log();
  EXPECT_THAT(ledgerd.log(), HasSubstr("stopped cleanly"));
  // Only a call that had not reached the shard before the signal may be refused.
  const int ok = CountOkRestRefusedUnapplied(outcomes);
  EXPECT_GE(ok, arrived);  // Every call the shard had accepted was applied and answered OK.
  // And exactly those are in the ledger after a restart.
  LedgerdProcess restarted({"--metrics_listen=", data_dir_flag});
  ASSERT_TRUE(restarted.Start());
  EXPECT_EQ(BalanceOf(*StubFor(restarted.target()), "drain"), ok);
  EXPECT_EQ(restarted.Stop(), 0) << restarted.log();
}

// Deposit with a request_id and a long deadline, on its own channel's stub.
grpc::Status DepositWithId(v1::Ledger::Stub& stub, const std::string& account,
                           const std::string& request_id) {
  v1::DepositRequest request;
  request.set_account_id(account);
  request.set_amount(1);
  request.set_request_id(request_id);
  v1::DepositResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return stub.Deposit(&context, request, &response);
}

TEST(LedgerdProcessTest, ShutdownGivesEveryCallADefiniteAnswerAndAppliesExactlyTheOkOnes) {
  constexpr int kCalls = 40;
  testing_util::ScratchDir scratch;
  const std::string data_dir = scratch.Sub("ledger");
  testing_util::InitLedgerDir(data_dir);
  // 150 ms a call, about 20 calls a shard: far more work than the 1 s grace. Max batch 1 keeps
  // the queued calls in the mailboxes, where the metrics count them.
  LedgerdProcess ledgerd({"--data_dir=" + data_dir, "--shards=2", "--max_batch=1",
                          "--debug_handler_delay=150ms", "--shutdown_grace=1s"});
  ASSERT_TRUE(ledgerd.Start());
  const int metrics_port = ledgerd.metrics_port();
  ASSERT_GT(metrics_port, 0) << ledgerd.log();
  auto stub = ConnectedStubFor(ledgerd.target());
  ASSERT_NE(stub, nullptr);
  std::vector<grpc::Status> outcomes(kCalls);
  std::vector<std::thread> callers;
  for (int i = 0; i < kCalls; ++i) {
    callers.emplace_back([&, i] {
      outcomes[i] =
          DepositWithId(*stub, "drain-" + std::to_string(i % 3), "d-" + std::to_string(i));
    });
  }
  // All but at most one a shard (being handled) are known to be queued: far more than the
  // grace can drain, so some must be applied and some refused.
  int64_t arrived = 0;
  ASSERT_TRUE(testing_util::WaitUntil(
      [&] {
        arrived = testing_util::CallsAtShards(metrics_port, 2, "deposit").value_or(0);
        return arrived >= kCalls - 2;
      },
      "the deposits reach the shards", testing_util::kEventTimeout, std::chrono::milliseconds(10)))
      << arrived << " of " << kCalls << " arrived";
  ledgerd.Signal(SIGTERM);
  ASSERT_TRUE(ledgerd.WaitForLog("shutting down")) << ledgerd.log();
  // A new call during the drain is refused at once, definitely unapplied.
  const grpc::Status late = DepositWithId(*stub, "drain-late", "late");
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(ledgerd.WaitForExit(), 0) << ledgerd.log();

  // Refused by the shards, or never sent: the stop began with a GOAWAY and closed the port, so
  // the channel may have found no connection to send it on.
  EXPECT_EQ(late.error_code(), grpc::StatusCode::UNAVAILABLE) << late.error_message();
  EXPECT_THAT(late.error_message(),
              testing::AnyOf(HasSubstr("shutting down; nothing was applied"),
                             testing::StartsWith("failed to connect to all addresses")));
  const int ok = CountOkRestRefusedUnapplied(outcomes);
  const int refused = static_cast<int>(outcomes.size()) - ok;
  EXPECT_GT(ok, 0);
  EXPECT_GT(refused, 0);  // The grace ran out before the queue did.

  // Exactly the OK calls were applied.
  LedgerdProcess restarted({"--metrics_listen=", "--data_dir=" + data_dir, "--shards=2"});
  ASSERT_TRUE(restarted.Start());
  auto after = StubFor(restarted.target());
  int64_t total = 0;
  for (int account = 0; account < 3; ++account) {
    v1::BalanceRequest request;
    request.set_account_id("drain-" + std::to_string(account));
    v1::BalanceResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const grpc::Status status = after->Balance(&context, request, &response);
    if (status.ok()) total += response.balance();
  }
  EXPECT_EQ(total, ok);
  EXPECT_EQ(restarted.Stop(), 0);
}

TEST(LedgerdProcessTest, SighupDrainsLikeSigterm) {
  LedgerdProcess ledgerd({});
  ASSERT_TRUE(ledgerd.Start());
  auto stub = StubFor(ledgerd.target());
  ASSERT_TRUE(Deposit(*stub, "hangup", 3).ok());
  ledgerd.Signal(SIGHUP);
  EXPECT_EQ(ledgerd.WaitForExit(), 0) << ledgerd.log();
  EXPECT_THAT(ledgerd.log(), HasSubstr("received HUP, shutting down"));
  EXPECT_THAT(ledgerd.log(), HasSubstr("stopped cleanly"));
}

TEST(LedgerdProcessTest, AFloodOfUndecodableRequestsLogsAtMostAFewLinesASecond) {
  constexpr int kCalls = 2000;
  LedgerdProcess ledgerd({});
  ASSERT_TRUE(ledgerd.Start());
  grpc::GenericStub generic(
      grpc::CreateChannel(ledgerd.target(), grpc::InsecureChannelCredentials()));
  const std::string not_utf8("\x0a\x02\xff\xfe\x10\x05", 6);
  int invalid = 0;
  const auto send_one = [&] {
    grpc::Slice slice(not_utf8);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::ClientContext context;
    std::promise<grpc::Status> done;
    generic.UnaryCall(&context, "/ledger.v1.Ledger/Deposit", grpc::StubOptions(), &request,
                      &response, [&done](grpc::Status status) { done.set_value(status); });
    if (done.get_future().get().error_code() == grpc::StatusCode::INVALID_ARGUMENT) ++invalid;
  };
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) send_one();
  // The first line let through once the rate limiter's second has passed says how many were
  // dropped: one more call every 100 ms until it is logged.
  int sent_after = 0;
  EXPECT_TRUE(testing_util::WaitUntil(
      [&] {
        send_one();
        ++sent_after;
        return ledgerd.WaitForLog("more log line(s) dropped", std::chrono::milliseconds(100));
      },
      "ledgerd logs how many lines it dropped", testing_util::kEventTimeout,
      std::chrono::milliseconds(0)))
      << ledgerd.log();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(ledgerd.Stop(), 0);
  const std::string log = ledgerd.log();
  EXPECT_EQ(invalid, kCalls + sent_after);
  // protobuf logs each invalid string; ledgerd lets 20 lines a second through and says how many
  // it dropped.
  size_t lines = 0;
  for (size_t at = 0; (at = log.find("ledgerd: protobuf: ", at)) != std::string::npos; ++at) {
    ++lines;
  }
  EXPECT_LE(lines, static_cast<size_t>(2 * 21 * (seconds + 2))) << seconds << " s";
  EXPECT_LT(lines, static_cast<size_t>(kCalls) / 4);
  EXPECT_THAT(log, HasSubstr("more log line(s) dropped (rate limit 20/s)"));
}

TEST(LedgerdProcessTest, SecondSignalExitsAtOnceWithoutDraining) {
  // One call in a 30 s handler and one queued behind it: a drain would take a minute.
  LedgerdProcess ledgerd(
      {"--shards=2", "--max_batch=1", "--debug_handler_delay=30s", "--shutdown_grace=60s"});
  ASSERT_TRUE(ledgerd.Start());
  const int metrics_port = ledgerd.metrics_port();
  ASSERT_GT(metrics_port, 0) << ledgerd.log();
  auto stub = StubFor(ledgerd.target());
  grpc::Status stuck_outcomes[2];
  std::vector<std::thread> stuck_calls;
  stuck_calls.reserve(2);
  for (grpc::Status& outcome : stuck_outcomes) {
    stuck_calls.emplace_back([&] { outcome = Deposit(*stub, "stuck", 1); });
  }
  // One is handled (in no series), so one queued is both arrived.
  ASSERT_TRUE(testing_util::WaitUntil(
      [&] { return testing_util::CallsAtShards(metrics_port, 2, "deposit").value_or(0) >= 1; },
      "a deposit waits behind the stuck one", testing_util::kEventTimeout,
      std::chrono::milliseconds(10)));
  ledgerd.Signal(SIGTERM);
  ASSERT_TRUE(ledgerd.WaitForLog("shutting down")) << ledgerd.log();
  ledgerd.Signal(SIGTERM);
  // Exiting at once means before any handler could finish: not one call was answered OK.
  EXPECT_EQ(ledgerd.WaitForExit(std::chrono::seconds(20)), 1) << ledgerd.log();
  EXPECT_THAT(ledgerd.log(), HasSubstr("second signal, exiting at once"));
  for (std::thread& call : stuck_calls) call.join();
  for (const grpc::Status& outcome : stuck_outcomes) {
    EXPECT_FALSE(outcome.ok()) << "a call was drained although the process was to exit at once";
  }
}

TEST(LedgerdProcessTest, AnEmptyMetricsListenServesNoMetrics) {
  LedgerdProcess ledgerd({"--metrics_listen="});
  ASSERT_TRUE(ledgerd.Start());
  EXPECT_THAT(ledgerd.log(), HasSubstr(", no metrics, "));
  EXPECT_EQ(ledgerd.metrics_port(), 0);
  EXPECT_THAT(ledgerd.ReadPortsFile(), HasSubstr(",\"metrics\":null}"));
  EXPECT_EQ(ledgerd.Stop(), 0);
}

TEST(LedgerdProcessTest, RefusesAPortInUse) {
  LedgerdProcess first({});
  ASSERT_TRUE(first.Start());
  const int port = first.grpc_port();
  Subprocess second(RefusedLedgerdArgs({"--listen=127.0.0.1:" + std::to_string(port)}));
  EXPECT_EQ(second.WaitForExit(), 1);
  EXPECT_EQ(second.output(), "ledgerd: cannot listen on 127.0.0.1:" + std::to_string(port) +
                                 ": the port is in use (--listen)\n");
  EXPECT_EQ(first.Stop(), 0);
}

TEST(LedgerdProcessTest, ALedgerInUseIsRefusedWithOnlyLedgerdsOwnLine) {
  const std::string data_dir_flag = testing_util::NewLedgerDirFlag();
  LedgerdProcess first({"--metrics_listen=", data_dir_flag});
  ASSERT_TRUE(first.Start());
  Subprocess second(
      {testing_util::LedgerdPath(), "--listen=127.0.0.1:0", "--metrics_listen=", data_dir_flag});
  EXPECT_EQ(second.WaitForExit(), 1) << second.output();
  // One line, ledgerd's: RocksDB's own "DB::Open() failed" warning is not printed before it.
  EXPECT_THAT(second.output(), ::testing::StartsWith("ledgerd: data directory "));
  EXPECT_THAT(second.output(), HasSubstr(" is in use by another process ("));
  EXPECT_EQ(second.output().find('\n'), second.output().size() - 1) << second.output();
  EXPECT_EQ(first.Stop(), 0);
}

struct BadFlagCase {
  std::string flag;
  std::string message;
};

class LedgerdBadFlagTest : public testing::TestWithParam<BadFlagCase> {};

TEST_P(LedgerdBadFlagTest, IsRefusedAtStartWithExitTwoAndOnlyItsMessage) {
  Subprocess ledgerd(RefusedLedgerdArgs({"--listen=127.0.0.1:0", GetParam().flag}));
  EXPECT_EQ(ledgerd.WaitForExit(), 2) << ledgerd.output();
  EXPECT_EQ(ledgerd.output(), "ledgerd: " + GetParam().message +
                                  "\n`ledgerd --help` explains the usage and every flag\n");
}

INSTANTIATE_TEST_SUITE_P(
    Flags, LedgerdBadFlagTest,
    testing::Values(
        BadFlagCase{"--shards=1", "--shards must be 2 to 1024; got 1"},
        // The cluster's flags need --node_id (docs/replication.md).
        BadFlagCase{"--peers=1=127.0.0.1:7001",
                    "--peers is for a cluster replica: give --node_id too"},
        BadFlagCase{"--peer_tls_ca_file=ca.pem",
                    "--peer_tls_ca_file is for a cluster replica: give --node_id too"},
        BadFlagCase{"--fair_share_by=ip",
                    "--fair_share_by must be address or connection; got \"ip\""},
        // Plaintext beyond loopback only when asked for by name (or with TLS: tls_e2e_test.cc).
        BadFlagCase{"--listen=0.0.0.0:0",
                    "--listen=0.0.0.0:0 would serve gRPC in plaintext, without TLS or "
                    "authentication, beyond this machine: give --tls_cert_file and "
                    "--tls_key_file (docs/deployment.md), listen on loopback (127.0.0.1, the "
                    "default), or say --plaintext_beyond_loopback to mean it"},
        BadFlagCase{"--listen=:0",
                    "--listen=:0 would serve gRPC in plaintext, without TLS or authentication, "
                    "beyond this machine: give --tls_cert_file and --tls_key_file "
                    "(docs/deployment.md), listen on loopback (127.0.0.1, the default), or say "
                    "--plaintext_beyond_loopback to mean it"},
        BadFlagCase{"--shards=1025", "--shards must be 2 to 1024; got 1025"},
        BadFlagCase{"--shards=two",
                    "Illegal value 'two' specified for flag 'shards'; an integer is needed"},
        BadFlagCase{"--shard=2", "Unknown command line flag 'shard'; did you mean --shards?"},
        BadFlagCase{"--mailbox_capacity=0", "--mailbox_capacity must be 1 to 16777216; got 0"},
        BadFlagCase{"--mailbox_capacity=16777217",
                    "--mailbox_capacity must be 1 to 16777216; got 16777217"},
        BadFlagCase{"--max_in_flight=0", "--max_in_flight must be 1 to 16777216; got 0"},
        BadFlagCase{"--max_in_flight=16777217",
                    "--max_in_flight must be 1 to 16777216; got 16777217"},
        BadFlagCase{"--max_batch=0", "--max_batch must be 1 to 65536; got 0"},
        BadFlagCase{"--overdraft_limit=-1", "--overdraft_limit must be at least 0; got -1"},
        BadFlagCase{"--shutdown_grace=-1s", "--shutdown_grace must be at least 0; got -1s"},
        BadFlagCase{"--shutdown_grace=soon",
                    "Illegal value 'soon' specified for flag 'shutdown_grace'; durations need a "
                    "unit, e.g. 5s, 250ms or 1m30s"},
        BadFlagCase{"--shutdown_grace=5",
                    "Illegal value '5' specified for flag 'shutdown_grace'; durations need a "
                    "unit, e.g. 5s, 250ms or 1m30s"},
        BadFlagCase{"--debug_handler_delay=-5ms",
                    "--debug_handler_delay must be at least 0; got -5ms"},
        BadFlagCase{"--listen=",
                    "--listen needs HOST:PORT, e.g. 127.0.0.1:50051 or :50051; got an empty value"},
        BadFlagCase{"--listen=localhost",
                    "--listen needs HOST:PORT, e.g. 127.0.0.1:50051 or :50051; got \"localhost\": "
                    "no port"},
        BadFlagCase{"--listen=:65536",
                    "--listen needs HOST:PORT, e.g. 127.0.0.1:50051 or :50051; got \":65536\": "
                    "port 65536 is out of range (0 to 65535; 0 picks a free port)"},
        BadFlagCase{"--listen=::1:50051",
                    "--listen needs HOST:PORT, e.g. 127.0.0.1:50051 or :50051; got \"::1:50051\": "
                    "an IPv6 address needs brackets, e.g. [::1]:50051"},
        BadFlagCase{"--metrics_listen=9766",
                    "--metrics_listen needs HOST:PORT, e.g. 127.0.0.1:9766 or :9766; got "
                    "\"9766\": no port"},
        BadFlagCase{"--metrics_listen=localhost:metrics",
                    "--metrics_listen needs HOST:PORT, e.g. 127.0.0.1:9464 or :9464; got "
                    "\"localhost:metrics\": port \"metrics\" is not a number"},
        BadFlagCase{"--metrics_listen=[::1]:9464",
                    "--metrics_listen takes an IPv4 address or a host name (the metrics HTTP "
                    "server has no IPv6); got \"[::1]:9464\""},
        BadFlagCase{
            "serve",
            "unexpected argument \"serve\"; the commands are `init`, `upgrade` and `restore`"},
        BadFlagCase{
            "int",
            "unexpected argument \"int\"; the commands are `init`, `upgrade` and `restore` (did "
            "you mean init?)"},
        BadFlagCase{
            "upgade",
            "unexpected argument \"upgade\"; the commands are `init`, `upgrade` and `restore` "
            "(did you mean upgrade?)"},
        BadFlagCase{"--log_segment_mib=0", "--log_segment_mib must be 1 to 1024; got 0"},
        BadFlagCase{"--log_segment_mib=1025", "--log_segment_mib must be 1 to 1024; got 1025"},
        BadFlagCase{"--max_concurrent_streams=0",
                    "--max_concurrent_streams must be 1 to 100000; got 0"},
        BadFlagCase{"--max_concurrent_streams=100001",
                    "--max_concurrent_streams must be 1 to 100000; got 100001"},
        BadFlagCase{"--transport_memory_mb=15",
                    "--transport_memory_mb must be 16 to 65536; got 15"},
        BadFlagCase{"--max_receive_message_bytes=1023",
                    "--max_receive_message_bytes must be 1024 to 67108864; got 1023"},
        BadFlagCase{"--max_connection_age=0s", "--max_connection_age must be at least 1ms; got 0"},
        BadFlagCase{"--handshake_timeout=-1s", "--handshake_timeout must be at least 1ms; got -1s"},
        BadFlagCase{"--no_such_flag=1", "Unknown command line flag 'no_such_flag'"},
        BadFlagCase{"--durability=fast", "--durability must be sync, async or none; got \"fast\""}),
    [](const testing::TestParamInfo<BadFlagCase>& info) {
      std::string name;
      for (char c : info.param.flag) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return name;
    });

TEST(LedgerdProcessTest, HelpExplainsEveryFlag) {
  Subprocess ledgerd(RefusedLedgerdArgs({"--help"}));
  EXPECT_EQ(ledgerd.WaitForExit(), 0);
  for (const char* flag : {"--listen",
                           "--shards",
                           "--mailbox_capacity",
                           "--max_in_flight",
                           "--max_batch",
                           "--overdraft_limit",
                           "--shutdown_grace",
                           "--debug_handler_delay",
                           "--data_dir",
                           "--durability",
                           "--require_request_id",
                           "--max_concurrent_streams",
                           "--transport_memory_mb",
                           "--max_receive_message_bytes",
                           "--max_connection_idle",
                           "--max_connection_age",
                           "--handshake_timeout",
                           "--keepalive_time",
                           "--min_client_ping_interval",
                           "--verbose",
                           "--ports_file",
                           "--version"}) {
    EXPECT_THAT(ledgerd.output(), HasSubstr(flag)) << flag;
  }
  // Both forms: creating a ledger, and serving one.
  EXPECT_THAT(ledgerd.output(), HasSubstr("ledgerd init --data_dir=DIR"));
  EXPECT_THAT(ledgerd.output(), HasSubstr("serve the ledger in DIR (made by `ledgerd init`)"));
  // Safe by default: a bare ledgerd is reachable from this machine only.
  EXPECT_THAT(ledgerd.output(), HasSubstr("  --listen=STRING  (default: 127.0.0.1:50051)\n"));
  EXPECT_THAT(ledgerd.output(),
              HasSubstr("  --metrics_listen=STRING  (default: 127.0.0.1:9464)\n"));
  EXPECT_THAT(ledgerd.output(), ::testing::Not(HasSubstr("Flags from")));
  EXPECT_THAT(ledgerd.output(), ::testing::Not(HasSubstr("No flags matched")));
  Subprocess short_form({testing_util::LedgerdPath(), "-h"});
  EXPECT_EQ(short_form.WaitForExit(), 0);
  EXPECT_EQ(short_form.output(), ledgerd.output());
}

TEST(LedgerdProcessTest, VersionNamesTheCommitAndBuildType) {
  Subprocess ledgerd({testing_util::LedgerdPath(), "--version"});
  EXPECT_EQ(ledgerd.WaitForExit(), 0);
  EXPECT_THAT(ledgerd.output(),
              ::testing::MatchesRegex("ledgerd [0-9]+\\.[0-9]+\\.[0-9]+ \\(commit "
                                      "([0-9a-f]+|unknown), [A-Za-z_ ]+ build\\)\n"));
}

TEST(LedgerdProcessTest, ListenWithOnlyAPortServesOnEveryInterface) {
  LedgerdProcess ledgerd({"--listen=:0", "--plaintext_beyond_loopback"});
  ASSERT_TRUE(ledgerd.Start());
  // The start-up line says what was allowed, and by which flag.
  EXPECT_THAT(
      ledgerd.log(),
      HasSubstr(", gRPC plaintext (no TLS) beyond loopback (--plaintext_beyond_loopback)\n"));
  EXPECT_THAT(ledgerd.ReadPortsFile(),
              HasSubstr("\"grpc\":\"0.0.0.0:" + std::to_string(ledgerd.grpc_port()) + "\""));
  int64_t balance = 0;
  ASSERT_TRUE(Deposit(*StubFor("127.0.0.1:" + std::to_string(ledgerd.grpc_port())), "everywhere", 7,
                      &balance)
                  .ok());
  EXPECT_EQ(balance, 7);
  EXPECT_EQ(ledgerd.Stop(), 0) << ledgerd.log();
}

// Every file under `dir` with its size and modification time, one per line.
std::string Listing(const std::filesystem::path& dir) {
  std::string listing;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    listing += entry.path().string() + " " +
               std::to_string(entry.is_regular_file() ? entry.file_size() : 0) + " " +
               std::to_string(entry.last_write_time().time_since_epoch().count()) + "\n";
  }
  return listing;
}

TEST(LedgerdProcessTest, AStartRefusedForABusyPortTouchesNoDataDirectory) {
  LedgerdProcess first({});
  ASSERT_TRUE(first.Start());
  const int port = first.grpc_port();
  const int metrics_port = first.metrics_port();
  ASSERT_GT(metrics_port, 0) << first.log();
  testing_util::ScratchDir scratch;
  const std::string ledger_dir = scratch.Sub("ledger");
  testing_util::InitLedgerDir(ledger_dir);
  const std::string before = Listing(ledger_dir);
  struct {
    std::string listen, metrics_listen, data_dir, message;
  } cases[] = {
      {"127.0.0.1:" + std::to_string(port), "", scratch.Sub("new"),
       "ledgerd: cannot listen on 127.0.0.1:" + std::to_string(port) +
           ": the port is in use (--listen)\n"},
      {"127.0.0.1:" + std::to_string(port), "127.0.0.1:0", ledger_dir,
       "ledgerd: cannot listen on 127.0.0.1:" + std::to_string(port) +
           ": the port is in use (--listen)\n"},
      {"127.0.0.1:0", "127.0.0.1:" + std::to_string(metrics_port), ledger_dir,
       "ledgerd: cannot listen on 127.0.0.1:" + std::to_string(metrics_port) +
           ": the port is in use (--metrics_listen)\n"},
  };
  for (const auto& c : cases) {
    Subprocess second({testing_util::LedgerdPath(), "--listen=" + c.listen,
                       "--metrics_listen=" + c.metrics_listen, "--data_dir=" + c.data_dir});
    EXPECT_EQ(second.WaitForExit(), 1) << second.output();
    // Only ledgerd's own line: no gRPC, RocksDB or civetweb noise before it.
    EXPECT_EQ(second.output(), c.message);
  }
  EXPECT_FALSE(std::filesystem::exists(scratch.Sub("new")));
  EXPECT_EQ(Listing(ledger_dir), before);
  EXPECT_EQ(first.Stop(), 0);
}

}  // namespace
}  // namespace ledger
