// The metrics a running server exports, scraped over HTTP from its /metrics endpoint.
#include <string>
#include <thread>
#include <vector>

#include "base/stable_hash.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/http_get.h"
#include "tests/metrics_text.h"
#include "tests/scratch_dir.h"
#include "tests/scratch_ledger.h"
#include "tests/server/test_server.h"
#include "tests/shard/shard_test_util.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing_util::Balance;
using testing_util::Deposit;
using testing_util::HttpGet;
using testing_util::LoopbackOptions;
using testing_util::SampleValue;
using testing_util::TestServer;
using testing_util::Withdraw;

ServerOptions WithMetrics(ServerOptions options = LoopbackOptions()) {
  options.metrics_listen_address = "127.0.0.1:0";
  options.version = "test-version";
  return options;
}

// WithMetrics, durable (sync) in `scratch`'s directory.
ServerOptions DurableWithMetrics(const testing_util::ScratchLedger& scratch) {
  ServerOptions options = WithMetrics();
  options.storage.durability = storage::Durability::kSync;
  options.storage.data_dir = scratch.path();
  return options;
}

std::string Scrape(TestServer& server) {
  auto response = HttpGet(server.server().metrics_port(), "/metrics");
  EXPECT_TRUE(response.has_value());
  if (!response.has_value()) return "";
  EXPECT_EQ(response->status, 200);
  return response->body;
}

std::string ShardLabel(const std::string& account) { return std::to_string(ShardOf(account, 2)); }

std::string OtherShardLabel(const std::string& account) {
  return std::to_string(1 - ShardOf(account, 2));
}

TEST(MetricsTest, EveryFamilyIsServedWithHelpAndType) {
  TestServer server(WithMetrics());
  const std::string body = Scrape(server);
  const std::vector<std::pair<std::string, std::string>> families = {
      {"ledger_mailbox_depth", "gauge"},
      {"ledger_mailbox_capacity", "gauge"},
      {"ledger_mailbox_wait_seconds", "histogram"},
      {"ledger_handler_seconds", "histogram"},
      {"ledger_mailbox_rejected_total", "counter"},
      {"ledger_mailbox_operations", "gauge"},
      {"ledger_mailbox_rejected_operations_total", "counter"},
      {"ledger_apply_operations", "histogram"},
      {"ledger_apply_results_total", "counter"},
      {"ledger_expired_total", "counter"},
      {"ledger_internal_errors_total", "counter"},
      {"ledger_requests_total", "counter"},
      {"ledger_accounts", "gauge"},
      {"ledger_build_info", "gauge"},
      {"ledger_batch_size", "histogram"},
      {"ledger_journal_write_seconds", "histogram"},
      {"ledger_journal_group_calls", "histogram"},
      {"ledger_journal_group_batches", "histogram"},
      {"ledger_storage_errors_total", "counter"},
      {"ledger_recovery_seconds", "gauge"}};
  for (const auto& [name, type] : families) {
    EXPECT_THAT(body, HasSubstr("# HELP " + name + " ")) << name;
    EXPECT_THAT(body, HasSubstr("# TYPE " + name + " " + type + "\n")) << name;
  }
  EXPECT_EQ(SampleValue(body, "ledger_build_info{version=\"test-version\"}"), 1);
  EXPECT_EQ(SampleValue(body, "ledger_mailbox_capacity{shard=\"1\"}"), kDefaultMailboxCapacity);
}

TEST(MetricsTest, ADurableServerCountsEveryJournalWriteAndTheCallsInEachBatch) {
  constexpr int kDeposits = 12;
  testing_util::ScratchLedger scratch;
  TestServer server(DurableWithMetrics(scratch));
  auto stub = server.NewStub();
  // One call at a time: each is a batch of one, written on its own.
  for (int i = 0; i < kDeposits; ++i) ASSERT_TRUE(Deposit(*stub, "alice", 1).status.ok());
  // Read only, with nothing in flight: answered at once, nothing written.
  ASSERT_TRUE(Balance(*stub, "alice").status.ok());
  const std::string body = Scrape(server);
  const std::string shard = "{shard=\"" + ShardLabel("alice") + "\"}";
  EXPECT_EQ(SampleValue(body, "ledger_batch_size_count" + shard), kDeposits + 1);
  EXPECT_EQ(SampleValue(body, "ledger_batch_size_sum" + shard), kDeposits + 1);
  EXPECT_EQ(
      SampleValue(body, "ledger_batch_size_count{shard=\"" + OtherShardLabel("alice") + "\"}"), 0);
  // The journal is the process's: one write per deposit, each making one call durable.
  EXPECT_EQ(SampleValue(body, "ledger_journal_write_seconds_count"), kDeposits);
  EXPECT_EQ(SampleValue(body, "ledger_journal_group_calls_count"), kDeposits);
  EXPECT_EQ(SampleValue(body, "ledger_journal_group_calls_sum"), kDeposits);
  EXPECT_EQ(SampleValue(body, "ledger_journal_group_batches_sum"), kDeposits);
  EXPECT_EQ(SampleValue(body, "ledger_storage_errors_total" + shard), 0);
  const std::optional<double> recovery = SampleValue(body, "ledger_recovery_seconds");
  ASSERT_TRUE(recovery.has_value());
  EXPECT_GE(*recovery, 0);
  EXPECT_LT(*recovery, 10);
}

