// The store's log (docs/architecture.md, "The journal as a log"): a group write is one log
// append; RocksDB is derived behind it, replayed from the log after a crash, checkpointed so that
// old segments go; reads see every acknowledged write; a failed sync is never taken as written;
// directories of the old format are upgraded by an explicit command.
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/rocksdb_store.h"
#include "tests/scratch_dir.h"
#include "tests/scratch_ledger.h"
#include "tests/test_paths.h"
#include "tests/wait_until.h"

namespace ledger::storage {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing_util::ScratchDir;

constexpr int64_t kSmallSegment = 8 << 10;

StoreOptions LogOptions(const std::string& dir) {
  StoreOptions options;
  options.data_dir = dir;
  options.durability = Durability::kSync;
  options.log_segment_bytes = kSmallSegment;
  return options;
}

std::unique_ptr<RocksDbStore> OpenStoreOrDie(const StoreOptions& options,
                                             StoreTestHooks hooks = {}) {
  absl::StatusOr<std::unique_ptr<RocksDbStore>> store =
      RocksDbStore::Open(options, std::move(hooks));
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

// Deposit number `n` of 10 to `account`: its state, journal entry and idempotency record.
BatchWrite DepositBatch(const std::string& account, uint64_t n) {
  BatchWrite batch;
  const int64_t balance = static_cast<int64_t>(n) * 10;
  batch.accounts = {{account, {.balance = balance, .sequence = n}}};
  batch.journal = {JournalEntry{.account_id = account,
                                .sequence = n,
                                .kind = EntryKind::kDeposit,
                                .amount = 10,
                                .balance_after = balance,
                                .request_id = absl::StrCat("d-", n),
                                .time = absl::FromUnixSeconds(1'800'000'000)}};
  batch.requests = {{account, absl::StrCat("d-", n),
                     RequestRecord{.op = Op::kDeposit,
                                   .amount = 10,
                                   .balance = balance,
                                   .recorded_at = absl::FromUnixSeconds(1'800'000'000)}}};
  return batch;
}

// Holds the store's applier back (before it applies what is queued) while held; a test releases
// it to let the applier catch up. Outlives the store it hooks into.
class ApplierSwitch {
 public:
  explicit ApplierSwitch(bool held = false) : held_(held) {}
  StoreTestHooks Hooks() {
    StoreTestHooks hooks;
    hooks.before_apply = [this] {
      std::unique_lock<std::mutex> lock(mu_);
      released_.wait(lock, [this] { return !held_; });
    };
    return hooks;
  }
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = true;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_ = false;
    }
    released_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable released_;
  bool held_;
};

// What a crash leaves: the files as the OS holds them, without RocksDB's memtables (which the
// store writes without a WAL) or anything the process did not hand to the OS.
void CopyAsCrashImage(const std::string& from, const std::string& to) {
  std::filesystem::copy(from, to, std::filesystem::copy_options::recursive);
}

TEST(StoreLogTest, AGroupWriteIsOneLogEntryAndTheStoreCatchesUpBehindIt) {
  ScratchDir scratch;
  testing_util::InitLedger(scratch.path(), kSmallSegment);
  std::unique_ptr<RocksDbStore> store = OpenStoreOrDie(LogOptions(scratch.path()));
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->log_position(), 0u);
  const BatchWrite first = DepositBatch("a", 1);
  const BatchWrite second = DepositBatch("b", 1);
  const BatchWrite* const group[] = {&first, &second};
  ASSERT_TRUE(store->WriteGroup(group).ok());
  EXPECT_EQ(store->log_position(), 1u);
  // Read-your-writes: the account is there, whether or not the applier got to it first.
  EXPECT_EQ(store->FindAccount("b").value(), (AccountState{.balance = 10, .sequence = 1}));
  EXPECT_EQ(store->applied_position(), 1u);
}

// Entries the applier applies at once, each changing the same accounts: the last state of each
// account in the log's order is the one kept, read before the checkpoint and from RocksDB after
// it and a reopen (the applier keeps account states in the log's order rather than sorting
// every change; docs/replication.md 9.7).
TEST(StoreLogTest, TheLastChangeOfAnAccountInTheEntriesAppliedAtOnceIsTheOneKept) {
  ScratchDir scratch;
  testing_util::InitLedger(scratch.path(), kSmallSegment);
  ApplierSwitch applier(/*held=*/true);
  std::unique_ptr<RocksDbStore> store = OpenStoreOrDie(LogOptions(scratch.path()), applier.Hooks());
  ASSERT_NE(store, nullptr);
  for (uint64_t n = 1; n <= 5; ++n) {
    const BatchWrite a = DepositBatch("a", n);
    const BatchWrite b = DepositBatch("b", n);
    const BatchWrite* const group[] = {&a, &b};
    ASSERT_TRUE(store->WriteGroup(group).ok());
  }
  ASSERT_EQ(store->applied_position(), 0u);
  applier.Release();
  ASSERT_TRUE(WaitUntil([&] { return store->applied_position() == 5; }, "the applier applies 5"));
  EXPECT_EQ(store->FindAccount("a").value(), (AccountState{.balance = 50, .sequence = 5}));
  EXPECT_EQ(store->FindAccount("b").value(), (AccountState{.balance = 50, .sequence = 5}));
  ASSERT_TRUE(store->Checkpoint().ok());
  store.reset();
  std::unique_ptr<RocksDbStore> reopened = OpenStoreOrDie(LogOptions(scratch.path()));
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(reopened->FindAccount("a").value(), (AccountState{.balance = 50, .sequence = 5}));
  EXPECT_EQ(reopened->FindAccount("b").value(), (AccountState{.balance = 50, .sequence = 5}));
  absl::StatusOr<HistoryPage> history = reopened->ReadHistory("a", 0, 10);
  ASSERT_TRUE(history.ok()) << history.status();
  ASSERT_EQ(history->entries.size(), 5u);
  EXPECT_EQ(history->entries.front().balance_after, 50);  // Newest first.
  EXPECT_EQ(history->entries.back().balance_after, 10);
}

// A crash loses RocksDB's memtables (written without its WAL); the next open replays the log
// from the position RocksDB's tables hold, and every acknowledged write is back. The image is
// taken with the applier held back (and no checkpoint running), so that it is a state a crash
// can leave: tables checkpointed at 151, the applier at 201, the log at 302. The open replays the
// log as the applier applies it, into memory, and the start-up's load of the accounts takes the
// replayed states over the tables' ("a"), the replayed accounts the tables lack ("b") and the
// tables' own ("c"), in key order.
TEST(StoreLogTest, ACrashImageIsReplayedFromTheLogWithEveryAcknowledgedWrite) {
  ScratchDir scratch;
  const std::string dir = scratch.Sub("ledger");
  testing_util::InitLedger(dir, kSmallSegment);
  StoreOptions options = LogOptions(dir);
  options.log_segment_bytes = 1 << 20;  // No segment rolls, so no checkpoint but the test's.
  ApplierSwitch applier;
  StoreTestHooks hooks = applier.Hooks();
  std::unique_ptr<RocksDbStore> store = OpenStoreOrDie(options, hooks);
  ASSERT_NE(store, nullptr);
  for (uint64_t n = 1; n <= 150; ++n) ASSERT_TRUE(store->Write(DepositBatch("a", n)).ok());
  ASSERT_TRUE(store->Write(DepositBatch("c", 1)).ok());
  ASSERT_TRUE(
      testing_util::WaitUntil([&] { return store->applied_position() == 151; }, "applied 151"));
  ASSERT_TRUE(store->Checkpoint().ok());
  for (uint64_t n = 151; n <= 200; ++n) ASSERT_TRUE(store->Write(DepositBatch("a", n)).ok());
  ASSERT_TRUE(
      testing_util::WaitUntil([&] { return store->applied_position() == 201; }, "applied 201"));
  applier.Hold();
  for (uint64_t n = 201; n <= 300; ++n) ASSERT_TRUE(store->Write(DepositBatch("a", n)).ok());
  ASSERT_TRUE(store->Write(DepositBatch("b", 1)).ok());
  EXPECT_LT(store->applied_position(), 302u);
  CopyAsCrashImage(dir, scratch.Sub("crashed"));
  applier.Release();
  store.reset();

  std::unique_ptr<RocksDbStore> recovered = OpenStoreOrDie(LogOptions(scratch.Sub("crashed")));
  ASSERT_NE(recovered, nullptr);
  EXPECT_EQ(recovered->log_position(), 302u);
  EXPECT_EQ(recovered->applied_position(), 302u);
  EXPECT_EQ(recovered->checkpoints(), 0u);  // The replay is held in memory, as the applier's.
  EXPECT_EQ(recovered->FindAccount("a").value(), (AccountState{.balance = 3000, .sequence = 300}));
  EXPECT_EQ(recovered->FindAccount("b").value(), (AccountState{.balance = 10, .sequence = 1}));
  std::vector<std::pair<std::string, AccountState>> loaded;
  ASSERT_TRUE(recovered
                  ->ForEachAccount([&](std::string id, const AccountState& state) {
                    loaded.emplace_back(std::move(id), state);
                  })
                  .ok());
  const std::vector<std::pair<std::string, AccountState>> expected = {
      {"a", {.balance = 3000, .sequence = 300}},
      {"b", {.balance = 10, .sequence = 1}},
      {"c", {.balance = 10, .sequence = 1}}};
  EXPECT_EQ(loaded, expected);
  absl::StatusOr<HistoryPage> history = recovered->ReadHistory("a", 0, 1000);
  ASSERT_TRUE(history.ok());
  EXPECT_EQ(history->entries.size(), 300u);
  EXPECT_EQ(recovered->FindRequest("a", "d-300").value()->balance, 3000);
}

// Checkpoints let old segments go: the log stays a few segments long however much is written,
// and a clean stop leaves nothing to replay.
TEST(StoreLogTest, CheckpointsDeleteTheSegmentsBehindAndACleanStopLeavesNothingToReplay) {
  ScratchDir scratch;
  testing_util::InitLedger(scratch.path(), kSmallSegment);
  {
    std::unique_ptr<RocksDbStore> store = OpenStoreOrDie(LogOptions(scratch.path()));
    ASSERT_NE(store, nullptr);
    for (uint64_t n = 1; n <= 2000; ++n) ASSERT_TRUE(store->Write(DepositBatch("c", n)).ok());
    // About 150 bytes an entry: 2000 entries took some 37 segments of 8 KiB. Once the applier
    // has caught up (later under a sanitizer), checkpoints have let all but the last go.
    EXPECT_TRUE(testing_util::WaitUntil([&] { return store->LogSegments().size() <= 2; },
                                        "checkpoints let the old segments go"));
  }
  std::unique_ptr<RocksDbStore> store = OpenStoreOrDie(LogOptions(scratch.path()));
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->LogSegments().size(), 1u);
  EXPECT_EQ(store->applied_position(), 2000u);
  EXPECT_EQ(store->FindAccount("c").value(), (AccountState{.balance = 20000, .sequence = 2000}));
}

// The sequence numbers of a History page, newest first, and where the next page starts (0: none).
std::pair<std::vector<uint64_t>, uint64_t> HistoryOf(RocksDbStore& store,
                                                     const std::string& account, uint64_t start,
                                                     int32_t limit) {
  absl::StatusOr<HistoryPage> page = store.ReadHistory(account, start, limit);
  EXPECT_TRUE(page.ok()) << page.status();
  if (!page.ok()) return {};
  std::vector<uint64_t> sequences;
  for (const JournalEntry& entry : page->entries) {
    EXPECT_EQ(entry.balance_after, static_cast<int64_t>(entry.sequence) * 10);
    sequences.push_back(entry.sequence);
  }
  return {sequences, page->next_sequence};
}

// Idempotency records and journal entries do not go through RocksDB's memtable: they are held in
// memory until a checkpoint writes them as ingested tables. Found before and after it, after a
// crash (the tables, and the log replayed after them) and after a clean stop, with History pages
// that span memory and the tables; RocksDB holds the records only from the checkpoint on.
TEST(StoreLogTest, IdempotencyRecordsAndTheJournalReachRocksDbAtACheckpointAndAreReadAllAlong) {
  ScratchDir scratch;
  testing_util::InitLedger(scratch.path());  // 1 MiB segments: no checkpoint but ours.
  StoreOptions options = LogOptions(scratch.path());
  options.log_segment_bytes = int64_t{1} << 20;
  const auto balance_of = [](RocksDbStore& store, uint64_t n) -> std::optional<int64_t> {
    absl::StatusOr<std::optional<RequestRecord>> found =
        store.FindRequest("a", absl::StrCat("d-", n));
    EXPECT_TRUE(found.ok()) << found.status();
    if (!found.ok() || !found->has_value()) return std::nullopt;
    return (*found)->balance;
  };
  const std::string image = scratch.path() + "-crash";
  {
    std::unique_ptr<RocksDbStore> store = OpenStoreOrDie(options);
    ASSERT_NE(store, nullptr);
    for (uint64_t n = 1; n <= 10; ++n) ASSERT_TRUE(store->Write(DepositBatch("a", n)).ok());
    EXPECT_EQ(balance_of(*store, 3), 30);
    EXPECT_EQ(store->CountRequestRecords().value(), 0);
    EXPECT_GT(store->Memory().value().recent_records_bytes, 10 * 4);

    ASSERT_TRUE(store->Checkpoint().ok());
    EXPECT_EQ(store->CountRequestRecords().value(), 10);
    EXPECT_EQ(store->Memory().value().recent_records_bytes, 0);
    EXPECT_EQ(balance_of(*store, 3), 30);
    EXPECT_FALSE(std::filesystem::exists(
        absl::StrCat(scratch.path(), "/", kCheckpointStagingDirectory, "/requests.sst")));

    for (uint64_t n = 11; n <= 12; ++n) ASSERT_TRUE(store->Write(DepositBatch("a", n)).ok());
    EXPECT_EQ(balance_of(*store, 12), 120);
    // 12 and 11 in memory, the rest in the tables: one History across both.
    using Page = std::pair<std::vector<uint64_t>, uint64_t>;
    EXPECT_EQ(HistoryOf(*store, "a", 0, 5), (Page{{12, 11, 10, 9, 8}, 7}));
    EXPECT_EQ(HistoryOf(*store, "a", 7, 10), (Page{{7, 6, 5, 4, 3, 2, 1}, 0}));
    EXPECT_EQ(HistoryOf(*store, "a", 11, 1), (Page{{11}, 10}));
    EXPECT_EQ(store->FindAccount("a").value(), (AccountState{.balance = 120, .sequence = 12}));
    // A batch of lookups reads both too: 11 and 12 from memory, 1 to 10 with one MultiGet (its
    // keys out of order), 13 nowhere, and the account "b" never written.
    std::vector<std::string> ids;
    for (const uint64_t n : {12, 3, 13, 1, 11, 10, 7}) ids.push_back(absl::StrCat("d-", n));
    std::vector<RequestKeyRef> keys;
    for (const std::string& id : ids) keys.push_back({.account_id = "a", .request_id = id});
    keys.push_back({.account_id = "b", .request_id = "d-3"});
    for (const bool may_block : {false, true}) {
      std::vector<absl::StatusOr<MemoryLookup>> found = store->FindRequests(keys, may_block);
      ASSERT_EQ(found.size(), keys.size());
      std::vector<std::optional<int64_t>> balances;
      for (const absl::StatusOr<MemoryLookup>& lookup : found) {
        ASSERT_TRUE(lookup.ok()) << lookup.status();
        ASSERT_TRUE(lookup->answered);  // The tables' blocks were just written and read.
        balances.push_back(lookup->record.has_value() ? std::optional(lookup->record->balance)
                                                      : std::nullopt);
      }
      EXPECT_EQ(balances, (std::vector<std::optional<int64_t>>{120, 30, std::nullopt, 10, 110, 100,
                                                               70, std::nullopt}))
          << "may_block " << may_block;
    }
    CopyAsCrashImage(scratch.path(), image);
  }
  {
    StoreOptions crashed = options;
    crashed.data_dir = image;
    std::unique_ptr<RocksDbStore> store = OpenStoreOrDie(crashed);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(balance_of(*store, 3), 30);    // From the ingested table.
    EXPECT_EQ(balance_of(*store, 12), 120);  // From the log, replayed after it.
    EXPECT_EQ(balance_of(*store, 13), std::nullopt);
    EXPECT_EQ(HistoryOf(*store, "a", 0, 20).first,
              (std::vector<uint64_t>{12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1}));
  }
  std::filesystem::remove_all(image);
  std::unique_ptr<RocksDbStore> store = OpenStoreOrDie(options);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->CountRequestRecords().value(), 12);  // The clean stop checkpointed.
  EXPECT_EQ(balance_of(*store, 11), 110);
  EXPECT_EQ(HistoryOf(*store, "a", 0, 3),
            (std::pair<std::vector<uint64_t>, uint64_t>{{12, 11, 10}, 9}));
  EXPECT_EQ(store->FindAccount("a").value(), (AccountState{.balance = 120, .sequence = 12}));
}

// The records held in memory are bounded: past StoreOptions::recent_records_checkpoint_bytes the
// applier checkpoints, though no segment is full, and memory holds less than the bound again.
TEST(StoreLogTest, RecordsHeldInMemoryPastTheirBoundAreCheckpointedBeforeASegmentFills) {
  ScratchDir scratch;
  testing_util::InitLedger(scratch.path());
  StoreOptions options = LogOptions(scratch.path());
  options.log_segment_bytes = int64_t{1} << 20;
  options.recent_records_checkpoint_bytes = 4 << 10;
  std::unique_ptr<RocksDbStore> store = OpenStoreOrDie(options);
  ASSERT_NE(store, nullptr);
  // About 60 bytes of keys and values a Deposit: 400 of them are some 24 KiB, a few bounds' worth.
  for (uint64_t n = 1; n <= 400; ++n) ASSERT_TRUE(store->Write(DepositBatch("a", n)).ok());
  ASSERT_EQ(HistoryOf(*store, "a", 0, 1).first, std::vector<uint64_t>{400});  // Applied.
  // The applier checkpoints right after the turn that crossed the bound.
  EXPECT_TRUE(testing_util::WaitUntil(
      [&] { return store->Memory().value().recent_records_bytes < (4 << 10); },
      "the applier checkpoints the records past their bound"));
  // At least one: how many depends on how the 400 writes fell into the applier's turns (a loaded
  // machine gives it fewer, larger ones).
  EXPECT_GE(store->checkpoints(), 1u);
  EXPECT_EQ(store->LogSegments().size(), 1u);  // No segment filled.
  EXPECT_GT(store->CountRequestRecords().value(), 300);
  EXPECT_EQ(HistoryOf(*store, "a", 0, 500).first.size(), 400u);
}

// A checkpoint that cannot write its tables (here its staging directory cannot be made: a file is
// in the way) fails, keeps every record and journal entry in memory, where reads still find
// them, and keeps the log; the next one, once it can, writes them all.
TEST(StoreLogTest, ACheckpointThatCannotWriteItsTablesKeepsEverythingInMemoryForTheNext) {
  ScratchDir scratch;
  testing_util::InitLedger(scratch.path());
  StoreOptions options = LogOptions(scratch.path());
  options.log_segment_bytes = int64_t{1} << 20;
  std::unique_ptr<RocksDbStore> store = OpenStoreOrDie(options);
  ASSERT_NE(store, nullptr);
  const std::string in_the_way = absl::StrCat(scratch.path(), "/", kCheckpointStagingDirectory);
  { std::ofstream(in_the_way) << "not a directory"; }
  for (uint64_t n = 1; n <= 5; ++n) ASSERT_TRUE(store->Write(DepositBatch("a", n)).ok());
  ASSERT_EQ(HistoryOf(*store, "a", 0, 10).first.size(), 5u);  // The applier has them all.

  const absl::Status failed = store->Checkpoint();
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable) << failed;
  EXPECT_THAT(failed.message(), HasSubstr("cannot create"));
  EXPECT_EQ(store->checkpoints(), 0u);
  EXPECT_EQ(store->CountRequestRecords().value(), 0);
  EXPECT_GT(store->Memory().value().recent_records_bytes, 5 * 20);
  EXPECT_EQ(store->FindRequest("a", "d-4").value()->balance, 40);
  EXPECT_EQ(HistoryOf(*store, "a", 0, 10).first, (std::vector<uint64_t>{5, 4, 3, 2, 1}));
  EXPECT_EQ(store->FindAccount("a").value(), (AccountState{.balance = 50, .sequence = 5}));

  std::filesystem::remove(in_the_way);
  ASSERT_TRUE(store->Checkpoint().ok());
  EXPECT_EQ(store->checkpoints(), 1u);
  EXPECT_EQ(store->CountRequestRecords().value(), 5);
  EXPECT_EQ(store->Memory().value().recent_records_bytes, 0);
  EXPECT_EQ(HistoryOf(*store, "a", 0, 10).first, (std::vector<uint64_t>{5, 4, 3, 2, 1}));
  store.reset();
  store = OpenStoreOrDie(options);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->FindAccount("a").value(), (AccountState{.balance = 50, .sequence = 5}));
  EXPECT_EQ(HistoryOf(*store, "a", 2, 10).first, (std::vector<uint64_t>{2, 1}));
}

// RocksDB compacts nothing from Open until the accounts are loaded (start-up's journal check
// then has both cores), and again as soon as they are; a store that never loads them (a tool
// that only writes) compacts from its first checkpoint.
TEST(StoreLogTest, CompactionsWaitUntilTheAccountsAreLoadedOrTheFirstCheckpoint) {
  ScratchDir scratch;
  testing_util::InitLedger(scratch.path());
  const StoreOptions options = LogOptions(scratch.path());
  {
    std::unique_ptr<RocksDbStore> store = OpenStoreOrDie(options);
    ASSERT_NE(store, nullptr);
    EXPECT_TRUE(store->CompactionsDeferred());
    ASSERT_TRUE(store->Write(DepositBatch("a", 1)).ok());
    EXPECT_TRUE(store->CompactionsDeferred());  // Writes alone do not resume them.
    ASSERT_TRUE(store->Checkpoint().ok());
    EXPECT_FALSE(store->CompactionsDeferred());
  }
  std::unique_ptr<RocksDbStore> store = OpenStoreOrDie(options);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->CompactionsDeferred());
  int loaded = 0;
  ASSERT_TRUE(
      store->ForEachAccount([&](const std::string&, const AccountState&) { ++loaded; }).ok());
  EXPECT_EQ(loaded, 1);
  EXPECT_FALSE(store->CompactionsDeferred());
}

// A checkpoint's ingested tables, and reopening a store that has them, print nothing from
// RocksDB: 7.8 warns (once a process, when it first opens one) that such files have no unique ID
// in its manifest to check them against, which is expected (StderrLogger drops it) and would
// alarm an operator at every start.
TEST(StoreLogTest, ACheckpointAndReopeningAfterItPrintNoRocksDbWarning) {
  ScratchDir scratch;
  testing_util::InitLedger(scratch.path());
  const StoreOptions options = LogOptions(scratch.path());
  ::testing::internal::CaptureStderr();
  {
    std::unique_ptr<RocksDbStore> store = OpenStoreOrDie(options);
    ASSERT_NE(store, nullptr);
    for (uint64_t n = 1; n <= 3; ++n) ASSERT_TRUE(store->Write(DepositBatch("a", n)).ok());
    ASSERT_TRUE(store->Checkpoint().ok());
  }
  std::unique_ptr<RocksDbStore> store = OpenStoreOrDie(options);
  ASSERT_NE(store, nullptr);
  // Reads the ingested tables: RocksDB opens them (and would warn) here at the latest.
  EXPECT_EQ(store->FindRequest("a", "d-2").value()->balance, 20);
  EXPECT_EQ(HistoryOf(*store, "a", 0, 5).first, (std::vector<uint64_t>{3, 2, 1}));
  const std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(printed, Not(HasSubstr("rocksdb:"))) << printed;
}

// The applier's own checkpoints (here after every entry: a tiny bound on the records held) that
// fail are tried again a second later, not at each of the 200 entries it applies meanwhile; the
// first one after the cause is gone succeeds.
TEST(StoreLogTest, TheApplierTriesAFailedCheckpointAgainASecondLaterNotAtEveryEntry) {
  ScratchDir scratch;
  testing_util::InitLedger(scratch.path());
  StoreOptions options = LogOptions(scratch.path());
  options.recent_records_checkpoint_bytes = 1;
  std::unique_ptr<RocksDbStore> store = OpenStoreOrDie(options);
  ASSERT_NE(store, nullptr);
  const std::string in_the_way = absl::StrCat(scratch.path(), "/", kCheckpointStagingDirectory);
  { std::ofstream(in_the_way) << "not a directory"; }
  const auto started = std::chrono::steady_clock::now();
  for (uint64_t n = 1; n <= 200; ++n) ASSERT_TRUE(store->Write(DepositBatch("a", n)).ok());
  ASSERT_EQ(HistoryOf(*store, "a", 0, 1).first, (std::vector<uint64_t>{200}));  // All applied.
  const auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started)
          .count();
  EXPECT_EQ(store->checkpoints(), 0u);
  EXPECT_GE(store->checkpoint_failures(), 1u);
  // One attempt a second at most (and the first at once).
  EXPECT_LE(store->checkpoint_failures(), static_cast<uint64_t>(seconds) + 1);
  EXPECT_EQ(store->log_progress().checkpoint_failures, store->checkpoint_failures());

  std::filesystem::remove(in_the_way);
  const uint64_t failures = store->checkpoint_failures();
  // The applier checks after each entry it applies: keep writing until it has tried again.
  uint64_t n = 200;
  ASSERT_TRUE(testing_util::WaitUntil(
      [&] {
        EXPECT_TRUE(store->Write(DepositBatch("a", ++n)).ok());
        return store->checkpoints() > 0;
      },
      "a checkpoint succeeds", std::chrono::seconds(10), std::chrono::milliseconds(20)));
  EXPECT_EQ(store->checkpoint_failures(), failures);
  // It wrote every record held since the failures began.
  EXPECT_GE(store->CountRequestRecords().value(), 200);
}

// A staged backup is RocksDB's checkpoint at the applied position plus the log after it, up to
// the newest acknowledged write: here the applier is held at 50 while 70 are acknowledged, so the
// copy's log holds 51 to 70, and the copy, opened as a data directory, has all 70. One backup is
// staged at a time; a discarded one leaves nothing in the data directory.
TEST(StoreLogTest, ABackupIsTheCheckpointAndTheLogAfterItUpToTheNewestAcknowledged) {
  ScratchDir scratch;
  const std::string dir = scratch.Sub("ledger");
  testing_util::InitLedger(dir, kSmallSegment);
  ApplierSwitch applier;
  StoreTestHooks hooks = applier.Hooks();
  std::unique_ptr<RocksDbStore> store = OpenStoreOrDie(LogOptions(dir), hooks);
  ASSERT_NE(store, nullptr);
  for (uint64_t n = 1; n <= 50; ++n) ASSERT_TRUE(store->Write(DepositBatch("a", n)).ok());
  ASSERT_TRUE(
      testing_util::WaitUntil([&] { return store->applied_position() == 50; }, "applied 50"));
  applier.Hold();
  for (uint64_t n = 51; n <= 70; ++n) ASSERT_TRUE(store->Write(DepositBatch("a", n)).ok());

  absl::StatusOr<StagedBackup> staged = store->StageBackup();
  ASSERT_TRUE(staged.ok()) << staged.status();
  EXPECT_EQ(staged->dir, dir + "/backup_staging");
  EXPECT_EQ(staged->ledger_id, store->ledger_id());
  EXPECT_EQ(staged->applied_position, 50u);
  EXPECT_EQ(staged->last_position, 70u);
  EXPECT_THAT(staged->files, ::testing::Contains("CURRENT"));
  EXPECT_THAT(staged->files, ::testing::Contains("ledger_log/00000000000000000051.seg"));
  const absl::StatusOr<StagedBackup> second = store->StageBackup();
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition) << second.status();
  {
    LocalLogOptions log_options;
    log_options.dir = staged->dir + "/ledger_log";
    absl::StatusOr<std::unique_ptr<LocalLog>> log = LocalLog::Open(log_options);
    ASSERT_TRUE(log.ok()) << log.status();
    EXPECT_EQ((*log)->first_position(), 51u);
    EXPECT_EQ((*log)->last_position(), 70u);
  }
  const std::string copy = scratch.Sub("copy");
  std::filesystem::copy(staged->dir, copy, std::filesystem::copy_options::recursive);
  store->DiscardStagedBackup();
  EXPECT_FALSE(std::filesystem::exists(staged->dir));
  applier.Release();
  EXPECT_TRUE(store->StageBackup().ok());
  store->DiscardStagedBackup();

