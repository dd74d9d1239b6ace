// A recovered account must equal the newest journal entry for it: each case writes a ledger whose
// accounts and journal agree or disagree in one way (RocksDbStore::Write stores whatever batch it
// is given, as a corrupted directory would hold it), reopens it, and loads it.
#include "storage/account_journal_check.h"

#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/journal_check_pool.h"
#include "storage/rocksdb_store.h"
#include "tests/scratch_ledger.h"

namespace ledger::storage {
namespace {

using ::testing::HasSubstr;
using testing_util::ScratchLedger;

JournalEntry JournalDeposit(const std::string& account, uint64_t sequence, int64_t balance_after) {
  return JournalEntry{.account_id = account,
                      .sequence = sequence,
                      .kind = EntryKind::kDeposit,
                      .amount = 10,
                      .balance_after = balance_after,
                      .request_id = "",
                      .time = absl::FromUnixSeconds(1'800'000'000)};
}

// A history long enough that the check skips most of it by a Seek.
constexpr uint64_t kLongHistory = static_cast<uint64_t>(AccountJournalCheck::kStepsBeforeSeek) * 3;

// An account of `entries` deposits of 10 each, stored as the shard stores it.
void AddAccount(BatchWrite& batch, const std::string& account, uint64_t entries) {
  for (uint64_t s = 1; s <= entries; ++s) {
    batch.journal.push_back(JournalDeposit(account, s, 10 * static_cast<int64_t>(s)));
  }
  batch.accounts.push_back(
      {account, {.balance = 10 * static_cast<int64_t>(entries), .sequence = entries}});
}

// Ids that are prefixes of one another, and one history long enough to be skipped by a Seek.
BatchWrite AgreeingLedger() {
  BatchWrite batch;
  AddAccount(batch, "a", 1);
  AddAccount(batch, "a1", 3);
  AddAccount(batch, "ab", kLongHistory);
  AddAccount(batch, "b", 2);
  return batch;
}

struct Loaded {
  absl::Status status;
  std::vector<std::string> accounts;  // Those `load` was called for, in order.
};

Loaded WriteReopenAndLoad(const BatchWrite& batch) {
  ScratchLedger scratch;
  StoreOptions options;
  options.data_dir = scratch.path();
  {
    absl::StatusOr<std::unique_ptr<RocksDbStore>> store = RocksDbStore::Open(options);
    EXPECT_TRUE(store.ok()) << store.status();
    if (!store.ok()) return {store.status(), {}};
    EXPECT_TRUE((*store)->Write(batch).ok());
  }
  absl::StatusOr<std::unique_ptr<RocksDbStore>> store = RocksDbStore::Open(options);
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return {store.status(), {}};
  Loaded loaded;
  loaded.status = (*store)->ForEachAccount(
      [&](std::string id, const AccountState&) { loaded.accounts.push_back(std::move(id)); });
  return loaded;
}

TEST(AccountJournalCheckTest, ALedgerWhoseAccountsEqualTheirNewestEntriesLoadsWhole) {
  const Loaded loaded = WriteReopenAndLoad(AgreeingLedger());
  EXPECT_TRUE(loaded.status.ok()) << loaded.status;
  EXPECT_EQ(loaded.accounts, (std::vector<std::string>{"a", "a1", "ab", "b"}));
}

struct Corruption {
  std::string name;
  // Applied to AgreeingLedger(); the change is written together with it.
  std::function<void(BatchWrite&)> corrupt;
  std::string message;              // What the refusal must say.
  std::vector<std::string> loaded;  // The accounts loaded before the corrupt one.
};

// Names the case in test output instead of dumping its bytes.
void PrintTo(const Corruption& corruption, std::ostream* out) { *out << corruption.name; }

std::vector<Corruption> Corruptions() {
  const auto set_account = [](const std::string& id, AccountState state) {
    return [id, state](BatchWrite& batch) { batch.accounts.push_back({id, state}); };
  };
  return {
      {"BalanceDiffers",
       set_account("a1", {.balance = 31, .sequence = 3}),
       "account \"a1\" (sequence 3, balance 31) disagrees with its journal entry 3, whose "
       "balance_after is 30",
       {"a"}},
      {"BalanceDiffersAfterASeek",
       set_account("ab", {.balance = 1, .sequence = kLongHistory}),
       absl::StrCat("account \"ab\" (sequence ", kLongHistory, ", balance 1) disagrees"),
       {"a", "a1"}},
      {"AccountBehindItsJournal",
       set_account("b", {.balance = 10, .sequence = 1}),
       "account \"b\" (sequence 1, balance 10) is older than its journal, which holds entry 2",
       {"a", "a1", "ab"}},
      {"AccountAheadOfItsJournal",
       set_account("a", {.balance = 20, .sequence = 2}),
       "account \"a\" (sequence 2, balance 20) has no journal entry 2",
       {}},
      {"AccountWithoutJournal",
       set_account("a0", {.balance = 5, .sequence = 1}),
       "account \"a0\" (sequence 1, balance 5) has no journal entry 1",
       {"a"}},
      {"AccountWithSequenceZero",
       set_account("a0", {.balance = 0, .sequence = 0}),
       "account \"a0\" (sequence 0, balance 0) has no operation",
       {"a"}},
      {"JournalOfAMissingAccountBetweenOthers",
       [](BatchWrite& batch) { batch.journal.push_back(JournalDeposit("aa", 1, 10)); },
       "the journal holds entries of account \"aa\", which has no account record",
       {"a", "a1"}},
      {"JournalOfAMissingAccountAfterTheLast",
       [](BatchWrite& batch) { batch.journal.push_back(JournalDeposit("c", 1, 10)); },
       "the journal holds entries of account \"c\", which has no account record",
       {"a", "a1", "ab", "b"}},
  };
}

class AccountJournalCorruptionTest : public ::testing::TestWithParam<Corruption> {};

TEST_P(AccountJournalCorruptionTest, IsRefusedNamingTheAccountAndNothingAfterItLoads) {
  BatchWrite batch = AgreeingLedger();
  GetParam().corrupt(batch);
  const Loaded loaded = WriteReopenAndLoad(batch);
  EXPECT_EQ(loaded.status.code(), absl::StatusCode::kDataLoss) << loaded.status;
  EXPECT_THAT(loaded.status.message(), HasSubstr(GetParam().message));
  EXPECT_THAT(loaded.status.message(), HasSubstr("a corrupt ledger is never served"));
  EXPECT_EQ(loaded.accounts, GetParam().loaded);
}

INSTANTIATE_TEST_SUITE_P(Table, AccountJournalCorruptionTest, ::testing::ValuesIn(Corruptions()),
                         [](const auto& info) { return info.param.name; });

// Start-up checks the accounts in chunks of kChunkAccounts on worker threads (JournalCheckPool):
// chunk boundaries must not hide a disagreement, and accounts load in key order, none after the
// first that disagrees.
std::string NumberedAccount(int n) { return absl::StrFormat("acct-%05d", n); }

BatchWrite ManyAgreeingAccounts(int count) {
  BatchWrite batch;
  for (int n = 0; n < count; ++n) AddAccount(batch, NumberedAccount(n), 1 + n % 3);
  return batch;
}

TEST(AccountJournalCheckTest, ManyChunksLoadWholeInKeyOrder) {
  constexpr int kAccounts = 2 * static_cast<int>(kChunkAccounts) + 1000;
  const Loaded loaded = WriteReopenAndLoad(ManyAgreeingAccounts(kAccounts));
  ASSERT_TRUE(loaded.status.ok()) << loaded.status;
  ASSERT_EQ(loaded.accounts.size(), static_cast<size_t>(kAccounts));
  for (int n = 0; n < kAccounts; ++n) ASSERT_EQ(loaded.accounts[n], NumberedAccount(n));
}

TEST(AccountJournalCheckTest, JournalOfAMissingAccountAtAChunkBoundaryIsRefused) {
  constexpr int kAccounts = 2 * static_cast<int>(kChunkAccounts);
  BatchWrite batch = ManyAgreeingAccounts(kAccounts);
  // Sorts right after the first chunk's last account, before the second chunk's first.
  const std::string orphan = NumberedAccount(static_cast<int>(kChunkAccounts) - 1) + "x";
  batch.journal.push_back(JournalDeposit(orphan, 1, 10));
  const Loaded loaded = WriteReopenAndLoad(batch);
  EXPECT_EQ(loaded.status.code(), absl::StatusCode::kDataLoss) << loaded.status;
  EXPECT_THAT(loaded.status.message(),
              HasSubstr(absl::StrCat("entries of account \"", orphan, "\", which has no")));
  EXPECT_EQ(loaded.accounts.size(), kChunkAccounts);
}

TEST(AccountJournalCheckTest, ADisagreementInALaterChunkLoadsOnlyTheAccountsBeforeIt) {
  constexpr int kAccounts = 3 * static_cast<int>(kChunkAccounts);
  constexpr int kBad = 2 * static_cast<int>(kChunkAccounts) + 17;
  BatchWrite batch = ManyAgreeingAccounts(kAccounts);
  batch.accounts.push_back({NumberedAccount(kBad), {.balance = 7, .sequence = 1 + kBad % 3}});
  const Loaded loaded = WriteReopenAndLoad(batch);
  EXPECT_EQ(loaded.status.code(), absl::StatusCode::kDataLoss) << loaded.status;
  EXPECT_THAT(loaded.status.message(),
              HasSubstr(absl::StrCat("account \"", NumberedAccount(kBad), "\"")));
  ASSERT_EQ(loaded.accounts.size(), static_cast<size_t>(kBad));
  EXPECT_EQ(loaded.accounts.back(), NumberedAccount(kBad - 1));
}

TEST(AccountJournalCheckTest, FindAccountRefusesAnAccountThatDisagreesWithItsJournal) {
  ScratchLedger scratch;
  StoreOptions options;
  options.data_dir = scratch.path();
  absl::StatusOr<std::unique_ptr<RocksDbStore>> store = RocksDbStore::Open(options);
  ASSERT_TRUE(store.ok()) << store.status();
  BatchWrite batch = AgreeingLedger();
  batch.accounts.push_back({"b", {.balance = 99, .sequence = 2}});
  ASSERT_TRUE((*store)->Write(batch).ok());
  // Into the tables: an account read from them is checked (one held in memory since the last
  // checkpoint came from the log with its journal entry, and is not read from disk). A read
  // waits for the applier to reach the write first.
  ASSERT_TRUE((*store)->ReadHistory("b", 0, 1).ok());
  ASSERT_TRUE((*store)->Checkpoint().ok());

  EXPECT_EQ(
      (*store)->FindAccount("ab").value(),
      (AccountState{.balance = 10 * static_cast<int64_t>(kLongHistory), .sequence = kLongHistory}));
  const absl::StatusOr<std::optional<AccountState>> corrupt = (*store)->FindAccount("b");
  EXPECT_EQ(corrupt.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(
      corrupt.status().message(),
      HasSubstr("account \"b\" (sequence 2, balance 99) disagrees with its journal entry 2"));
}

}  // namespace
}  // namespace ledger::storage
