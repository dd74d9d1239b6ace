// Online backup and restore (issue 31, item 6), with the real binaries: `ledgerctl backup` over
// mutual TLS against a ledgerd under load, `ledgerd restore`, and a second ledgerd serving the
// restored directory. Certificates are made at test time.

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ledger/v1/ledger.grpc.pb.h"
#include "tests/e2e/ledger_dir.h"
#include "tests/e2e/ledgerd_process.h"
#include "tests/e2e/subprocess.h"
#include "tests/http_get.h"
#include "tests/metrics_text.h"
#include "tests/scratch_dir.h"
#include "tests/test_paths.h"
#include "tests/test_pki.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing_util::Subprocess;

// Who may do what: "payments" calls the ledger, "ops" takes backups, anyone checks health, and a
// careless rule grants every certificate every admin method, which must not admit anyone.
constexpr char kPolicy[] = R"({
  "name": "backup-test",
  "allow_rules": [
    {"name": "health", "source": {"principals": ["*"]},
     "request": {"paths": ["/grpc.health.v1.Health/*"]}},
    {"name": "payments", "source": {"principals": ["payments"]},
     "request": {"paths": ["/ledger.v1.Ledger/*"]}},
    {"name": "careless", "source": {"principals": ["*"]},
     "request": {"paths": ["/ledger.v1.LedgerAdmin/*"]}},
    {"name": "operators-take-backups", "source": {"principals": ["ops"]},
     "request": {"paths": ["/ledger.v1.LedgerAdmin/Backup"]}}
  ]
})";

struct CommandResult {
  int exit_code = -1;
  std::string output;
};

// An account's whole History, newest first.
std::vector<v1::HistoryEntry> WholeHistory(v1::Ledger::Stub& stub, const std::string& account) {
  std::vector<v1::HistoryEntry> entries;
  v1::HistoryRequest request;
  request.set_account_id(account);
  request.set_page_size(1000);
  while (true) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::HistoryResponse response;
    const grpc::Status status = stub.History(&context, request, &response);
    if (status.error_code() == grpc::StatusCode::NOT_FOUND) return entries;
    EXPECT_TRUE(status.ok()) << account << ": " << status.error_message();
    if (!status.ok()) return entries;
    entries.insert(entries.end(), response.entries().begin(), response.entries().end());
    if (response.next_page_token().empty()) return entries;
    request.set_page_token(response.next_page_token());
  }
}

// The account's balance; nullopt when it was never opened.
std::optional<int64_t> BalanceIfOpen(v1::Ledger::Stub& stub, const std::string& account) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::BalanceRequest request;
  request.set_account_id(account);
  v1::BalanceResponse response;
  const grpc::Status status = stub.Balance(&context, request, &response);
  if (status.error_code() == grpc::StatusCode::NOT_FOUND) return std::nullopt;
  EXPECT_TRUE(status.ok()) << account << ": " << status.error_message();
  return response.balance();
}

class BackupTest : public testing::Test {
 protected:
  void SetUp() override {
    pki_.MakeCa("ca");
    pki_.MakeServerCert("server", "ca");
    pki_.MakeClientCert("payments", "ca");
    pki_.MakeClientCert("ops", "ca");
    std::ofstream(pki_.Path("policy.json")) << kPolicy;
  }
  void TearDown() override {
    if (ledgerd_ != nullptr) ledgerd_->Stop();
    if (restored_ != nullptr) restored_->Stop();
  }

  std::vector<std::string> ServerTlsFlags(bool policy = true) const {
    std::vector<std::string> flags = {"--tls_cert_file=" + pki_.Cert("server"),
                                      "--tls_key_file=" + pki_.Key("server"),
                                      "--tls_client_ca_file=" + pki_.Cert("ca")};
    if (policy) flags.push_back("--authz_policy_file=" + pki_.Path("policy.json"));
    return flags;
  }
  std::shared_ptr<grpc::ChannelCredentials> Credentials(const std::string& identity) const {
    grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = testing_util::TestPki::Read(pki_.Cert("ca"));
    tls.pem_cert_chain = testing_util::TestPki::Read(pki_.Cert(identity));
    tls.pem_private_key = testing_util::TestPki::Read(pki_.Key(identity));
    return grpc::SslCredentials(tls);
  }