  std::unique_ptr<RocksDbStore> restored = OpenStoreOrDie(LogOptions(copy));
  ASSERT_NE(restored, nullptr);
  EXPECT_EQ(restored->log_position(), 70u);
  EXPECT_EQ(restored->ledger_id(), store->ledger_id());
  EXPECT_EQ(restored->FindAccount("a").value(), (AccountState{.balance = 700, .sequence = 70}));
}

// Deposit d-1 of 10 to "d", with transfer t-1's pending record (5 from "d" to "e") and the
// receipt of transfer t-0's credit (3 from "x").
BatchWrite DepositWithATransferAndACredit() {
  BatchWrite batch = DepositBatch("d", 1);
  batch.transfers = {
      {"t-1", TransferRecord{.from = "d", .to = "e", .amount = 5, .state = TransferState::kPending},
       false}};
  batch.credits = {{"t-0", CreditReceipt{.from = "x", .amount = 3}}};
  return batch;
}

// A store whose applier is held back, with DepositWithATransferAndACredit written: the log
// holds the entry, RocksDB nothing of it.
class HeldApplierTest : public testing::Test {
 protected:
  void SetUp() override {
    testing_util::InitLedger(scratch_.path(), kSmallSegment);
    store_ = OpenStoreOrDie(LogOptions(scratch_.path()), applier_.Hooks());
    ASSERT_NE(store_, nullptr);
    ASSERT_TRUE(store_->Write(DepositWithATransferAndACredit()).ok());
    ASSERT_EQ(store_->applied_position(), 0u);
  }
  void TearDown() override { applier_.Release(); }

