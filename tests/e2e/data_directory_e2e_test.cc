// The ledgerd binary and its data directory as an operator meets them: `ledgerd init` creates a
// ledger and refuses anything else, the server refuses a directory without a ledger, and a
// directory deleted while serving stops the writes instead of losing them, and a ledger whose
// accounts disagree with their journal is never served.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ledger/v1/ledger.grpc.pb.h"
#include "storage/rocksdb_store.h"
#include "tests/e2e/ledger_dir.h"
#include "tests/e2e/ledgerd_process.h"
#include "tests/e2e/subprocess.h"
#include "tests/http_get.h"
#include "tests/scratch_dir.h"
#include "tests/test_paths.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;
using testing_util::InitLedgerDir;
using testing_util::LedgerdProcess;
using testing_util::ScratchDir;
using testing_util::Subprocess;

// Runs ledgerd with `args` to its exit; its exit code (nullopt when killed) and its output.
struct Finished {
  std::optional<int> exit_code;
  std::string output;
};
Finished RunLedgerd(std::vector<std::string> args) {
  args.insert(args.begin(), testing_util::LedgerdPath());
  Subprocess ledgerd(args);
  Finished run;
  run.exit_code = ledgerd.WaitForExit();
  run.output = ledgerd.output();
  return run;
}

std::vector<std::string> ServeFlags(const std::string& data_dir) {
  return {"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0", "--data_dir=" + data_dir};
}

grpc::Status Deposit(const std::shared_ptr<grpc::Channel>& channel, const std::string& account,
                     int64_t amount, int64_t* balance = nullptr) {
  v1::DepositRequest request;
  request.set_account_id(account);
  request.set_amount(amount);
  request.set_request_id("deposit-" + account + "-" + std::to_string(amount));
  v1::DepositResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Status status = v1::Ledger::NewStub(channel)->Deposit(&context, request, &response);
  if (balance != nullptr) *balance = response.balance();
  return status;
}