  // A durable ledgerd over mutual TLS (with the policy unless `policy` is false), 2 shards and
  // 1 MiB log segments.
  void StartLedgerd(std::vector<std::string> extra = {}, bool policy = true) {
    std::vector<std::string> flags = {"--metrics_listen=", "--shards=2", "--log_segment_mib=1"};
    for (const std::string& flag : ServerTlsFlags(policy)) flags.push_back(flag);
    for (const std::string& flag : extra) flags.push_back(flag);
    testing_util::LedgerdProcess::Options options;
    options.credentials = Credentials("payments");
    ledgerd_ = std::make_unique<testing_util::LedgerdProcess>(flags, options);
    ASSERT_TRUE(ledgerd_->Start());
    stub_ = v1::Ledger::NewStub(grpc::CreateChannel(ledgerd_->target(), Credentials("payments")));
  }

  std::vector<std::string> ClientFlags(const std::string& identity) const {
    return {"--target=" + ledgerd_->target(), "--tls_ca_file=" + pki_.Cert("ca"),
            "--tls_cert_file=" + pki_.Cert(identity), "--tls_key_file=" + pki_.Key(identity)};
  }
  std::vector<std::string> BackupCommand(const std::string& identity, const std::string& dir) {
    std::vector<std::string> args = {testing_util::LedgerctlPath()};
    for (const std::string& flag : ClientFlags(identity)) args.push_back(flag);
    args.push_back("backup");
    args.push_back("--to=" + dir);
    return args;
  }
  CommandResult Backup(const std::string& identity, const std::string& dir) {
    Subprocess ledgerctl(BackupCommand(identity, dir));
    const std::optional<int> exit_code = ledgerctl.WaitForExit(std::chrono::seconds(120));
    return {exit_code.value_or(-1), ledgerctl.output()};
  }
  static CommandResult Restore(const std::string& from, const std::string& data_dir) {
    Subprocess ledgerd({testing_util::LedgerdPath(), "restore", "--from=" + from,
                        "--data_dir=" + data_dir, "--log_segment_mib=1"});
    const std::optional<int> exit_code = ledgerd.WaitForExit(std::chrono::seconds(120));
    return {exit_code.value_or(-1), ledgerd.output()};
  }
  // A load test as "payments": `run_id`'s accounts, verified at its end.
  std::unique_ptr<Subprocess> StartLoadtest(const std::string& run_id, const std::string& duration,
                                            const std::string& mix) {
    std::vector<std::string> args = {testing_util::LoadtestPath(),
                                     "--duration=" + duration,
                                     "--warmup=0s",
                                     "--concurrency=16",
                                     "--accounts=" + std::to_string(kAccounts),
                                     "--fund=100000",
                                     "--channels=2",
                                     "--mix=" + mix,
                                     "--run_id=" + run_id};
    for (const std::string& flag : ClientFlags("payments")) args.push_back(flag);
    return std::make_unique<Subprocess>(args);
  }
  // Serves `data_dir` in plaintext (the restored copy is checked by reading it).
  void StartRestored(const std::string& data_dir) {
    restored_ = std::make_unique<testing_util::LedgerdProcess>(std::vector<std::string>{
        "--metrics_listen=", "--shards=2", "--log_segment_mib=1", "--data_dir=" + data_dir});
    ASSERT_TRUE(restored_->Start());
    restored_stub_ = v1::Ledger::NewStub(
        grpc::CreateChannel(restored_->target(), grpc::InsecureChannelCredentials()));
  }

  static std::string Account(const std::string& run_id, int i) {
    return run_id + "-acct-" + std::to_string(i);
  }