  ScratchDir scratch_;
  ApplierSwitch applier_{/*held=*/true};
  std::unique_ptr<RocksDbStore> store_;
};

// While the applier is held back, a decision's lookup of a request_id or transfer_id is answered
// from the log's unapplied records without waiting, and History waits for the applier instead of
// answering without the acknowledged write.
TEST_F(HeldApplierTest, ReadsSeeAcknowledgedWritesTheApplierHasNotReached) {
  absl::StatusOr<MemoryLookup> request = store_->FindRequestInMemory("d", "d-1");
  ASSERT_TRUE(request.ok());
  EXPECT_TRUE(request->answered);
  ASSERT_TRUE(request->record.has_value());
  EXPECT_EQ(request->record->balance, 10);
  absl::StatusOr<TransferLookup> transfer = store_->FindTransferInMemory("t-1", "d");
  ASSERT_TRUE(transfer.ok());
  EXPECT_TRUE(transfer->answered);
  ASSERT_TRUE(transfer->record.has_value());
  EXPECT_EQ(transfer->record->amount, 5);
  absl::StatusOr<CreditLookup> credit = store_->FindCreditInMemory("t-0");
  ASSERT_TRUE(credit.ok());
  ASSERT_TRUE(credit->receipt.has_value());
  EXPECT_EQ(credit->receipt->amount, 3);
  EXPECT_EQ(store_->FindRequestInMemory("d", "never").value().record, std::nullopt);

  std::future<absl::StatusOr<HistoryPage>> history =
      std::async(std::launch::async, [&] { return store_->ReadHistory("d", 0, 10); });
  EXPECT_EQ(history.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  applier_.Release();
  absl::StatusOr<HistoryPage> page = history.get();
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->entries.size(), 1u);
  EXPECT_EQ(page->entries[0].balance_after, 10);
  EXPECT_EQ(store_->FindPendingTransfers("t-1").value().size(), 1u);
}