// RocksDB's memory, by kind, within its bounds: the deposits sit in the memtables, nothing has
// been flushed, so no table file holds anything and the block cache is within its capacity. Their
// idempotency records wait in memory for the next checkpoint (recent_records).
TEST(MetricsTest, ADurableServerReportsRocksDbMemoryByKindWithinItsBounds) {
  testing_util::ScratchLedger scratch;
  TestServer server(DurableWithMetrics(scratch));
  auto stub = server.NewStub();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(Deposit(*stub, "alice", 1, "metrics-request-" + std::to_string(i)).status.ok());
  }
  const std::string body = Scrape(server);
  EXPECT_THAT(body, HasSubstr("# TYPE ledger_store_memory_bytes gauge\n"));
  const std::optional<double> memtables =
      SampleValue(body, "ledger_store_memory_bytes{kind=\"memtables\"}");
  const std::optional<double> block_cache =
      SampleValue(body, "ledger_store_memory_bytes{kind=\"block_cache\"}");
  const std::optional<double> table_readers =
      SampleValue(body, "ledger_store_memory_bytes{kind=\"table_readers\"}");
  ASSERT_TRUE(memtables.has_value() && block_cache.has_value() && table_readers.has_value());
  EXPECT_GT(*memtables, 0);
  EXPECT_LE(*memtables, storage::kMemtableBytes);
  EXPECT_LE(*block_cache, storage::kBlockCacheBytes);
  EXPECT_LT(*table_readers, 64 << 10);
  // Five keys ("alice", a separator, "metrics-request-N": 23 bytes) and their records.
  const std::optional<double> recent_records =
      SampleValue(body, "ledger_store_memory_bytes{kind=\"recent_records\"}");
  ASSERT_TRUE(recent_records.has_value());
  EXPECT_GT(*recent_records, 5 * 23);
  EXPECT_LT(*recent_records, 5 * 200);
}

// Without a store there is no RocksDB, and no family that would always read 0.
TEST(MetricsTest, AServerWithoutAStoreHasNoStoreMemory) {
  TestServer server(WithMetrics());
  EXPECT_THAT(Scrape(server), Not(HasSubstr("ledger_store_memory_bytes")));
}

TEST(MetricsTest, HandlerCountForAShardAndOpEqualsTheCallsItHandled) {
  constexpr int kDeposits = 25;
  TestServer server(WithMetrics());
  auto stub = server.NewStub();
  for (int i = 0; i < kDeposits; ++i) ASSERT_TRUE(Deposit(*stub, "alice", 1).status.ok());
  ASSERT_TRUE(Balance(*stub, "alice").status.ok());
  const std::string body = Scrape(server);
  const std::string shard = ShardLabel("alice");
  EXPECT_EQ(
      SampleValue(body, "ledger_handler_seconds_count{op=\"deposit\",shard=\"" + shard + "\"}"),
      kDeposits);
  EXPECT_EQ(
      SampleValue(body, "ledger_handler_seconds_count{op=\"balance\",shard=\"" + shard + "\"}"), 1);
  EXPECT_EQ(SampleValue(body, "ledger_handler_seconds_count{op=\"deposit\",shard=\"" +
                                  OtherShardLabel("alice") + "\"}"),
            0);
  EXPECT_EQ(SampleValue(body, "ledger_mailbox_wait_seconds_count{shard=\"" + shard + "\"}"),
            kDeposits + 1);
  EXPECT_EQ(SampleValue(body, "ledger_accounts{shard=\"" + shard + "\"}"), 1);
}