  static constexpr int kAccounts = 40;
  testing_util::TestPki pki_;
  testing_util::ScratchDir scratch_;
  std::unique_ptr<testing_util::LedgerdProcess> ledgerd_;
  std::unique_ptr<testing_util::LedgerdProcess> restored_;
  std::unique_ptr<v1::Ledger::Stub> stub_;
  std::unique_ptr<v1::Ledger::Stub> restored_stub_;
};

// The backup is taken while a load test writes. The restored ledger must hold everything
// acknowledged before the backup began, and be exactly the live ledger at one moment: every
// account's restored History the oldest part of its live History, entry for entry, and its
// balance that History's last balance. Nothing half-applied, nothing invented.
TEST_F(BackupTest, BackupUnderLoadRestoresTheLedgerAsOfOneMoment) {
  StartLedgerd();
  // Settled before the backup: deposits, withdrawals and transfers, verified by the load test.
  std::unique_ptr<Subprocess> before =
      StartLoadtest("before", "1s", "deposit=50,withdraw=20,transfer=25,balance=5");
  ASSERT_EQ(before->WaitForExit(std::chrono::seconds(60)), 0) << before->output();
  std::vector<size_t> settled(kAccounts);
  for (int i = 0; i < kAccounts; ++i)
    settled[i] = WholeHistory(*stub_, Account("before", i)).size();

  std::unique_ptr<Subprocess> during =
      StartLoadtest("during", "4s", "deposit=70,withdraw=25,balance=5");
  // Well into the load (its first calls are on the accounts' History by then).
  ASSERT_TRUE(testing_util::WaitUntil(
      [&] { return BalanceIfOpen(*stub_, Account("during", 0)).has_value(); },
      "the second load test's first deposit", testing_util::kEventTimeout,
      std::chrono::milliseconds(20)));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const std::string backup_dir = scratch_.Sub("backup");
  const CommandResult backup = Backup("ops", backup_dir);
  ASSERT_EQ(backup.exit_code, 0) << backup.output;
  EXPECT_THAT(backup.output, HasSubstr("backup of ledger "));
  EXPECT_TRUE(fs::exists(backup_dir + "/backup_manifest.json"));
  ASSERT_EQ(during->WaitForExit(std::chrono::seconds(60)), 0) << during->output();
  EXPECT_THAT(during->output(), HasSubstr("PASS"));
  // The server's staged copy is gone once the stream ended.
  EXPECT_FALSE(fs::exists(ledgerd_->data_dir() + "/backup_staging"));

  const std::string restored_dir = scratch_.Sub("restored");
  const CommandResult restore = Restore(backup_dir, restored_dir);
  ASSERT_EQ(restore.exit_code, 0) << restore.output;
  EXPECT_THAT(restore.output, HasSubstr("ledgerd: restored ledger "));
  StartRestored(restored_dir);

  size_t restored_during = 0;
  size_t live_during = 0;
  for (const std::string run_id : {"before", "during"}) {
    for (int i = 0; i < kAccounts; ++i) {
      const std::string account = Account(run_id, i);
      const std::vector<v1::HistoryEntry> live = WholeHistory(*stub_, account);
      const std::vector<v1::HistoryEntry> restored = WholeHistory(*restored_stub_, account);
      ASSERT_LE(restored.size(), live.size()) << account;
      if (run_id == std::string("before")) {
        EXPECT_EQ(restored.size(), settled[i]) << account;
      } else {
        restored_during += restored.size();
        live_during += live.size();
      }
      // Newest first: the restored entries are the live ones after skipping the newest.
      const size_t skipped = live.size() - restored.size();
      for (size_t k = 0; k < restored.size(); ++k) {
        const v1::HistoryEntry& want = live[skipped + k];
        const v1::HistoryEntry& got = restored[k];
        ASSERT_EQ(got.sequence(), want.sequence()) << account;
        ASSERT_EQ(got.operation(), want.operation()) << account << " #" << got.sequence();
        ASSERT_EQ(got.amount(), want.amount()) << account << " #" << got.sequence();
        ASSERT_EQ(got.balance_after(), want.balance_after()) << account << " #" << got.sequence();
        ASSERT_EQ(got.request_id(), want.request_id()) << account << " #" << got.sequence();
        ASSERT_EQ(got.transfer_id(), want.transfer_id()) << account << " #" << got.sequence();
      }
      const std::optional<int64_t> balance = BalanceIfOpen(*restored_stub_, account);
      if (restored.empty()) {
        EXPECT_FALSE(balance.has_value()) << account;
      } else {
        EXPECT_EQ(balance, restored.front().balance_after()) << account;
      }
    }
  }
  // Taken in the middle of the second load: part of it, not all.
  EXPECT_GT(restored_during, 0u);
  EXPECT_LT(restored_during, live_during);
  // The restored ledger takes writes.
  EXPECT_TRUE(BalanceIfOpen(*restored_stub_, Account("before", 0)).has_value());
}