// A lookup that may block answers without waiting for the applier: the applier never writes
// idempotency records (the journal thread holds them until a checkpoint ingests them), and a
// transfer's records and receipts are answered from UnappliedRecords until the applier has
// written them. With the applier held, as a checkpoint holds it for hundreds of milliseconds
// under load, a shard's lookups of new request_ids and transfer_ids went on. (They waited for it
// once, and held the shards behind every checkpoint.)
TEST_F(HeldApplierTest, LookupsThatMayBlockDoNotWaitForTheApplier) {
  const RequestKeyRef keys[] = {{.account_id = "d", .request_id = "d-1"},
                                {.account_id = "d", .request_id = "never"}};
  std::future<std::vector<absl::StatusOr<MemoryLookup>>> requests = std::async(
      std::launch::async, [&] { return store_->FindRequests(keys, /*may_block=*/true); });
  std::future<absl::StatusOr<std::optional<RequestRecord>>> request =
      std::async(std::launch::async, [&] { return store_->FindRequest("d", "never"); });
  std::future<absl::StatusOr<std::optional<TransferRecord>>> transfer =
      std::async(std::launch::async, [&] { return store_->FindTransfer("t-1", "d"); });
  std::future<absl::StatusOr<std::optional<TransferRecord>>> no_transfer =
      std::async(std::launch::async, [&] { return store_->FindTransfer("never", ""); });
  std::future<absl::StatusOr<std::optional<CreditReceipt>>> credit =
      std::async(std::launch::async, [&] { return store_->FindCredit("t-0"); });
  // Declared after the futures, so destroyed before them: a failed assertion releases the
  // applier before their destructors wait for lookups that wait for it.
  absl::Cleanup release_applier = [&] { applier_.Release(); };
  // Far longer than any takes; waiting for the applier would block until it is released.
  for (const std::future_status status :
       {requests.wait_for(std::chrono::seconds(5)), request.wait_for(std::chrono::seconds(5)),
        transfer.wait_for(std::chrono::seconds(5)), no_transfer.wait_for(std::chrono::seconds(5)),
        credit.wait_for(std::chrono::seconds(5))}) {
    ASSERT_EQ(status, std::future_status::ready);
  }
  const std::vector<absl::StatusOr<MemoryLookup>> found = requests.get();
  ASSERT_EQ(found.size(), 2u);
  ASSERT_TRUE(found[0].ok() && found[1].ok());
  ASSERT_TRUE(found[0]->record.has_value());
  EXPECT_EQ(found[0]->record->balance, 10);
  EXPECT_TRUE(found[1]->answered);
  EXPECT_EQ(found[1]->record, std::nullopt);
  EXPECT_EQ(request.get().value(), std::nullopt);
  const std::optional<TransferRecord> pending = transfer.get().value();
  ASSERT_TRUE(pending.has_value());
  EXPECT_EQ(pending->amount, 5);
  EXPECT_EQ(pending->state, TransferState::kPending);
  EXPECT_EQ(no_transfer.get().value(), std::nullopt);
  const std::optional<CreditReceipt> receipt = credit.get().value();
  ASSERT_TRUE(receipt.has_value());
  EXPECT_EQ(receipt->amount, 3);
  EXPECT_EQ(store_->applied_position(), 0u);  // Still held: nothing waited for it.
  std::move(release_applier).Invoke();
  // Once applied (and so forgotten by UnappliedRecords), RocksDB answers the same.
  absl::StatusOr<HistoryPage> page = store_->ReadHistory("d", 0, 10);  // Waits for the applier_.
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(store_->FindTransfer("t-1", "d").value()->amount, 5);
  EXPECT_EQ(store_->FindCredit("t-0").value()->amount, 3);
}