TEST(MetricsTest, DepthRisesWhileAShardIsHeldAndASheddingAddsOneToItsRejectedCount) {
  testing_util::Event held;
  testing_util::Event release;
  ServerOptions options = WithMetrics();
  options.router.shard.mailbox_capacity = 2;
  options.router.shard.inline_execution = false;  // The hold blocks a shard thread, not gRPC.
  ServerTestHooks hooks;
  hooks.router.shard.before_handle = [&](const Message& message) {
    if (message.account_id == "hold") {
      held.Notify();
      release.WaitForNotification();
    }
  };
  TestServer server(options, hooks);
  auto stub = server.NewStub();
  std::thread holder([&] { EXPECT_TRUE(Deposit(*stub, "hold", 1).status.ok()); });
  ASSERT_TRUE(testing_util::WaitUntil([&] { return held.HasBeenNotified(); },
                                      "the first deposit is held in its handler"));
  // "hold" shares a shard with these ids; two fill the mailbox, the third is shed.
  const std::string shard = ShardLabel("hold");
  std::vector<std::string> same_shard;
  for (int i = 0; same_shard.size() < 3; ++i) {
    const std::string id = "acct-" + std::to_string(i);
    if (ShardLabel(id) == shard) same_shard.push_back(id);
  }
  std::vector<std::thread> queued;
  for (int i = 0; i < 2; ++i) {
    queued.emplace_back([&, i] { EXPECT_TRUE(Deposit(*stub, same_shard[i], 5).status.ok()); });
  }
  const Shard& held_shard = server.server().router().shard(std::stoi(shard));
  ASSERT_TRUE(testing_util::WaitUntil([&] { return held_shard.MailboxDepth() == 2; },
                                      "two deposits are queued behind the held one"));
  EXPECT_EQ(Deposit(*stub, same_shard[2], 5).status.error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  std::string body = Scrape(server);
  EXPECT_EQ(SampleValue(body, "ledger_mailbox_depth{shard=\"" + shard + "\"}"), 2);
  EXPECT_EQ(SampleValue(body, "ledger_mailbox_rejected_total{shard=\"" + shard + "\"}"), 1);
  EXPECT_EQ(
      SampleValue(body, "ledger_mailbox_rejected_total{shard=\"" + OtherShardLabel("hold") + "\"}"),
      0);
  release.Notify();
  holder.join();
  for (std::thread& thread : queued) thread.join();
  body = Scrape(server);
  EXPECT_EQ(SampleValue(body, "ledger_mailbox_depth{shard=\"" + shard + "\"}"), 0);
}

TEST(MetricsTest, RequestsTotalCountsEachFinalCodeByMethod) {
  TestServer server(WithMetrics());
  auto stub = server.NewStub();
  ASSERT_TRUE(Deposit(*stub, "bob", 100).status.ok());
  ASSERT_TRUE(Deposit(*stub, "bob", 100).status.ok());
  ASSERT_FALSE(Deposit(*stub, "bad id", 100).status.ok());
  ASSERT_FALSE(Withdraw(*stub, "bob", 1000).status.ok());
  ASSERT_FALSE(Balance(*stub, "nobody").status.ok());
  const std::string body = Scrape(server);
  EXPECT_EQ(SampleValue(body, "ledger_requests_total{code=\"OK\",method=\"Deposit\"}"), 2);
  EXPECT_EQ(
      SampleValue(body, "ledger_requests_total{code=\"INVALID_ARGUMENT\",method=\"Deposit\"}"), 1);
  EXPECT_EQ(
      SampleValue(body, "ledger_requests_total{code=\"FAILED_PRECONDITION\",method=\"Withdraw\"}"),
      1);
  EXPECT_EQ(SampleValue(body, "ledger_requests_total{code=\"NOT_FOUND\",method=\"Balance\"}"), 1);
  EXPECT_EQ(SampleValue(body, "ledger_requests_total{code=\"OK\",method=\"Withdraw\"}"), 0);
}

TEST(MetricsTest, StartRefusesAMetricsPortInUse) {
  TestServer first(WithMetrics());
  ServerOptions options = WithMetrics();
  options.metrics_listen_address = "127.0.0.1:" + std::to_string(first.server().metrics_port());
  absl::StatusOr<std::unique_ptr<LedgerServer>> second = LedgerServer::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("cannot serve metrics on"));
}

}  // namespace
}  // namespace ledger