// Only a caller the policy names gets a backup: not one a "*" rule admits, not anyone without a
// policy, and a memory-only server has nothing to back up.
TEST_F(BackupTest, OnlyCallersThePolicyNamesGetABackup) {
  StartLedgerd();
  const std::string refused_dir = scratch_.Sub("refused");
  const CommandResult refused = Backup("payments", refused_dir);
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_THAT(refused.output,
              HasSubstr("PERMISSION_DENIED: authorization policy \"backup-test\" does not allow "
                        "payments to call /ledger.v1.LedgerAdmin/Backup (an admin method needs "
                        "an allow rule that names both the caller and the method"));
  EXPECT_TRUE(fs::is_empty(refused_dir));
  ledgerd_->Stop();

  StartLedgerd({}, /*policy=*/false);
  const CommandResult no_policy = Backup("ops", scratch_.Sub("no-policy"));
  EXPECT_EQ(no_policy.exit_code, 1) << no_policy.output;
  EXPECT_THAT(no_policy.output,
              HasSubstr("PERMISSION_DENIED: admin methods are refused without an authorization "
                        "policy that names their callers"));
  ledgerd_->Stop();

  StartLedgerd({"--durability=none"});
  const CommandResult memory = Backup("ops", scratch_.Sub("memory"));
  EXPECT_EQ(memory.exit_code, 3) << memory.output;
  EXPECT_THAT(memory.output, HasSubstr("FAILED_PRECONDITION: this server runs with "
                                       "--durability=none and keeps nothing to back up"));
}

