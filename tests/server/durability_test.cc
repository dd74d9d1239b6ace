// ledgerd with a data directory, in-process over real gRPC: restarts, re-sharding, idempotency,
// History, and storage failures (injected, and a real full filesystem).
#include <sys/mount.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "tests/http_get.h"
#include "tests/metrics_text.h"
#include "tests/scratch_dir.h"
#include "tests/scratch_ledger.h"
#include "tests/server/test_server.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;
using testing_util::Balance;
using testing_util::Deposit;
using testing_util::DurableOptions;
using testing_util::History;
using testing_util::ScratchDir;
using testing_util::ScratchLedger;
using testing_util::TestServer;
using testing_util::Withdraw;

// Every account's balance and the sequence numbers of its history, newest first.
struct AccountView {
  int64_t balance = 0;
  std::vector<uint64_t> sequences;
  friend bool operator==(const AccountView&, const AccountView&) = default;
};

std::map<std::string, AccountView> ViewOf(v1::Ledger::Stub& stub,
                                          const std::vector<std::string>& accounts) {
  std::map<std::string, AccountView> view;
  for (const std::string& id : accounts) {
    AccountView& account = view[id];
    const testing_util::CallResult balance = Balance(stub, id);
    EXPECT_TRUE(balance.status.ok()) << id << ": " << balance.status.error_message();
    account.balance = balance.balance;
    const testing_util::HistoryResult history = History(stub, id, 1000);
    EXPECT_TRUE(history.status.ok()) << id << ": " << history.status.error_message();
    for (const auto& entry : history.response.entries()) {
      account.sequences.push_back(entry.sequence());
    }
  }
  return view;
}

std::vector<std::string> MakeLoad(v1::Ledger::Stub& stub, int accounts) {
  std::vector<std::string> ids;
  for (int i = 0; i < accounts; ++i) {
    ids.push_back(absl::StrCat("acct-", i));
    for (int k = 1; k <= 1 + i % 4; ++k) {
      EXPECT_TRUE(Deposit(stub, ids.back(), 100 * k).status.ok());
    }
    if (i % 3 == 0) {
      EXPECT_TRUE(Withdraw(stub, ids.back(), 50).status.ok());
    }
  }
  return ids;
}

TEST(DurabilityTest, AGracefulRestartBringsBackEveryBalanceAndHistory) {
  ScratchLedger scratch;
  std::vector<std::string> ids;
  std::map<std::string, AccountView> before;
  {
    TestServer server(DurableOptions(scratch.path()));
    auto stub = server.NewStub();
    ids = MakeLoad(*stub, 30);
    before = ViewOf(*stub, ids);
  }
  TestServer restarted(DurableOptions(scratch.path()));
  EXPECT_EQ(restarted.server().recovered_accounts(), 30);
  auto stub = restarted.NewStub();
  EXPECT_EQ(ViewOf(*stub, ids), before);
  EXPECT_EQ(before["acct-3"].balance, 100 + 200 + 300 + 400 - 50);
  EXPECT_EQ(before["acct-3"].sequences, (std::vector<uint64_t>{5, 4, 3, 2, 1}));
  // Sequence numbers continue where they stopped.
  ASSERT_TRUE(Deposit(*stub, "acct-3", 1).status.ok());
  EXPECT_EQ(History(*stub, "acct-3", 1).response.entries(0).sequence(), 6u);
}

TEST(DurabilityTest, ARestartWithAnotherShardCountKeepsEveryAccountOnItsNewShard) {
  ScratchLedger scratch;
  std::vector<std::string> ids;
  std::map<std::string, AccountView> before;
  {
    TestServer server(DurableOptions(scratch.path(), 2));
    auto stub = server.NewStub();
    ids = MakeLoad(*stub, 40);
    before = ViewOf(*stub, ids);
  }
  TestServer resharded(DurableOptions(scratch.path(), 5));
  auto stub = resharded.NewStub();
  EXPECT_EQ(ViewOf(*stub, ids), before);
  // Each account answers from the shard the new count assigns it: writes keep working there.
  for (const std::string& id : ids) {
    EXPECT_EQ(Deposit(*stub, id, 1).balance, before[id].balance + 1) << id;
  }
}

