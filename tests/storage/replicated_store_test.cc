// RocksDbStore as a replica of a three-node cluster (StoreOptions::cluster, storage/raft_log.h):
// three stores in this process, each on its own data directory, replicating through libraft on
// loopback ports. What the leader writes reaches every replica's derived state; a follower
// refuses to write; a new leader catches up and loads exactly what was committed; a data
// directory is a single node's or a replica's, never both.
#include <array>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/annotated_mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/rocksdb_store.h"
#include "tests/scratch_dir.h"
#include "tests/scratch_ledger.h"
#include "tests/storage/loaded_accounts.h"
#include "tests/unused_port.h"
#include "tests/wait_until.h"

namespace ledger::storage {
namespace {

using ::testing::HasSubstr;
using testing_util::InitLedger;
using testing_util::LoadedAccounts;
using testing_util::ScratchDir;
using testing_util::UnusedPort;
using testing_util::WaitUntil;

JournalEntry Deposit(const std::string& account, uint64_t sequence, int64_t amount,
                     int64_t balance_after) {
  return JournalEntry{
      .account_id = account,
      .sequence = sequence,
      .kind = EntryKind::kDeposit,
      .amount = amount,
      .balance_after = balance_after,
      .request_id = absl::StrCat(account, "-", sequence),
      .time = absl::FromUnixSeconds(1'800'000'000 + static_cast<int64_t>(sequence))};
}

// A deposit as a shard's batch would write it: the account's new state, its journal entry and
// the call's idempotency record.
BatchWrite DepositBatch(const std::string& account, uint64_t sequence, int64_t amount,
                        int64_t balance_after) {
  BatchWrite batch;
  batch.accounts = {{account, {.balance = balance_after, .sequence = sequence}}};
  batch.journal = {Deposit(account, sequence, amount, balance_after)};
  batch.requests = {{account, absl::StrCat(account, "-", sequence),
                     RequestRecord{.op = Op::kDeposit,
                                   .amount = amount,
                                   .outcome = Outcome::kOk,
                                   .balance = balance_after,
                                   .recorded_at = absl::FromUnixSeconds(1'800'000'000)}}};
  return batch;
}

class ReplicatedStoreTest : public ::testing::Test {
 protected:
  ReplicatedStoreTest() {
    for (int i = 0; i < 3; ++i) {
      peers_.push_back(
          RaftPeer{static_cast<uint64_t>(i) + 1, absl::StrCat("127.0.0.1:", UnusedPort())});
      InitLedger(DataDir(i));
    }
  }
  ~ReplicatedStoreTest() override {
    for (auto& store : stores_) store.reset();
  }

  std::string DataDir(int i) const { return dir_.Sub(absl::StrCat("node", i + 1)); }

  StoreOptions OptionsFor(int i) const {
    StoreOptions options;
    options.data_dir = DataDir(i);
    options.log_segment_bytes = int64_t{1} << 20;
    ClusterOptions cluster;
    cluster.node_id = static_cast<uint64_t>(i) + 1;
    cluster.peers = peers_;
    // Quick elections for the test; the defaults are 300 and 50 ms.
    cluster.election_timeout = absl::Milliseconds(150);
    cluster.heartbeat_interval = absl::Milliseconds(30);
    // Two group writes in flight (ledgerd --raft_writes_in_flight=2), which WriteGroup ignores.
    cluster.writes_in_flight = 2;
    options.cluster = cluster;
    return options;
  }

  void Open(int i) {
    absl::StatusOr<std::unique_ptr<RocksDbStore>> store = RocksDbStore::Open(OptionsFor(i));
    ASSERT_TRUE(store.ok()) << store.status();
    stores_[i] = *std::move(store);
  }

  // The index of the one open store whose replica leads.
  int WaitForLeader() {
    int leader = -1;
    EXPECT_TRUE(WaitUntil(
        [&] {
          int leaders = 0;
          for (int i = 0; i < 3; ++i) {
            if (stores_[i] != nullptr && stores_[i]->replica_status()->leader) {
              leader = i;
              ++leaders;
            }
          }
          return leaders == 1;
        },
        "one replica leads"));
    return leader;
  }

  // Writes `batch` through the leader, retrying while one is being elected.
  void WriteOnLeader(const BatchWrite& batch) {
    EXPECT_TRUE(WaitUntil(
        [&] {
          const int leader = WaitForLeader();
          return leader >= 0 && stores_[leader]->Write(batch).ok();
        },
        "the leader writes"));
  }

  ScratchDir dir_;
  std::vector<RaftPeer> peers_;
  std::array<std::unique_ptr<RocksDbStore>, 3> stores_;
};

TEST_F(ReplicatedStoreTest, EveryReplicaAppliesWhatTheLeaderWrites) {
  for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(Open(i));
  WriteOnLeader(DepositBatch("alice", 1, 100, 100));
  WriteOnLeader(DepositBatch("alice", 2, 25, 125));
  WriteOnLeader(DepositBatch("bob", 1, 7, 7));
  const int leader = WaitForLeader();
  const uint64_t position = stores_[leader]->log_position();
  for (int i = 0; i < 3; ++i) {
    RocksDbStore& store = *stores_[i];
    ASSERT_TRUE(WaitUntil([&] { return store.applied_position() >= position; },
                          absl::StrCat("replica ", i + 1, " applies the leader's writes")));
    EXPECT_EQ(store.FindAccount("alice").value(), (AccountState{.balance = 125, .sequence = 2}))
        << "replica " << i + 1;
    EXPECT_EQ(store.FindAccount("bob").value(), (AccountState{.balance = 7, .sequence = 1}));
    // The idempotency records, which the applier does not write, are every replica's too.
    std::optional<RequestRecord> record = store.FindRequest("alice", "alice-2").value();
    ASSERT_TRUE(record.has_value()) << "replica " << i + 1;
    EXPECT_EQ(record->balance, 125);
    absl::StatusOr<HistoryPage> history = store.ReadHistory("alice", 0, 10);
    ASSERT_TRUE(history.ok()) << history.status();
    ASSERT_EQ(history->entries.size(), 2u);
    EXPECT_EQ(history->entries[0], Deposit("alice", 2, 25, 125));
  }
  // A follower writes nothing and says who leads.
  const int follower = (leader + 1) % 3;
  absl::Status refused = stores_[follower]->Write(DepositBatch("carol", 1, 1, 1));
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr(absl::StrCat("the leader is node ", leader + 1)));
  EXPECT_EQ(stores_[follower]->CatchUpAsLeader().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(stores_[leader]->FindAccount("carol").value(), std::nullopt);
}

// The leader's store keeps group writes in flight (ClusterOptions::writes_in_flight): each is
// a proposal, the outcomes come in the order the writes started, and every replica applies them
// all. A follower refuses at once, as WriteGroup does.
TEST_F(ReplicatedStoreTest, GroupWritesInFlightEndInOrderOnEveryReplica) {
  for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(Open(i));
  WriteOnLeader(DepositBatch("alice", 1, 100, 100));
  const int leader = WaitForLeader();
  EXPECT_EQ(stores_[leader]->GroupWritesInFlight(), 2);
  Mutex mu;
  std::vector<std::pair<int, absl::Status>> ended;
  constexpr int kWrites = 6;
  for (int n = 0; n < kWrites; ++n) {
    const BatchWrite batch = DepositBatch("alice", 2 + n, 1, 101 + n);
    const BatchWrite* const group[] = {&batch};
    stores_[leader]->StartGroupWrite(group, /*behind_writes_in_flight=*/n > 0,
                                     [&mu, &ended, n](absl::Status outcome) {
                                       MutexLock lock(&mu);
                                       ended.emplace_back(n, std::move(outcome));
                                     });
  }
  ASSERT_TRUE(WaitUntil(
      [&] {
        MutexLock lock(&mu);
        return ended.size() == kWrites;
      },
      "every write in flight ends"));
  {
    MutexLock lock(&mu);
    for (int n = 0; n < kWrites; ++n) {
      EXPECT_EQ(ended[n].first, n);
      EXPECT_TRUE(ended[n].second.ok()) << ended[n].second;
    }
  }
  const uint64_t position = stores_[leader]->log_position();
  for (int i = 0; i < 3; ++i) {
    RocksDbStore& store = *stores_[i];
    ASSERT_TRUE(WaitUntil([&] { return store.applied_position() >= position; },
                          absl::StrCat("replica ", i + 1, " applies the writes")));
    EXPECT_EQ(store.FindAccount("alice").value(),
              (AccountState{.balance = 100 + kWrites, .sequence = 1 + kWrites}))
        << "replica " << i + 1;
  }
  const int follower = (leader + 1) % 3;
  const BatchWrite batch = DepositBatch("carol", 1, 1, 1);
  const BatchWrite* const group[] = {&batch};
  absl::Status refused = absl::UnknownError("not ended");
  stores_[follower]->StartGroupWrite(group, /*behind_writes_in_flight=*/false,
                                     [&mu, &refused](absl::Status outcome) {
                                       MutexLock lock(&mu);
                                       refused = std::move(outcome);
                                     });
  ASSERT_TRUE(WaitUntil(
      [&] {
        MutexLock lock(&mu);
        return refused.code() != absl::StatusCode::kUnknown;
      },
      "the follower's write ends"));
  MutexLock lock(&mu);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ReplicatedStoreTest, ANewLeaderCatchesUpAndLoadsEveryCommittedAccount) {
  for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(Open(i));
  for (uint64_t s = 1; s <= 30; ++s) {
    WriteOnLeader(DepositBatch(absl::StrCat("acct-", s % 7), s / 7 + 1, 10,
                               static_cast<int64_t>(10 * (s / 7 + 1))));
  }
  const int old_leader = WaitForLeader();
  const std::map<std::string, AccountState> expected = LoadedAccounts(*stores_[old_leader]);
  ASSERT_EQ(expected.size(), 7u);
  stores_[old_leader].reset();  // Its replica stops: the others elect one of them.

  const int leader = WaitForLeader();
  ASSERT_NE(leader, old_leader);
  ASSERT_TRUE(stores_[leader]->CatchUpAsLeader().ok());
  EXPECT_EQ(LoadedAccounts(*stores_[leader]), expected);
  WriteOnLeader(DepositBatch("acct-0", 99, 5, 5));

  // The old leader comes back as a follower and catches up with what it missed.
  ASSERT_NO_FATAL_FAILURE(Open(old_leader));
  const uint64_t position = stores_[leader]->log_position();
  ASSERT_TRUE(WaitUntil([&] { return stores_[old_leader]->applied_position() >= position; },
                        "the old leader catches up"));
  EXPECT_EQ(stores_[old_leader]->FindAccount("acct-0").value(),
            (AccountState{.balance = 5, .sequence = 99}));
  EXPECT_FALSE(stores_[old_leader]->replica_status()->leader);
}

TEST_F(ReplicatedStoreTest, ADataDirectoryIsASingleNodesOrAReplicasNeverBoth) {
  ASSERT_NO_FATAL_FAILURE(Open(0));
  stores_[0].reset();
  // A replica's directory, opened as a single node.
  StoreOptions single;
  single.data_dir = DataDir(0);
  absl::StatusOr<std::unique_ptr<RocksDbStore>> refused = RocksDbStore::Open(single);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("it is a cluster replica's"));

  // A single node's ledger with entries, opened as a replica.
  single.data_dir = DataDir(1);
  {
    absl::StatusOr<std::unique_ptr<RocksDbStore>> store = RocksDbStore::Open(single);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Write(DepositBatch("alice", 1, 5, 5)).ok());
  }
  refused = RocksDbStore::Open(OptionsFor(1));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("it holds a single node's ledger"));
  EXPECT_FALSE(std::filesystem::exists(DataDir(1) + "/raft"));
}

TEST(ReplicaLedgerIdTest, InitTakesTheIdItIsGivenAndRefusesOneThatIsNotAnId) {
  ScratchDir dir;
  StoreOptions options;
  options.data_dir = dir.Sub("given");
  options.log_segment_bytes = int64_t{1} << 20;
  options.ledger_id = "0123456789abcdef0123456789abcdef";
  absl::StatusOr<std::string> made = RocksDbStore::Init(options);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(*made, options.ledger_id);
  options.ledger_id.clear();
  absl::StatusOr<std::unique_ptr<RocksDbStore>> store = RocksDbStore::Open(options);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->ledger_id(), "0123456789abcdef0123456789abcdef");

  for (const char* bad : {"0123456789ABCDEF0123456789ABCDEF", "0123", "not an id at all"}) {
    options.data_dir = dir.Sub("refused");
    options.ledger_id = bad;
    absl::StatusOr<std::string> refused = RocksDbStore::Init(options);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(refused.status().message(), HasSubstr("32 lowercase hexadecimal digits"));
    EXPECT_FALSE(std::filesystem::exists(options.data_dir)) << "nothing is made for " << bad;
  }
}

}  // namespace
}  // namespace ledger::storage