// PostgreSQL's fsync lesson: a failed sync fails the group (outcome unknown to its callers), no
// write is taken until the log is repaired, and the failed group is on disk in no form.
TEST(StoreLogTest, AFailedSyncFailsTheGroupStopsWritesUntilRepairedAndLeavesNoTrace) {
  ScratchDir scratch;
  testing_util::InitLedger(scratch.path(), kSmallSegment);
  std::atomic<bool> fail_sync{false};
  StoreTestHooks hooks;
  hooks.log_fault = [&](absl::string_view step) {
    if (step == "sync" && fail_sync.load()) return absl::UnavailableError("injected EIO");
    return absl::OkStatus();
  };
  {
    std::unique_ptr<RocksDbStore> store = OpenStoreOrDie(LogOptions(scratch.path()), hooks);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Write(DepositBatch("f", 1)).ok());
    fail_sync = true;
    const absl::Status failed = store->Write(DepositBatch("f", 2));
    EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(failed.message(), HasSubstr("injected EIO"));
    // The next write first repairs the log (zeroes the failed entry and syncs): that sync fails
    // too, so the write is refused, and again at once until 200 ms have passed.
    const absl::Status unrepaired = store->Write(DepositBatch("g", 1));
    EXPECT_EQ(unrepaired.code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(unrepaired.message(), HasSubstr("repairing it failed"));
    fail_sync = false;
    EXPECT_EQ(store->Write(DepositBatch("g", 1)).code(), absl::StatusCode::kUnavailable);
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    ASSERT_TRUE(store->Write(DepositBatch("f", 2)).ok());
    EXPECT_EQ(store->log_position(), 2u);
    EXPECT_EQ(store->FindAccount("g").value(), std::nullopt);
  }
  std::unique_ptr<RocksDbStore> store = OpenStoreOrDie(LogOptions(scratch.path()));
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->FindAccount("f").value(), (AccountState{.balance = 20, .sequence = 2}));
  EXPECT_EQ(store->FindAccount("g").value(), std::nullopt);
  EXPECT_EQ(store->log_position(), 2u);
}