TEST(DurabilityTest, ARetryWithTheSameRequestIdIsAppliedOnceEvenAcrossARestart) {
  ScratchLedger scratch;
  {
    TestServer server(DurableOptions(scratch.path()));
    auto stub = server.NewStub();
    EXPECT_EQ(Deposit(*stub, "alice", 100, "pay-1").balance, 100);
    EXPECT_EQ(Deposit(*stub, "alice", 100, "pay-1").balance, 100);
    const testing_util::CallResult refused = Withdraw(*stub, "alice", 500, "pay-2");
    EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }
  TestServer restarted(DurableOptions(scratch.path()));
  auto stub = restarted.NewStub();
  EXPECT_EQ(Deposit(*stub, "alice", 100, "pay-1").balance, 100);
  const testing_util::CallResult replayed = Withdraw(*stub, "alice", 500, "pay-2");
  EXPECT_EQ(replayed.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(replayed.status.error_message(),
            "insufficient funds: balance 100, requested 500, overdraft limit 0 (the recorded "
            "result of an earlier call with request_id \"pay-2\"; nothing was applied now)");
  EXPECT_EQ(Balance(*stub, "alice").balance, 100);
  EXPECT_EQ(History(*stub, "alice").response.entries_size(), 1);
}

TEST(DurabilityTest, ARequestIdUsedForAnotherAmountIsAlreadyExistsAndSaysWhatDiffers) {
  ScratchLedger scratch;
  TestServer server(DurableOptions(scratch.path()));
  auto stub = server.NewStub();
  ASSERT_TRUE(Deposit(*stub, "alice", 100, "pay-1").status.ok());
  const testing_util::CallResult reused = Deposit(*stub, "alice", 7, "pay-1");
  EXPECT_EQ(reused.status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(reused.status.error_message(),
            "request_id \"pay-1\" was already used on account alice for a deposit of 100; this "
            "call is a deposit of 7. Nothing was applied: use a new request_id for a new "
            "operation");
  EXPECT_EQ(Withdraw(*stub, "alice", 100, "pay-1").status.error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(Balance(*stub, "alice").balance, 100);
}

TEST(DurabilityTest, AMalformedRequestIdIsInvalidArgumentAndChangesNothing) {
  ScratchLedger scratch;
  TestServer server(DurableOptions(scratch.path()));
  auto stub = server.NewStub();
  ASSERT_TRUE(Deposit(*stub, "alice", 100).status.ok());
  const testing_util::CallResult too_long = Deposit(*stub, "alice", 1, std::string(129, 'r'));
  EXPECT_EQ(too_long.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(too_long.status.error_message(),
            "request_id must be empty or 1 to 128 bytes of printable ASCII (0x20 to 0x7E); got "
            "129 bytes");
  const testing_util::CallResult control = Withdraw(*stub, "alice", 1, "line\nbreak");
  EXPECT_THAT(control.status.error_message(), HasSubstr("byte 4 is 0x0A, which is not allowed"));
  EXPECT_TRUE(Deposit(*stub, "alice", 1, std::string(128, 'r')).status.ok());
  EXPECT_EQ(Balance(*stub, "alice").balance, 101);
}

TEST(DurabilityTest, HistoryPagesNewestFirstWithEveryField) {
  ScratchLedger scratch;
  TestServer server(DurableOptions(scratch.path()));
  auto stub = server.NewStub();
  const int64_t start = absl::ToUnixSeconds(absl::Now());
  for (int i = 1; i <= 6; ++i)
    ASSERT_TRUE(Deposit(*stub, "bob", i, absl::StrCat("d", i)).status.ok());
  ASSERT_TRUE(Withdraw(*stub, "bob", 4).status.ok());

  std::vector<uint64_t> sequences;
  std::string token;
  int pages = 0;
  do {
    const testing_util::HistoryResult page = History(*stub, "bob", 3, token);
    ASSERT_TRUE(page.status.ok()) << page.status.error_message();
    for (const auto& entry : page.response.entries()) sequences.push_back(entry.sequence());
    token = page.response.next_page_token();
    ++pages;
  } while (!token.empty() && pages < 10);
  EXPECT_EQ(sequences, (std::vector<uint64_t>{7, 6, 5, 4, 3, 2, 1}));
  EXPECT_EQ(pages, 3);

  const testing_util::HistoryResult newest = History(*stub, "bob", 2);
  ASSERT_EQ(newest.response.entries_size(), 2);
  const v1::HistoryEntry& withdrawal = newest.response.entries(0);
  EXPECT_EQ(withdrawal.operation(), v1::OPERATION_WITHDRAW);
  EXPECT_EQ(withdrawal.amount(), 4);
  EXPECT_EQ(withdrawal.balance_after(), 21 - 4);
  EXPECT_EQ(withdrawal.request_id(), "");
  EXPECT_GE(withdrawal.time().seconds(), start);
  EXPECT_LE(withdrawal.time().seconds(), absl::ToUnixSeconds(absl::Now()));
  const v1::HistoryEntry& deposit = newest.response.entries(1);
  EXPECT_EQ(deposit.operation(), v1::OPERATION_DEPOSIT);
  EXPECT_EQ(deposit.amount(), 6);
  EXPECT_EQ(deposit.balance_after(), 21);
  EXPECT_EQ(deposit.request_id(), "d6");
}

TEST(DurabilityTest, HistoryRefusesBadPagesAndUnknownAccounts) {
  ScratchLedger scratch;
  TestServer server(DurableOptions(scratch.path()));
  auto stub = server.NewStub();
  ASSERT_TRUE(Deposit(*stub, "bob", 1).status.ok());
  EXPECT_EQ(History(*stub, "nobody").status.error_code(), grpc::StatusCode::NOT_FOUND);
  const testing_util::HistoryResult too_big = History(*stub, "bob", 1001);
  EXPECT_EQ(too_big.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(too_big.status.error_message(), "page_size must be 1 to 1000, or 0 for 50; got 1001");
  EXPECT_EQ(History(*stub, "bob", -1).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const testing_util::HistoryResult bad_token = History(*stub, "bob", 0, "page-two");
  EXPECT_EQ(bad_token.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad_token.status.error_message(), HasSubstr("is not one this server issued"));
  EXPECT_EQ(History(*stub, "bad id!").status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(DurabilityTest, HistoryParsesPageTokensStrictlyAndQuotesOnlyAShortPrefix) {
  ScratchLedger scratch;
  TestServer server(DurableOptions(scratch.path()));
  auto stub = server.NewStub();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Deposit(*stub, "bob", 1).status.ok());
  const testing_util::HistoryResult first = History(*stub, "bob", 1);
  ASSERT_TRUE(first.status.ok());
  ASSERT_EQ(first.response.next_page_token(), "2");
  EXPECT_EQ(History(*stub, "bob", 1, "2").response.entries(0).sequence(), 2u);
  // Each of these would have been read as page 2 (or 3) by a lenient parser.
  for (const std::string token :
       {" 2", "+2", "2\n", "02", "2x", "0", "-2", "18446744073709551616"}) {
    const testing_util::HistoryResult refused = History(*stub, "bob", 1, token);
    EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << token;
  }
  // A huge token is refused with a short message: it must not grow the trailers past gRPC's
  // metadata limit (which turned it into RESOURCE_EXHAUSTED) nor echo megabytes back.
  const std::string huge(60000, '7');  // Just under --max_receive_message_bytes (64 KiB).
  const testing_util::HistoryResult refused = History(*stub, "bob", 1, huge);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.status.error_message(),
              HasSubstr("page_token \"777777777777777777777777...\" (60000 bytes)"));
  EXPECT_LT(refused.status.error_message().size(), 300u);
  const testing_util::HistoryResult binary = History(*stub, "bob", 1, std::string("\x01\"x", 3));
  EXPECT_THAT(binary.status.error_message(), HasSubstr("page_token \"\\x01\\\"x\" (3 bytes)"));
}

TEST(DurabilityTest, RequireRequestIdRefusesWritesWithoutOneAndAppliesNothing) {
  ScratchLedger scratch;
  ServerOptions options = DurableOptions(scratch.path());
  options.require_request_id = true;
  TestServer server(options);
  auto stub = server.NewStub();
  ASSERT_EQ(Deposit(*stub, "erin", 100, "first").balance, 100);
  const testing_util::CallResult unnamed = Deposit(*stub, "erin", 5);
  EXPECT_EQ(unnamed.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(unnamed.status.error_message(),
              HasSubstr("request_id is required by this server (--require_request_id)"));
  EXPECT_EQ(Withdraw(*stub, "erin", 5).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Balance(*stub, "erin").balance, 100);  // Reads need no request_id.
}

TEST(DurabilityTest, WithoutDurabilityHistoryIsFailedPrecondition) {
  TestServer server;  // --durability=none
  auto stub = server.NewStub();
  ASSERT_TRUE(Deposit(*stub, "bob", 1).status.ok());
  const testing_util::HistoryResult history = History(*stub, "bob");
  EXPECT_EQ(history.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(history.status.error_message(),
            "this server keeps no history: it runs with --durability=none (memory only)");
}

double StorageErrors(TestServer& server) {
  return server.server().metrics().shard(0).storage_errors() +
         server.server().metrics().shard(1).storage_errors();
}

TEST(DurabilityTest, AnInjectedWriteFailureIsUnavailableCountedAndLeavesReadsServed) {
  ScratchLedger scratch;
  auto failing = std::make_shared<std::atomic<bool>>(false);
  ServerOptions options = DurableOptions(scratch.path());
  ServerTestHooks hooks;
  hooks.store.write_fault = [failing] {
    return failing->load() ? absl::UnavailableError("injected: disk unplugged") : absl::OkStatus();
  };
  {
    TestServer server(options, hooks);
    auto stub = server.NewStub();
    ASSERT_EQ(Deposit(*stub, "carol", 100).balance, 100);
    failing->store(true);
    const testing_util::CallResult failed = Deposit(*stub, "carol", 50, "during-outage");
    EXPECT_EQ(failed.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(failed.status.error_message(), HasSubstr("outcome unknown"));
    EXPECT_THAT(failed.status.error_message(),
                HasSubstr("Retry with the same request_id \"during-outage\""));
    const testing_util::CallResult unnamed = Withdraw(*stub, "carol", 10);
    EXPECT_EQ(unnamed.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(unnamed.status.error_message(), HasSubstr("carried no request_id"));
    EXPECT_EQ(Balance(*stub, "carol").balance, 100);
    EXPECT_EQ(StorageErrors(server), 2);
    failing->store(false);
    EXPECT_EQ(Deposit(*stub, "carol", 50, "during-outage").balance, 150);
  }
  TestServer restarted(DurableOptions(scratch.path()));
  auto stub = restarted.NewStub();
  EXPECT_EQ(Balance(*stub, "carol").balance, 150);
  EXPECT_EQ(History(*stub, "carol").response.entries_size(), 2);
}

// A real ENOSPC: a 4 MiB tmpfs filled to the last byte. Needs root (mount), which the CI
// machines give; elsewhere the test says why it cannot run.
class FullFilesystemTest : public testing::Test {
 protected:
  void SetUp() override {
    mount_point_ = scratch_.Sub("tiny");
    std::filesystem::create_directory(mount_point_);
    if (mount("ledgerd-test", mount_point_.c_str(), "tmpfs", 0, "size=4m") != 0) {
      GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno)
                   << "); this test needs root";
    }
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) umount2(mount_point_.c_str(), MNT_DETACH);
  }

  // Writes a file until the filesystem refuses more.
  void FillUp() {
    std::ofstream filler(filler_path(), std::ios::binary);
    const std::string chunk(4096, 'x');
    while (filler.write(chunk.data(), chunk.size())) {
      filler.flush();
    }
  }
  std::string filler_path() const { return mount_point_ + "/filler"; }

  ScratchDir scratch_;
  std::string mount_point_;
  bool mounted_ = false;
};

TEST_F(FullFilesystemTest, NoCallIsAcknowledgedThatIsNotOnDiskAndWritesResumeWhenSpaceReturns) {
  const std::string data_dir = mount_point_ + "/data";
  // 16 KiB log segments: a segment is preallocated, so appends go on into it on a full disk, and
  // the first one that needs a new segment is refused.
  constexpr int64_t kSegmentBytes = 16 << 10;
  testing_util::InitLedger(data_dir, kSegmentBytes);
  ServerOptions options = DurableOptions(data_dir);
  options.storage.log_segment_bytes = kSegmentBytes;
  int64_t acknowledged = 0;
  {
    TestServer server(options);
    auto stub = server.NewStub();
    ASSERT_TRUE(Deposit(*stub, "dave", 1000).status.ok());
    acknowledged += 1000;
    FillUp();
    int failures = 0;
    for (int i = 0; i < 200 && failures < 5; ++i) {
      const testing_util::CallResult result =
          Deposit(*stub, "dave", 1, absl::StrCat("full-", i, std::string(100, '.')));
      if (result.status.ok()) {
        ++acknowledged;
      } else {
        EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE)
            << result.status.error_message();
        ++failures;
      }
    }
    EXPECT_EQ(failures, 5) << "the full filesystem never failed a write";
    EXPECT_GE(StorageErrors(server), 5);
    EXPECT_EQ(Balance(*stub, "dave").balance, acknowledged);  // Reads are still served.
    // History is served while writes are refused (it once dereferenced a closed database
    // handle and crashed the server).
    const testing_util::HistoryResult history = History(*stub, "dave", 1000);
    const testing_util::HistoryResult unknown = History(*stub, "nobody", 10);
    if (history.status.ok()) {
      EXPECT_GE(history.response.entries_size(), 1);
    } else {
      EXPECT_EQ(history.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    }
    EXPECT_THAT(unknown.status.error_code(),
                testing::AnyOf(grpc::StatusCode::NOT_FOUND, grpc::StatusCode::UNAVAILABLE));
    EXPECT_EQ(Balance(*stub, "dave").balance, acknowledged);  // Still alive.

    std::filesystem::remove(filler_path());
    // Each attempt has its own request_id and counts only when acknowledged, so a refused one
    // that is retried cannot be counted twice.
    int attempt = 0;
    EXPECT_TRUE(testing_util::WaitUntil(
        [&] {
          const testing_util::CallResult result =
              Deposit(*stub, "dave", 1, absl::StrCat("after-", attempt++));
          if (result.status.ok()) ++acknowledged;
          return result.status.ok();
        },
        "writes resume after space was freed", testing_util::kEventTimeout,
        std::chrono::milliseconds(50)));
    EXPECT_EQ(Balance(*stub, "dave").balance, acknowledged);
  }
  TestServer restarted(options);
  auto stub = restarted.NewStub();
  EXPECT_EQ(Balance(*stub, "dave").balance, acknowledged);
}

TEST(DurabilityTest, ARefusedDataDirectoryFailsTheStartWithTheReason) {
  ScratchDir scratch;
  std::ofstream(scratch.Sub("thesis.tex")) << "\\documentclass{article}\n";
  absl::StatusOr<std::unique_ptr<LedgerServer>> server =
      LedgerServer::Start(DurableOptions(scratch.path()));
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(server.status().message(),
              HasSubstr("it holds files (such as \"thesis.tex\") but no ledgerd database"));
  EXPECT_TRUE(std::filesystem::exists(scratch.Sub("thesis.tex")));
}

}  // namespace
}  // namespace ledger
