#include "storage/rocksdb_store.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "storage/ledger_records.pb.h"
#include "tests/scratch_dir.h"
#include "tests/scratch_ledger.h"
#include "tests/storage/loaded_accounts.h"

namespace ledger::storage {
namespace {

using ::testing::HasSubstr;
using testing_util::LoadedAccounts;
using testing_util::ScratchDir;
using testing_util::ScratchLedger;

StoreOptions OptionsFor(const std::string& dir) {
  StoreOptions options;
  options.data_dir = dir;
  options.durability = Durability::kSync;
  return options;
}

std::unique_ptr<RocksDbStore> OpenOrDie(const StoreOptions& options) {
  absl::StatusOr<std::unique_ptr<RocksDbStore>> store = RocksDbStore::Open(options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

JournalEntry Entry(const std::string& account, uint64_t sequence, int64_t balance_after) {
  return JournalEntry{.account_id = account,
                      .sequence = sequence,
                      .kind = EntryKind::kDeposit,
                      .amount = 10,
                      .balance_after = balance_after,
                      .request_id = "req-" + std::to_string(sequence),
                      .time = absl::FromUnixSeconds(1'800'000'000 + sequence)};
}

TEST(RocksDbStoreTest, WhatIsWrittenIsReadBackAfterReopening) {
  ScratchLedger scratch;
  const StoreOptions options = OptionsFor(scratch.path());
  const RequestRecord record{.op = Op::kWithdraw,
                             .amount = 500,
                             .outcome = Outcome::kInsufficientFunds,
                             .balance = 40,
                             .recorded_at = absl::FromUnixSeconds(1'800'000'000)};
  {
    std::unique_ptr<RocksDbStore> store = OpenOrDie(options);
    ASSERT_NE(store, nullptr);
    BatchWrite batch;
    batch.accounts = {{"a", {.balance = 50, .sequence = 5}}, {"ab", {.balance = 7, .sequence = 1}}};
    for (uint64_t s = 1; s <= 5; ++s) batch.journal.push_back(Entry("a", s, 10 * s));
    batch.journal.push_back(Entry("ab", 1, 7));
    batch.requests = {{"a", "w-1", record}};
    ASSERT_TRUE(store->Write(batch).ok());
  }
  std::unique_ptr<RocksDbStore> store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(LoadedAccounts(*store),
            (std::map<std::string, AccountState>{{"a", {.balance = 50, .sequence = 5}},
                                                 {"ab", {.balance = 7, .sequence = 1}}}));
  EXPECT_EQ(store->FindRequest("a", "w-1").value(), record);
  EXPECT_EQ(store->FindRequest("a", "w-2").value(), std::nullopt);
  EXPECT_EQ(store->FindRequest("ab", "w-1").value(), std::nullopt);
  EXPECT_EQ(store->FindAccount("a").value(), (AccountState{.balance = 50, .sequence = 5}));
  EXPECT_EQ(store->FindAccount("nobody").value(), std::nullopt);

  // Newest first, in pages; "ab"'s entry never shows in "a"'s history.
  absl::StatusOr<HistoryPage> page = store->ReadHistory("a", 0, 2);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->entries.size(), 2u);
  EXPECT_EQ(page->entries[0], Entry("a", 5, 50));
  EXPECT_EQ(page->entries[1], Entry("a", 4, 40));
  EXPECT_EQ(page->next_sequence, 3u);
  page = store->ReadHistory("a", 3, 2);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->entries.size(), 2u);
  EXPECT_EQ(page->entries[1].sequence, 2u);
  EXPECT_EQ(page->next_sequence, 1u);
  page = store->ReadHistory("a", 1, 2);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->entries.size(), 1u);
  EXPECT_EQ(page->entries[0].sequence, 1u);
  EXPECT_EQ(page->next_sequence, 0u);
  page = store->ReadHistory("ab", 0, 50);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->entries.size(), 1u);
  EXPECT_EQ(page->entries[0], Entry("ab", 1, 7));
}

TransferRecord PendingTransfer(const std::string& from, const std::string& to) {
  return TransferRecord{.from = from,
                        .to = to,
                        .amount = 30,
                        .state = TransferState::kPending,
                        .from_balance = 70,
                        .created_at = absl::FromUnixSeconds(1'800'000'000)};
}

// A pending transfer lives under its source, a final one under its id; recovery lists the pending
// ones (two sources that raced with one id each keep theirs), and both survive a reopen.
TEST(RocksDbStoreTest, TransferRecordsAndReceiptsAreKeptPerStepAndListedWhilePending) {
  ScratchLedger scratch;
  const StoreOptions options = OptionsFor(scratch.path());
  const CreditReceipt receipt{.from = "a",
                              .outcome = Outcome::kOk,
                              .to_balance = 130,
                              .amount = 30,
                              .credited_at = absl::FromUnixSeconds(1'800'000'001)};
  {
    std::unique_ptr<RocksDbStore> store = OpenOrDie(options);
    ASSERT_NE(store, nullptr);
    BatchWrite debits;
    debits.transfers = {{"t-1", PendingTransfer("a", "b")},
                        {"t-2", PendingTransfer("x", "b")},
                        {"t-2", PendingTransfer("y", "b")}};
    debits.credits = {{"t-1", receipt}};
    ASSERT_TRUE(store->Write(debits).ok());
  }
  std::unique_ptr<RocksDbStore> store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  std::vector<std::pair<std::string, std::string>> pending;
  ASSERT_TRUE(store
                  ->ForEachPendingTransfer([&](std::string id, const TransferRecord& record) {
                    EXPECT_EQ(record.state, TransferState::kPending);
                    pending.emplace_back(std::move(id), record.from);
                  })
                  .ok());
  EXPECT_EQ(pending, (std::vector<std::pair<std::string, std::string>>{
                         {"t-1", "a"}, {"t-2", "x"}, {"t-2", "y"}}));
  // The source finds its pending record; without a source only a final record is looked up.
  EXPECT_EQ(store->FindTransfer("t-1", "a").value(), PendingTransfer("a", "b"));
  EXPECT_EQ(store->FindTransfer("t-1", "").value(), std::nullopt);
  EXPECT_EQ(store->ReadTransfer("t-1").value(), PendingTransfer("a", "b"));
  EXPECT_EQ(store->FindCredit("t-1").value(), receipt);
  EXPECT_EQ(store->FindCredit("t-3").value(), std::nullopt);
  absl::StatusOr<CreditLookup> in_memory = store->FindCreditInMemory("t-1");
  ASSERT_TRUE(in_memory.ok());
  EXPECT_TRUE(in_memory->answered);
  EXPECT_EQ(in_memory->receipt, receipt);

  TransferRecord committed = PendingTransfer("a", "b");
  committed.state = TransferState::kCommitted;
  committed.to_balance = 130;
  committed.credited_at = receipt.credited_at;
  committed.finished_at = absl::FromUnixSeconds(1'800'000'002);
  BatchWrite settle;
  settle.transfers = {{.transfer_id = "t-1", .record = committed, .ends_pending = true}};
  ASSERT_TRUE(store->Write(settle).ok());
  EXPECT_EQ(store->FindTransfer("t-1", "").value(), committed);
  EXPECT_EQ(store->FindTransfer("t-1", "a").value(), committed);
  EXPECT_EQ(store->ReadTransfer("t-1").value(), committed);
  int still_pending = 0;
  ASSERT_TRUE(
      store->ForEachPendingTransfer([&](std::string, const TransferRecord&) { ++still_pending; })
          .ok());
  EXPECT_EQ(still_pending, 2);  // t-2's two sources.
}

TEST(RocksDbStoreTest, RefusesADirectoryHoldingSomethingElse) {
  ScratchDir scratch;
  std::ofstream(scratch.Sub("notes.txt")) << "not a database\n";
  absl::StatusOr<std::unique_ptr<RocksDbStore>> store =
      RocksDbStore::Open(OptionsFor(scratch.path()));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr("no ledgerd database (no RocksDB CURRENT file)"));
  EXPECT_THAT(store.status().message(), HasSubstr("pass another --data_dir"));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(scratch.path()), {}), 1);
}

TEST(RocksDbStoreTest, RefusesTheRocksDbOfAnotherProgram) {
  ScratchDir scratch;
  {
    rocksdb::Options options;
    options.create_if_missing = true;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(options, scratch.path(), &db).ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "user:1", "alice").ok());
    delete db;
  }
  absl::StatusOr<std::unique_ptr<RocksDbStore>> store =
      RocksDbStore::Open(OptionsFor(scratch.path()));
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("a RocksDB database of another program"));
}

TEST(RocksDbStoreTest, RefusesAnotherFormatVersion) {
  ScratchLedger scratch;
  {
    // Rewrite the marker as a future ledgerd would.
    std::vector<rocksdb::ColumnFamilyDescriptor> families;
    for (const char* name : {"default", "accounts", "journal", "requests"}) {
      families.emplace_back(name, rocksdb::ColumnFamilyOptions());
    }
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(
        rocksdb::DB::Open(rocksdb::DBOptions(), scratch.path(), families, &handles, &db).ok());
    v1::FormatMarker marker;
    marker.set_magic("ledgerd");
    marker.set_format_version(kFormatVersion + 1);
    marker.set_created_by("ledgerd 9.0.0");
    ASSERT_TRUE(
        db->Put(rocksdb::WriteOptions(), handles[0], "format", marker.SerializeAsString()).ok());
    for (auto* handle : handles) ASSERT_TRUE(db->DestroyColumnFamilyHandle(handle).ok());
    delete db;
  }
  absl::StatusOr<std::unique_ptr<RocksDbStore>> store =
      RocksDbStore::Open(OptionsFor(scratch.path()));
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(),
              HasSubstr(absl::StrCat("it has data format version ", kFormatVersion + 1,
                                     " (written by ledgerd 9.0.0); this ledgerd reads only "
                                     "version ",
                                     kFormatVersion)));
}

TEST(RocksDbStoreTest, RefusesACorruptDirectory) {
  ScratchLedger scratch;
  {
    std::unique_ptr<RocksDbStore> store = OpenOrDie(OptionsFor(scratch.path()));
    ASSERT_NE(store, nullptr);
    BatchWrite batch;
    batch.accounts = {{"a", {.balance = 1, .sequence = 1}}};
    ASSERT_TRUE(store->Write(batch).ok());
  }
  int garbled = 0;
  for (const auto& file : std::filesystem::directory_iterator(scratch.path())) {
    if (file.path().filename().string().starts_with("MANIFEST-")) {
      std::ofstream(file.path(), std::ios::binary | std::ios::trunc) << "garbage, not a manifest";
      ++garbled;
    }
  }
  ASSERT_EQ(garbled, 1);
  absl::StatusOr<std::unique_ptr<RocksDbStore>> store =
      RocksDbStore::Open(OptionsFor(scratch.path()));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr("refusing data directory"));
}

TEST(RocksDbStoreTest, RefusesADirectoryInUse) {
  ScratchLedger scratch;
  std::unique_ptr<RocksDbStore> first = OpenOrDie(OptionsFor(scratch.path()));
  ASSERT_NE(first, nullptr);
  absl::StatusOr<std::unique_ptr<RocksDbStore>> second =
      RocksDbStore::Open(OptionsFor(scratch.path()));
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr("is in use by another process"));
}