// In durability async the log is not synced per group: a checkpoint syncs it before it records
// the position it applied, so that after an OS crash the log never ends before that position
// (which the next start would refuse as data loss). A checkpoint that cannot sync it records
// nothing, and the log takes no write until a restart.
TEST(StoreLogTest, InDurabilityAsyncACheckpointSyncsTheLogFirstOrRecordsNothing) {
  ScratchDir scratch;
  testing_util::InitLedger(scratch.path(), kSmallSegment);
  std::atomic<int> syncs{0};
  std::atomic<bool> fail_sync{false};
  StoreTestHooks hooks;
  hooks.log_fault = [&](absl::string_view step) {
    if (step != "sync") return absl::OkStatus();
    syncs.fetch_add(1);
    return fail_sync.load() ? absl::UnavailableError("injected EIO") : absl::OkStatus();
  };
  StoreOptions options = LogOptions(scratch.path());
  options.durability = Durability::kAsync;
  {
    std::unique_ptr<RocksDbStore> store = OpenStoreOrDie(options, hooks);
    ASSERT_NE(store, nullptr);
    for (uint64_t n = 1; n <= 3; ++n) ASSERT_TRUE(store->Write(DepositBatch("a", n)).ok());
    EXPECT_EQ(syncs.load(), 0);
    ASSERT_TRUE(store->Checkpoint().ok());
    EXPECT_EQ(syncs.load(), 1);
    ASSERT_TRUE(store->Write(DepositBatch("a", 4)).ok());
    fail_sync = true;
    const uint64_t failures = store->checkpoint_failures();
    const absl::Status failed = store->Checkpoint();
    EXPECT_THAT(failed.message(), HasSubstr("injected EIO"));
    EXPECT_EQ(store->checkpoint_failures(), failures + 1);
    fail_sync = false;
    EXPECT_FALSE(store->Write(DepositBatch("a", 5)).ok());
  }
  std::unique_ptr<RocksDbStore> store = OpenStoreOrDie(LogOptions(scratch.path()));
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->FindAccount("a").value(), (AccountState{.balance = 40, .sequence = 4}));
}