grpc::health::v1::HealthCheckResponse::ServingStatus Health(
    const std::shared_ptr<grpc::Channel>& channel) {
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Status status =
      grpc::health::v1::Health::NewStub(channel)->Check(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response.status();
}

TEST(LedgerdInitTest, CreatesANewLedgerThatTheServerThenServes) {
  ScratchDir scratch;
  const std::string data_dir = scratch.Sub("ledger");
  const Finished init = RunLedgerd({"init", "--data_dir=" + data_dir});
  EXPECT_EQ(init.exit_code, 0) << init.output;
  EXPECT_THAT(init.output, HasSubstr("created a new, empty ledger "));
  EXPECT_THAT(init.output, HasSubstr(" in " + data_dir));
  EXPECT_TRUE(std::filesystem::exists(data_dir + "/CURRENT"));

  LedgerdProcess ledgerd(ServeFlags(data_dir));
  ASSERT_TRUE(ledgerd.Start());
  EXPECT_THAT(ledgerd.log(), HasSubstr("recovered 0 accounts of ledger "));
  EXPECT_EQ(ledgerd.Stop(), 0) << ledgerd.log();
}

TEST(LedgerdInitTest, RefusesADirectoryThatHoldsAnythingAndChangesNothing) {
  ScratchDir scratch;
  std::ofstream(scratch.Sub("notes.txt")) << "keep me\n";
  const Finished over_files = RunLedgerd({"init", "--data_dir=" + scratch.path()});
  EXPECT_EQ(over_files.exit_code, 1);
  EXPECT_THAT(over_files.output, HasSubstr("it is not empty (it holds \"notes.txt\")"));
  EXPECT_FALSE(std::filesystem::exists(scratch.Sub("CURRENT")));

  const std::string ledger_dir = scratch.Sub("ledger");
  InitLedgerDir(ledger_dir);
  const Finished over_ledger = RunLedgerd({"init", "--data_dir=" + ledger_dir});
  EXPECT_EQ(over_ledger.exit_code, 1);
  EXPECT_THAT(over_ledger.output, HasSubstr("it already holds a database"));
}

TEST(LedgerdInitTest, AStrayArgumentIsAUsageError) {
  const Finished run = RunLedgerd({"inti", "--data_dir=/nonexistent"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.output, HasSubstr("unexpected argument \"inti\""));
}

TEST(LedgerdDataDirectoryTest, ServerRefusesAMissingOrEmptyDirectoryAndSaysToInit) {
  ScratchDir scratch;
  const std::string missing = scratch.Sub("not-mounted");
  const Finished on_missing = RunLedgerd(ServeFlags(missing));
  EXPECT_EQ(on_missing.exit_code, 1);
  EXPECT_THAT(on_missing.output, HasSubstr("it does not exist, so it holds no ledger"));
  EXPECT_THAT(on_missing.output, HasSubstr("ledgerd init --data_dir=" + missing));
  EXPECT_FALSE(std::filesystem::exists(missing));  // Nothing was created.

  const Finished on_empty = RunLedgerd(ServeFlags(scratch.path()));
  EXPECT_EQ(on_empty.exit_code, 1);
  EXPECT_THAT(on_empty.output, HasSubstr("it is empty, so it holds no ledger"));
  EXPECT_TRUE(std::filesystem::is_empty(scratch.path()));
}

TEST(LedgerdDataDirectoryTest, ServerRefusesALedgerWhoseAccountDisagreesWithItsJournal) {
  ScratchDir scratch;
  InitLedgerDir(scratch.path());
  {
    storage::StoreOptions options;
    options.data_dir = scratch.path();
    absl::StatusOr<std::unique_ptr<storage::RocksDbStore>> store =
        storage::RocksDbStore::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    // As a corrupted directory could hold it: bob's record says 70, his newest entry 60.
    BatchWrite batch;
    batch.accounts = {{"alice", {.balance = 100, .sequence = 1}},
                      {"bob", {.balance = 70, .sequence = 2}}};
    const auto entry = [](const char* account, uint64_t sequence, int64_t balance_after) {
      return JournalEntry{.account_id = account,
                          .sequence = sequence,
                          .kind = EntryKind::kDeposit,
                          .amount = 10,
                          .balance_after = balance_after,
                          .request_id = "",
                          .time = absl::FromUnixSeconds(1'800'000'000)};
    };
    batch.journal = {entry("alice", 1, 100), entry("bob", 1, 50), entry("bob", 2, 60)};
    ASSERT_TRUE((*store)->Write(batch).ok());
  }
  ScratchDir elsewhere;  // The ports file's: it is written only once ledgerd listens.
  std::vector<std::string> flags = ServeFlags(scratch.path());
  flags.push_back("--ports_file=" + elsewhere.Sub("ports.json"));
  const Finished run = RunLedgerd(flags);
  EXPECT_EQ(run.exit_code, 4);  // Damaged data: restore a backup.
  EXPECT_THAT(run.output, HasSubstr("account \"bob\" (sequence 2, balance 70) disagrees with its "
                                    "journal entry 2, whose balance_after is 60"));
  EXPECT_THAT(run.output, HasSubstr("Refusing to start"));
  EXPECT_TRUE(std::filesystem::is_empty(elsewhere.path())) << "it never listened";
}

TEST(LedgerdDataDirectoryTest, ReadOnlyFilesystemIsNamedAsSuch) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a read-only tmpfs";
  ScratchDir scratch;
  const std::string mount_point = scratch.Sub("ro");
  std::filesystem::create_directories(mount_point);
  ASSERT_EQ(std::system(("mount -t tmpfs -o size=1m,ro tmpfs " + mount_point).c_str()), 0);
  const Finished init = RunLedgerd({"init", "--data_dir=" + mount_point});
  const Finished serve = RunLedgerd(ServeFlags(mount_point));
  EXPECT_EQ(std::system(("umount " + mount_point).c_str()), 0);
  EXPECT_EQ(init.exit_code, 1);
  EXPECT_THAT(init.output, HasSubstr("read-only filesystem (EROFS)"));
  EXPECT_EQ(serve.exit_code, 1);
  EXPECT_THAT(serve.output, HasSubstr("read-only filesystem (EROFS)"));
}

TEST(LedgerdDataDirectoryTest, AFullFilesystemAtStartIsNamedAsSuch) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  ScratchDir scratch;
  const std::string mount_point = scratch.Sub("tiny");
  std::filesystem::create_directories(mount_point);
  ASSERT_EQ(std::system(("mount -t tmpfs -o size=2m tmpfs " + mount_point).c_str()), 0);
  const std::string data_dir = mount_point + "/ledger";
  InitLedgerDir(data_dir);
  // Fill what is left, so that opening (which writes a new log and manifest) fails.
  const int filled = std::system(
      ("dd if=/dev/zero of=" + mount_point + "/filler bs=64k 2>/dev/null; sync").c_str());
  (void)filled;  // dd exits 1 when the disk is full, which is the point.
  const Finished serve = RunLedgerd(ServeFlags(data_dir));
  EXPECT_EQ(std::system(("umount " + mount_point).c_str()), 0);
  EXPECT_EQ(serve.exit_code, 1);
  EXPECT_THAT(serve.output, HasSubstr("the filesystem is full (ENOSPC)"));
  EXPECT_THAT(serve.output, ::testing::Not(HasSubstr("corrupt")));
}

TEST(LedgerdDataDirectoryTest, PermissionDeniedIsNamedWithTheUid) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run ledgerd as another user";
  ScratchDir scratch;
  const std::string data_dir = scratch.Sub("ledger");
  InitLedgerDir(data_dir);
  std::filesystem::permissions(scratch.path(), std::filesystem::perms::owner_all);
  std::filesystem::permissions(data_dir, std::filesystem::perms::owner_all);
  // ledgerd as uid 65534 ("nobody"), which may not enter root's 0700 directories; from a copy
  // that it may run wherever the build tree is.
  ScratchDir bin;
  const std::string ledgerd_copy = bin.Sub("ledgerd");
  std::filesystem::copy_file(testing_util::LedgerdPath(), ledgerd_copy);
  std::filesystem::permissions(
      bin.path(), std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                      std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                      std::filesystem::perms::others_exec);
  Subprocess ledgerd({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                      ledgerd_copy, "--listen=127.0.0.1:0",
                      "--metrics_listen=", "--data_dir=" + data_dir});
  EXPECT_EQ(ledgerd.WaitForExit(), 1) << ledgerd.output();
  EXPECT_THAT(ledgerd.output(), HasSubstr("permission denied (Permission denied): ledgerd runs as "
                                          "uid 65534"));
  EXPECT_THAT(ledgerd.output(), ::testing::Not(HasSubstr("in use by another process")));
}

TEST(LedgerdDataDirectoryTest, ADirectoryDeletedWhileServingRefusesWritesAndTurnsNotServing) {
  ScratchDir scratch;
  const std::string data_dir = scratch.Sub("ledger");
  InitLedgerDir(data_dir);
  LedgerdProcess ledgerd(ServeFlags(data_dir));
  ASSERT_TRUE(ledgerd.Start());
  const int metrics_port = ledgerd.metrics_port();
  auto channel = grpc::CreateChannel(ledgerd.target(), grpc::InsecureChannelCredentials());
  int64_t balance = 0;
  ASSERT_TRUE(Deposit(channel, "alice", 700, &balance).ok());
  ASSERT_EQ(balance, 700);

  std::filesystem::remove_all(data_dir);
  // The next write finds the directory gone before it writes anything.
  const grpc::Status refused = Deposit(channel, "alice", 5);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.error_message(), HasSubstr("outcome unknown"));
  // The watcher looks once a second.
  ASSERT_TRUE(ledgerd.WaitForLog("Health is NOT_SERVING", std::chrono::seconds(5)))
      << ledgerd.log();
  EXPECT_THAT(ledgerd.log(), HasSubstr("data directory " + data_dir + " was deleted"));
  EXPECT_EQ(Health(channel), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  const std::optional<testing_util::HttpResponse> scrape =
      testing_util::HttpGet(metrics_port, "/metrics");
  ASSERT_TRUE(scrape.has_value());
  EXPECT_THAT(scrape->body, HasSubstr("\nledger_data_directory_lost 1\n"));
  EXPECT_EQ(Deposit(channel, "bob", 1).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(ledgerd.Stop(), 0) << ledgerd.log();

  // Restarted on the same path, it does not start an empty ledger.
  const Finished restarted = RunLedgerd(ServeFlags(data_dir));
  EXPECT_EQ(restarted.exit_code, 1);
  EXPECT_THAT(restarted.output, HasSubstr("it does not exist, so it holds no ledger"));
  EXPECT_FALSE(std::filesystem::exists(data_dir));
}

// The log as an operator meets its faults. Three deposits are three log entries in the first
// segment; each is [16-byte header][payload][padding] after the segment's 32-byte header.
class LedgerdLogFaultTest : public testing::Test {
 protected:
  void SetUp() override {
    InitLedgerDir(data_dir_);
    LedgerdProcess ledgerd(ServeFlags(data_dir_));
    ASSERT_TRUE(ledgerd.Start());
    auto channel = grpc::CreateChannel(ledgerd.target(), grpc::InsecureChannelCredentials());
    for (int64_t amount : {100, 20, 3}) ASSERT_TRUE(Deposit(channel, "erin", amount).ok());
    // Killed, so that the entries are replayed at the next start rather than checkpointed.
    ledgerd.Kill();
    segment_ =
        data_dir_ + "/" + std::string(storage::kLogDirectory) + "/" + storage::LogSegmentName(1);
    std::ifstream in(segment_, std::ios::binary);
    bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    ASSERT_GT(bytes_.size(), 64u);
  }
  // The offset of the entry after the one at `offset`.
  int64_t NextEntry(int64_t offset) const {
    uint32_t length = 0;
    for (int i = 3; i >= 0; --i) {
      length = (length << 8) | static_cast<unsigned char>(bytes_[static_cast<size_t>(offset + i)]);
    }
    return offset + (16 + static_cast<int64_t>(length) + 7) / 8 * 8;
  }
  void Rewrite() const {
    std::ofstream out(segment_, std::ios::binary | std::ios::trunc);
    out.write(bytes_.data(), static_cast<std::streamsize>(bytes_.size()));
  }

  ScratchDir scratch_;
  const std::string data_dir_ = scratch_.Sub("ledger");
  std::string segment_;
  std::string bytes_;
};

TEST_F(LedgerdLogFaultTest, ATornLastEntryIsDroppedAndEveryEntryBeforeItServed) {
  const int64_t third = NextEntry(NextEntry(32));
  // A crash while the third entry was written: only its first 20 bytes reached the disk.
  std::fill(bytes_.begin() + third + 20, bytes_.begin() + NextEntry(third), '\0');
  Rewrite();
  LedgerdProcess ledgerd(ServeFlags(data_dir_));
  ASSERT_TRUE(ledgerd.Start()) << ledgerd.log();
  EXPECT_THAT(ledgerd.log(), HasSubstr("the log ended in an entry cut short by a crash"));
  EXPECT_THAT(ledgerd.log(), HasSubstr(segment_ + " at offset " + std::to_string(third)));
  auto channel = grpc::CreateChannel(ledgerd.target(), grpc::InsecureChannelCredentials());
  int64_t balance = 0;
  ASSERT_TRUE(Deposit(channel, "erin", 1000, &balance).ok());
  EXPECT_EQ(balance, 1120);  // 100 + 20, not the torn 3.
  EXPECT_EQ(ledgerd.Stop(), 0) << ledgerd.log();
}

TEST_F(LedgerdLogFaultTest, AFlippedBitBeforeTheLastEntryRefusesTheStartWithExitFour) {
  // The first entry's payload: the two entries after it are intact, so this is damage.
  bytes_[32 + 16 + 3] ^= 0x20;
  Rewrite();
  const Finished run = RunLedgerd(ServeFlags(data_dir_));
  EXPECT_EQ(run.exit_code, 4) << run.output;
  EXPECT_THAT(run.output, HasSubstr("the log is corrupt"));
  EXPECT_THAT(run.output, HasSubstr(segment_ + " at offset 32 (entry position 1)"));
  EXPECT_THAT(run.output, HasSubstr("Restore the data directory from a backup"));
  std::ifstream in(segment_, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()),
            bytes_)
      << "a refused start changes nothing";
}

}  // namespace
}  // namespace ledger