TEST(RocksDbStoreTest, CompactionPurgesExpiredRequestRecordsOnly) {
  ScratchLedger scratch;
  std::atomic<int64_t> now{1'800'000'000};
  StoreOptions options = OptionsFor(scratch.path());
  options.idempotency_ttl = absl::Hours(24);
  options.clock = [&] { return absl::FromUnixSeconds(now.load()); };
  std::unique_ptr<RocksDbStore> store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  BatchWrite batch;
  for (int i = 0; i < 3; ++i) {
    batch.requests.push_back(
        {"a", "old-" + std::to_string(i), {.recorded_at = absl::FromUnixSeconds(now.load())}});
  }
  batch.requests.push_back(
      {"a", "recent", {.recorded_at = absl::FromUnixSeconds(now.load() + 23 * 3600)}});
  ASSERT_TRUE(store->Write(batch).ok());
  ASSERT_TRUE(store->PurgeExpiredRequests().ok());
  EXPECT_EQ(store->CountRequestRecords().value(), 4);  // Nothing has expired yet.
  now += 24 * 3600;
  ASSERT_TRUE(store->PurgeExpiredRequests().ok());
  EXPECT_EQ(store->CountRequestRecords().value(), 1);
  EXPECT_TRUE(store->FindRequest("a", "recent").value().has_value());
}

// Issue 30's soak: what RocksDB holds per table file outside the block cache grew with the data on
// disk (every file's index and bloom filter), so ledgerd's memory grew with every Deposit kept for
// the idempotency TTL. Now those blocks are charged to the one bounded block cache: after many
// files' worth of records, what stays outside it is a few KB per file, and the cache itself stays
// within kBlockCacheBytes while every record is still found.
TEST(RocksDbStoreTest, IndexAndFilterBlocksAreChargedToTheBoundedBlockCache) {
  ScratchLedger scratch;
  StoreOptions options = OptionsFor(scratch.path());
  options.durability = Durability::kAsync;  // What is measured is memory, not the syncs.
  std::unique_ptr<RocksDbStore> store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  constexpr int kFiles = 8;
  constexpr int kRecordsPerFile = 10'000;
  const RequestRecord record{.op = Op::kDeposit,
                             .amount = 10,
                             .outcome = Outcome::kOk,
                             .balance = 10,
                             .recorded_at = absl::FromUnixSeconds(1'800'000'000)};
  for (int file = 0; file < kFiles; ++file) {
    for (int batch_start = 0; batch_start < kRecordsPerFile; batch_start += 2'000) {
      BatchWrite batch;
      for (int i = batch_start; i < batch_start + 2'000; ++i) {
        const std::string id = absl::StrCat("run-0123456789-", file, "-", i);
        batch.requests.push_back({absl::StrCat("acct-", i % 1000), id, record});
        batch.journal.push_back(Entry(absl::StrCat("acct-", i % 1000),
                                      static_cast<uint64_t>(file * kRecordsPerFile + i + 1), 10));
      }
      ASSERT_TRUE(store->Write(batch).ok());
    }
    // Flushes the memtable into a table file (and compacts the requests' files together).
    ASSERT_TRUE(store->PurgeExpiredRequests().ok());
  }
  absl::StatusOr<StoreMemory> memory = store->Memory();
  ASSERT_TRUE(memory.ok()) << memory.status();
  // RocksDB's default (index and filter blocks held by each open file) holds about 3 bytes per
  // record and journal entry here, 250 KB; charged to the cache, only the table readers
  // themselves stay outside (about 6 KB).
  EXPECT_LT(memory->table_readers_bytes, 64 << 10);
  EXPECT_LE(memory->block_cache_bytes, kBlockCacheBytes);
  EXPECT_LE(memory->block_cache_pinned_bytes, memory->block_cache_bytes);
  EXPECT_GT(memory->block_cache_bytes, 0);  // The filters and indexes are read through it.
  EXPECT_EQ(store->CountRequestRecords().value(), kFiles * kRecordsPerFile);
  EXPECT_EQ(store->FindRequest("acct-7", "run-0123456789-3-7007").value(), record);
  EXPECT_EQ(store->FindRequest("acct-7", "run-0123456789-3-7008").value(), std::nullopt);
}

TEST(RocksDbStoreTest, InitCreatesALedgerOnlyInAMissingOrEmptyDirectory) {
  ScratchDir scratch;
  absl::StatusOr<std::string> created = RocksDbStore::Init(OptionsFor(scratch.Sub("new")));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->size(), 32u);  // 128 random bits in hex.
  std::unique_ptr<RocksDbStore> store = OpenOrDie(OptionsFor(scratch.Sub("new")));
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->ledger_id(), *created);

  absl::StatusOr<std::string> again = RocksDbStore::Init(OptionsFor(scratch.Sub("new")));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  std::ofstream(scratch.Sub("notes.txt")) << "mine\n";
  absl::StatusOr<std::string> over_files = RocksDbStore::Init(OptionsFor(scratch.path()));
  ASSERT_FALSE(over_files.ok());
  EXPECT_THAT(over_files.status().message(), HasSubstr("it is not empty"));
}

TEST(RocksDbStoreTest, OpenNeverCreatesALedger) {
  ScratchDir scratch;
  absl::StatusOr<std::unique_ptr<RocksDbStore>> missing =
      RocksDbStore::Open(OptionsFor(scratch.Sub("missing")));
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("ledgerd init --data_dir="));
  EXPECT_FALSE(std::filesystem::exists(scratch.Sub("missing")));
  absl::StatusOr<std::unique_ptr<RocksDbStore>> empty =
      RocksDbStore::Open(OptionsFor(scratch.path()));
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), HasSubstr("it is empty, so it holds no ledger"));
  EXPECT_TRUE(std::filesystem::is_empty(scratch.path()));
}