// tests/fixtures/format1_ledger.tar.gz was written by ledgerd 0.1.0 at format version 1 (commit
// 984f3ec: deposits, a withdrawal, a committed and a refused transfer, then a SIGKILL, so that
// part of it is still in RocksDB's own WAL).
class UpgradeTest : public testing::Test {
 protected:
  void SetUp() override {
    const std::string untar =
        absl::StrCat("tar -C ", scratch_.path(), " -xzf ", testing_util::SourceDir(),
                     "/tests/fixtures/format1_ledger.tar.gz");
    ASSERT_EQ(std::system(untar.c_str()), 0);
    options_ = LogOptions(scratch_.Sub("data"));
  }
  void ExpectTheFixturesLedger() {
    std::unique_ptr<RocksDbStore> store = OpenStoreOrDie(options_);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->ledger_id(), "aa6b861cea3bac4ef79b51cc1d4e05ca");
    EXPECT_EQ(store->FindAccount("alice").value()->balance, 580);
    EXPECT_EQ(store->FindAccount("bob").value()->balance, 800);
    EXPECT_EQ(store->FindAccount("carol").value()->balance, 7);
    EXPECT_EQ(store->ReadHistory("alice", 0, 10).value().entries.size(), 3u);
    EXPECT_EQ(store->ReadTransfer("fx-t1").value()->state, TransferState::kCommitted);
    EXPECT_EQ(store->ReadTransfer("fx-t2").value()->state, TransferState::kRefused);
    EXPECT_EQ(store->FindRequest("carol", "fx-4").value()->balance, 7);
    // And it takes writes, through the log.
    ASSERT_TRUE(store->Write(DepositBatch("dan", 1)).ok());
    EXPECT_EQ(store->log_position(), 1u);
  }

  ScratchDir scratch_;
  StoreOptions options_;
};