// A restore checks before it makes anything: a backup without its manifest, or with a damaged
// file, and a target that is not empty, are refused and leave nothing behind.
TEST_F(BackupTest, RestoreRefusesWhatItCannotTrustAndChangesNothing) {
  StartLedgerd({"--metrics_listen=127.0.0.1:0"});
  {
    Subprocess deposit({testing_util::LedgerctlPath(), ClientFlags("payments")[0],
                        ClientFlags("payments")[1], ClientFlags("payments")[2],
                        ClientFlags("payments")[3], "deposit", "alice", "250"});
    ASSERT_EQ(deposit.WaitForExit(), 0) << deposit.output();
  }
  const std::string good = scratch_.Sub("good");
  ASSERT_EQ(Backup("ops", good).exit_code, 0);
  // The operator's view of it: one backup ended whole, just now; none failed.
  const std::optional<testing_util::HttpResponse> scrape =
      testing_util::HttpGet(ledgerd_->metrics_port(), "/metrics");
  ASSERT_TRUE(scrape.has_value());
  EXPECT_EQ(testing_util::SampleValue(scrape->body, "ledger_backups_total{result=\"ok\"}"), 1);
  EXPECT_EQ(testing_util::SampleValue(scrape->body, "ledger_backups_total{result=\"failed\"}"), 0);
  EXPECT_GT(testing_util::SampleValue(scrape->body, "ledger_backup_last_success_timestamp_seconds")
                .value_or(0),
            1.7e9);

  const std::string damaged = scratch_.Sub("damaged");
  fs::copy(good, damaged, fs::copy_options::recursive);
  std::string table;
  for (const auto& file : fs::directory_iterator(damaged)) {
    if (file.path().extension() == ".sst") table = file.path().string();
  }
  ASSERT_FALSE(table.empty());
  {
    std::fstream bytes(table, std::ios::in | std::ios::out | std::ios::binary);
    bytes.seekp(10);
    bytes.put('\x5a');
  }
  const std::string target = scratch_.Sub("target");
  CommandResult refused = Restore(damaged, target);
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr(" is damaged: "));
  EXPECT_THAT(refused.output, HasSubstr("Nothing was restored"));
  EXPECT_FALSE(fs::exists(target));
  EXPECT_FALSE(fs::exists(target + ".restoring"));

  const std::string incomplete = scratch_.Sub("incomplete");
  fs::copy(good, incomplete, fs::copy_options::recursive);
  fs::remove(incomplete + "/backup_manifest.json");
  refused = Restore(incomplete, target);
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_THAT(refused.output,
              HasSubstr("is not a complete backup: it has no backup_manifest.json"));
  EXPECT_FALSE(fs::exists(target));

  fs::create_directories(target);
  std::ofstream(target + "/precious") << "keep me";
  refused = Restore(good, target);
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("is not empty: a restore makes a new data directory"));
  EXPECT_TRUE(fs::exists(target + "/precious"));

  const std::string restored = scratch_.Sub("restored");
  const CommandResult restore = Restore(good, restored);
  ASSERT_EQ(restore.exit_code, 0) << restore.output;
  EXPECT_THAT(restore.output, HasSubstr("1 accounts, 0 pending transfers"));
  StartRestored(restored);
  EXPECT_EQ(BalanceIfOpen(*restored_stub_, "alice"), 250);
}

// SIGKILL while a backup is being copied: the ledger restarts whole, the server's staged copy
// is gone, the caller kept nothing (no manifest), and the next backup works.
TEST_F(BackupTest, ACrashDuringABackupLeavesTheLedgerWholeAndNoCopyBehind) {
  StartLedgerd();
  std::unique_ptr<Subprocess> load =
      StartLoadtest("crash", "1s", "deposit=70,withdraw=25,balance=5");
  ASSERT_EQ(load->WaitForExit(std::chrono::seconds(60)), 0) << load->output();
  std::vector<int64_t> balances;
  for (int i = 0; i < kAccounts; ++i) {
    balances.push_back(BalanceIfOpen(*stub_, Account("crash", i)).value_or(-1));
  }
  const std::string staging = ledgerd_->data_dir() + "/backup_staging";
  bool killed_mid_backup = false;
  for (int attempt = 0; attempt < 5 && !killed_mid_backup; ++attempt) {
    const std::string dir = scratch_.Sub("cut-" + std::to_string(attempt));
    Subprocess ledgerctl(BackupCommand("ops", dir));
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!fs::exists(staging) && ledgerctl.running() &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (fs::exists(staging)) {
      ledgerd_->Kill();
      killed_mid_backup = true;
    }
    const std::optional<int> exit_code = ledgerctl.WaitForExit(std::chrono::seconds(30));
    if (killed_mid_backup) {
      EXPECT_NE(exit_code, 0) << ledgerctl.output();
      EXPECT_FALSE(fs::exists(dir + "/backup_manifest.json")) << ledgerctl.output();
    }
  }
  ASSERT_TRUE(killed_mid_backup) << "every backup ended before the test saw it staged";
  ASSERT_TRUE(ledgerd_->Restart());
  EXPECT_FALSE(fs::exists(staging));
  stub_ = v1::Ledger::NewStub(grpc::CreateChannel(ledgerd_->target(), Credentials("payments")));
  for (int i = 0; i < kAccounts; ++i) {
    EXPECT_EQ(BalanceIfOpen(*stub_, Account("crash", i)).value_or(-1), balances[i]) << i;
  }
  const CommandResult backup = Backup("ops", scratch_.Sub("after"));
  EXPECT_EQ(backup.exit_code, 0) << backup.output;
}

}  // namespace
}  // namespace ledger