TEST(RocksDbStoreTest, ADeletedDirectoryFailsEveryWriteAndStaysFailed) {
  ScratchDir scratch;
  testing_util::InitLedger(scratch.Sub("ledger"));
  std::unique_ptr<RocksDbStore> store = OpenOrDie(OptionsFor(scratch.Sub("ledger")));
  ASSERT_NE(store, nullptr);
  BatchWrite batch;
  batch.accounts = {{"a", {.balance = 5, .sequence = 1}}};
  ASSERT_TRUE(store->Write(batch).ok());
  EXPECT_TRUE(store->CheckDataDirectory().ok());

  std::filesystem::remove_all(scratch.Sub("ledger"));
  const absl::Status write = store->Write(batch);
  EXPECT_EQ(write.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(write.message(), HasSubstr("was deleted"));
  EXPECT_EQ(store->CheckDataDirectory().code(), absl::StatusCode::kUnavailable);
  // A new directory at the same path is another directory: still refused.
  std::filesystem::create_directories(scratch.Sub("ledger"));
  EXPECT_EQ(store->Write(batch).code(), absl::StatusCode::kUnavailable);
}

TEST(RocksDbStoreTest, AReplacedDirectoryIsNoticed) {
  ScratchDir scratch;
  testing_util::InitLedger(scratch.Sub("ledger"));
  std::unique_ptr<RocksDbStore> store = OpenOrDie(OptionsFor(scratch.Sub("ledger")));
  ASSERT_NE(store, nullptr);
  std::filesystem::rename(scratch.Sub("ledger"), scratch.Sub("moved"));
  std::filesystem::create_directories(scratch.Sub("ledger"));
  const absl::Status check = store->CheckDataDirectory();
  EXPECT_EQ(check.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(check.message(), HasSubstr("was replaced"));
}

TEST(DurabilityTest, ParsesTheThreeNamesAndRefusesOthers) {
  EXPECT_EQ(ParseDurability("sync").value(), Durability::kSync);
  EXPECT_EQ(ParseDurability("async").value(), Durability::kAsync);
  EXPECT_EQ(ParseDurability("none").value(), Durability::kNone);
  EXPECT_EQ(ParseDurability("fsync").status().message(),
            "durability must be sync, async or none; got \"fsync\"");
}

}  // namespace
}  // namespace ledger::storage