TEST_F(UpgradeTest, AnOldDirectoryIsRefusedNamingTheCommandThenUpgradedWithEverything) {
  absl::StatusOr<std::unique_ptr<RocksDbStore>> refused = RocksDbStore::Open(options_);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("has data format version 1"));
  EXPECT_THAT(refused.status().message(),
              HasSubstr(absl::StrCat("ledgerd upgrade --data_dir=", options_.data_dir)));

  absl::StatusOr<UpgradeReport> upgraded = RocksDbStore::Upgrade(options_);
  ASSERT_TRUE(upgraded.ok()) << upgraded.status();
  EXPECT_EQ(upgraded->from_version, 1u);
  ExpectTheFixturesLedger();
  // Again: nothing to do.
  absl::StatusOr<UpgradeReport> again = RocksDbStore::Upgrade(options_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->from_version, kFormatVersion);
}

// An upgrade cut short after it made the log but before it wrote the new format marker leaves a
// directory of the old version with a log beside it: the command runs again and finishes.
TEST_F(UpgradeTest, AnUpgradeCutShortBeforeItsMarkerIsFinishedByRunningItAgain) {
  ASSERT_TRUE(
      LocalLog::Create(options_.data_dir + "/" + std::string(kLogDirectory), 1, kSmallSegment)
          .ok());
  // Junk an interrupted upgrade cannot have written, but the rerun must not trust the log.
  std::filesystem::copy_file(
      options_.data_dir + "/" + std::string(kLogDirectory) + "/" + LogSegmentName(1),
      options_.data_dir + "/" + std::string(kLogDirectory) + "/" + LogSegmentName(7));
  EXPECT_FALSE(RocksDbStore::Open(options_).ok());
  absl::StatusOr<UpgradeReport> upgraded = RocksDbStore::Upgrade(options_);
  ASSERT_TRUE(upgraded.ok()) << upgraded.status();
  EXPECT_EQ(upgraded->from_version, 1u);
  ExpectTheFixturesLedger();
}

}  // namespace
}  // namespace ledger::storage
