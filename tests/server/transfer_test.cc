// Transfer and GetTransfer through gRPC, on a durable in-process ledgerd: the rules in the
// contract's order with their codes and words, same-shard and cross-shard, replays, History on
// both accounts, GetTransfer's states, and a restart that keeps it all.
#include <atomic>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ledger/v1/ledger.grpc.pb.h"
#include "tests/scratch_ledger.h"
#include "tests/server/test_server.h"
#include "tests/shard/shard_test_util.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;
using testing_util::Balance;
using testing_util::BalanceOf;
using testing_util::ContextWithDeadline;
using testing_util::Deposit;
using testing_util::DurableOptions;
using testing_util::History;
using testing_util::ScratchLedger;
using testing_util::TestServer;

constexpr int32_t kTransferShards = 4;

struct TransferResult {
  grpc::Status status;
  v1::TransferResponse response;
};

TransferResult Transfer(v1::Ledger::Stub& stub, const std::string& transfer_id,
                        const std::string& from, const std::string& to, int64_t amount) {
  v1::TransferRequest request;
  request.set_transfer_id(transfer_id);
  request.set_from_account_id(from);
  request.set_to_account_id(to);
  request.set_amount(amount);
  TransferResult result;
  result.status = stub.Transfer(ContextWithDeadline().get(), request, &result.response);
  return result;
}

struct GetTransferResult {
  grpc::Status status;
  v1::GetTransferResponse response;
};

GetTransferResult GetTransfer(v1::Ledger::Stub& stub, const std::string& transfer_id) {
  v1::GetTransferRequest request;
  request.set_transfer_id(transfer_id);
  GetTransferResult result;
  result.status = stub.GetTransfer(ContextWithDeadline().get(), request, &result.response);
  return result;
}

// An account id named after `prefix` that lives on shard `shard` of kTransferShards.
std::string ShardAccount(const std::string& prefix, int32_t shard) {
  return testing_util::AccountOnShard(prefix, shard, kTransferShards);
}

class TransferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<TestServer>(DurableOptions(dir_.path(), kTransferShards));
    stub_ = server_->NewStub();
    a0_ = ShardAccount("a", 0);
    b0_ = ShardAccount("b", 0);
    c1_ = ShardAccount("c", 1);
    for (const std::string& account : {a0_, b0_, c1_}) {
      ASSERT_TRUE(Deposit(*stub_, account, 1000, "open-" + account).status.ok());
    }
  }

  // The balances of the three accounts, in order.
  std::vector<int64_t> Balances() {
    return {BalanceOf(*stub_, a0_), BalanceOf(*stub_, b0_), BalanceOf(*stub_, c1_)};
  }

  ScratchLedger dir_;
  std::unique_ptr<TestServer> server_;
  std::unique_ptr<v1::Ledger::Stub> stub_;
  std::string a0_, b0_, c1_;
};

TEST_F(TransferTest, SameShardMovesMoneyInOneStepAndRecordsItCommitted) {
  TransferResult moved = Transfer(*stub_, "t-same", a0_, b0_, 300);
  ASSERT_TRUE(moved.status.ok()) << moved.status.error_message();
  EXPECT_EQ(moved.response.from_balance(), 700);
  EXPECT_EQ(moved.response.to_balance(), 1300);
  EXPECT_FALSE(moved.response.replayed());
  EXPECT_EQ(Balances(), (std::vector<int64_t>{700, 1300, 1000}));

  GetTransferResult got = GetTransfer(*stub_, "t-same");
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_EQ(got.response.state(), v1::TRANSFER_STATE_COMMITTED);
  EXPECT_EQ(got.response.from_account_id(), a0_);
  EXPECT_EQ(got.response.to_account_id(), b0_);
  EXPECT_EQ(got.response.amount(), 300);
  EXPECT_EQ(got.response.from_balance(), 700);
  EXPECT_EQ(got.response.to_balance(), 1300);
  EXPECT_TRUE(got.response.has_created_time());
  EXPECT_TRUE(got.response.has_finished_time());
}

TEST_F(TransferTest, CrossShardCommitsBothSidesAndHistoryShowsTheCounterparty) {
  TransferResult moved = Transfer(*stub_, "t-cross", a0_, c1_, 250);
  ASSERT_TRUE(moved.status.ok()) << moved.status.error_message();
  EXPECT_EQ(moved.response.from_balance(), 750);
  EXPECT_EQ(moved.response.to_balance(), 1250);
  EXPECT_EQ(Balances(), (std::vector<int64_t>{750, 1000, 1250}));

  GetTransferResult got = GetTransfer(*stub_, "t-cross");
  ASSERT_TRUE(got.status.ok());
  EXPECT_EQ(got.response.state(), v1::TRANSFER_STATE_COMMITTED);
  EXPECT_EQ(got.response.to_balance(), 1250);
  EXPECT_TRUE(got.response.has_credited_time());
  EXPECT_TRUE(got.response.has_finished_time());

  testing_util::HistoryResult from = History(*stub_, a0_);
  ASSERT_TRUE(from.status.ok());
  ASSERT_EQ(from.response.entries_size(), 2);
  EXPECT_EQ(from.response.entries(0).operation(), v1::OPERATION_TRANSFER_OUT);
  EXPECT_EQ(from.response.entries(0).amount(), 250);
  EXPECT_EQ(from.response.entries(0).balance_after(), 750);
  EXPECT_EQ(from.response.entries(0).counterparty_account_id(), c1_);
  EXPECT_EQ(from.response.entries(0).transfer_id(), "t-cross");
  EXPECT_EQ(from.response.entries(0).request_id(), "");
  testing_util::HistoryResult to = History(*stub_, c1_);
  ASSERT_TRUE(to.status.ok());
  ASSERT_EQ(to.response.entries_size(), 2);
  EXPECT_EQ(to.response.entries(0).operation(), v1::OPERATION_TRANSFER_IN);
  EXPECT_EQ(to.response.entries(0).counterparty_account_id(), a0_);
  EXPECT_EQ(to.response.entries(0).transfer_id(), "t-cross");
  EXPECT_EQ(to.response.entries(0).balance_after(), 1250);
}

TEST_F(TransferTest, ARetryReplaysTheRecordedOutcomeAndOtherFieldsAreRefused) {
  ASSERT_TRUE(Transfer(*stub_, "t-once", a0_, c1_, 100).status.ok());
  TransferResult again = Transfer(*stub_, "t-once", a0_, c1_, 100);
  ASSERT_TRUE(again.status.ok());
  EXPECT_TRUE(again.response.replayed());
  EXPECT_EQ(again.response.from_balance(), 900);
  EXPECT_EQ(again.response.to_balance(), 1100);

  TransferResult other = Transfer(*stub_, "t-once", a0_, c1_, 101);
  EXPECT_EQ(other.status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(other.status.error_message(), HasSubstr("a transfer of 100 from " + a0_));
  EXPECT_THAT(other.status.error_message(), HasSubstr("this call is a transfer of 101"));
  // A retry of a same-shard one, and a refused one, replay too.
  ASSERT_TRUE(Transfer(*stub_, "t-once-same", a0_, b0_, 100).status.ok());
  EXPECT_TRUE(Transfer(*stub_, "t-once-same", a0_, b0_, 100).response.replayed());
  EXPECT_EQ(Transfer(*stub_, "t-broke", a0_, c1_, 5000).status.error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_TRUE(Deposit(*stub_, a0_, 10000, "top-up").status.ok());
  TransferResult broke_again = Transfer(*stub_, "t-broke", a0_, c1_, 5000);
  EXPECT_EQ(broke_again.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(broke_again.status.error_message(), HasSubstr("recorded result"));
  EXPECT_EQ(Balances(), (std::vector<int64_t>{10800, 1100, 1100}));
}

struct RuleCase {
  std::string name;
  std::string transfer_id;
  std::string from;  // "A", "B", "C": the fixture's accounts; anything else as is.
  std::string to;
  int64_t amount;
  grpc::StatusCode code;
  std::string words;
};

TEST_F(TransferTest, EveryRuleRefusesWithItsCodeAndAppliesNothing) {
  const std::vector<RuleCase> cases = {
      {"no transfer_id", "", "A", "C", 1, grpc::StatusCode::INVALID_ARGUMENT,
       "transfer_id is required"},
      {"transfer_id not printable", "bad\x01id", "A", "C", 1, grpc::StatusCode::INVALID_ARGUMENT,
       "transfer_id must be"},
      {"bad from", "r1", "no spaces", "C", 1, grpc::StatusCode::INVALID_ARGUMENT,
       "from_account_id must be"},
      {"bad to", "r2", "A", "", 1, grpc::StatusCode::INVALID_ARGUMENT, "to_account_id must be"},
      {"zero amount", "r3", "A", "C", 0, grpc::StatusCode::INVALID_ARGUMENT,
       "amount must be greater than 0"},
      {"negative amount", "r4", "A", "C", -5, grpc::StatusCode::INVALID_ARGUMENT,
       "amount must be greater than 0"},
      {"same account", "r5", "A", "A", 1, grpc::StatusCode::INVALID_ARGUMENT,
       "two different accounts"},
      // The amount is checked before the accounts are compared.
      {"order of checks", "r6", "A", "A", 0, grpc::StatusCode::INVALID_ARGUMENT, "amount must be"},
      {"from never opened", "r7", "ghost", "C", 1, grpc::StatusCode::NOT_FOUND,
       "from_account_id ghost not found"},
      {"to never opened, same shard", "r8", "A", ShardAccount("ghost", 0), 1,
       grpc::StatusCode::NOT_FOUND, "to_account_id"},
      {"to never opened, across shards", "r9", "A", ShardAccount("ghost", 1), 1,
       grpc::StatusCode::NOT_FOUND, "to_account_id"},
      {"both never opened names from", "r10", "ghost", "ghost2", 1, grpc::StatusCode::NOT_FOUND,
       "from_account_id ghost"},
      {"insufficient, same shard", "r11", "A", "B", 1001, grpc::StatusCode::FAILED_PRECONDITION,
       "insufficient funds in"},
      {"insufficient, across shards", "r12", "A", "C", 1001, grpc::StatusCode::FAILED_PRECONDITION,
       "balance 1000, transfer 1001"},
  };
  for (const RuleCase& rule : cases) {
    SCOPED_TRACE(rule.name);
    auto account = [&](const std::string& name) {
      if (name == "A") return a0_;
      if (name == "B") return b0_;
      if (name == "C") return c1_;
      return name;
    };
    TransferResult refused =
        Transfer(*stub_, rule.transfer_id, account(rule.from), account(rule.to), rule.amount);
    EXPECT_EQ(refused.status.error_code(), rule.code) << refused.status.error_message();
    EXPECT_THAT(refused.status.error_message(), HasSubstr(rule.words));
    EXPECT_EQ(Balances(), (std::vector<int64_t>{1000, 1000, 1000}));
  }
  // The refusal across shards that the destination made is REFUSED with its code, and History
  // shows the debit and its refund.
  GetTransferResult refused = GetTransfer(*stub_, "r9");
  ASSERT_TRUE(refused.status.ok());
  EXPECT_EQ(refused.response.state(), v1::TRANSFER_STATE_REFUSED);
  EXPECT_EQ(refused.response.refusal_code(), static_cast<int32_t>(grpc::StatusCode::NOT_FOUND));
  EXPECT_THAT(refused.response.refusal_message(), HasSubstr("to_account_id"));
  testing_util::HistoryResult history = History(*stub_, a0_);
  ASSERT_TRUE(history.status.ok());
  ASSERT_EQ(history.response.entries_size(), 3);
  EXPECT_EQ(history.response.entries(0).operation(), v1::OPERATION_TRANSFER_REFUND);
  EXPECT_EQ(history.response.entries(0).transfer_id(), "r9");
  EXPECT_EQ(history.response.entries(0).balance_after(), 1000);
  EXPECT_EQ(history.response.entries(1).operation(), v1::OPERATION_TRANSFER_OUT);
  EXPECT_EQ(history.response.entries(1).balance_after(), 999);
  // A refusal at the source is recorded too, and never touched an account.
  GetTransferResult broke = GetTransfer(*stub_, "r12");
  ASSERT_TRUE(broke.status.ok());
  EXPECT_EQ(broke.response.state(), v1::TRANSFER_STATE_REFUSED);
  EXPECT_EQ(broke.response.refusal_code(),
            static_cast<int32_t>(grpc::StatusCode::FAILED_PRECONDITION));
  EXPECT_FALSE(broke.response.has_credited_time());
  // Invalid requests leave no record.
  EXPECT_EQ(GetTransfer(*stub_, "r5").status.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(TransferTest, OverflowOfTheDestinationIsOutOfRangeOnBothPaths) {
  const int64_t room = std::numeric_limits<int64_t>::max() - 1000;
  ASSERT_TRUE(Deposit(*stub_, b0_, room, "fill-b").status.ok());
  ASSERT_TRUE(Deposit(*stub_, c1_, room, "fill-c").status.ok());
  TransferResult same = Transfer(*stub_, "o-same", a0_, b0_, 1);
  EXPECT_EQ(same.status.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(same.status.error_message(), HasSubstr("overflow the balance of " + b0_));
  TransferResult cross = Transfer(*stub_, "o-cross", a0_, c1_, 1);
  EXPECT_EQ(cross.status.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_EQ(BalanceOf(*stub_, a0_), 1000);
  EXPECT_EQ(BalanceOf(*stub_, c1_), std::numeric_limits<int64_t>::max());
}

TEST_F(TransferTest, GetTransferSaysWhatItKnows) {
  EXPECT_EQ(GetTransfer(*stub_, "never").status.error_code(), grpc::StatusCode::NOT_FOUND);
  GetTransferResult bad = GetTransfer(*stub_, "");
  EXPECT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.status.error_message(), HasSubstr("transfer_id is required"));
}

TEST_F(TransferTest, ARestartKeepsBalancesRecordsAndReplays) {
  ASSERT_TRUE(Transfer(*stub_, "k-cross", a0_, c1_, 40).status.ok());
  ASSERT_TRUE(Transfer(*stub_, "k-same", b0_, a0_, 15).status.ok());
  stub_.reset();
  server_.reset();  // Closes the store, so that the next server can open it.
  server_ = std::make_unique<TestServer>(DurableOptions(dir_.path(), kTransferShards));
  stub_ = server_->NewStub();
  EXPECT_EQ(Balances(), (std::vector<int64_t>{975, 985, 1040}));
  TransferResult replay = Transfer(*stub_, "k-cross", a0_, c1_, 40);
  ASSERT_TRUE(replay.status.ok());
  EXPECT_TRUE(replay.response.replayed());
  EXPECT_EQ(replay.response.to_balance(), 1040);
  EXPECT_EQ(GetTransfer(*stub_, "k-same").response.state(), v1::TRANSFER_STATE_COMMITTED);
  EXPECT_EQ(Balances(), (std::vector<int64_t>{975, 985, 1040}));
}

// A shutdown under a load of transfers across shards: transfers in flight finish before the
// mailboxes close, so no caller is told "still pending" and nothing is left pending for the next
// start; afterwards every balance and the sum agree with what was answered.
TEST(TransferShutdownTest, TransfersInFlightFinishBeforeTheShardsStop) {
  ScratchLedger dir;
  auto server = std::make_unique<TestServer>(DurableOptions(dir.path(), kTransferShards));
  constexpr int kAccounts = 40;
  constexpr int kThreads = 4;
  std::vector<std::string> accounts;
  {
    std::unique_ptr<v1::Ledger::Stub> stub = server->NewStub();
    for (int i = 0; i < kAccounts; ++i) {
      accounts.push_back(absl::StrCat("s-", i));
      ASSERT_TRUE(Deposit(*stub, accounts.back(), 1000, "fund-" + accounts.back()).status.ok());
    }
  }
  std::atomic<int> pending_answers{0};
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::unique_ptr<v1::Ledger::Stub> stub = server->NewStub();
      for (int i = 0; i < 100000; ++i) {
        const std::string& from = accounts[(t * 7 + i) % kAccounts];
        const std::string& to = accounts[(t * 7 + i * 3 + 1) % kAccounts];
        if (from == to) continue;
        TransferResult result = Transfer(*stub, absl::StrCat("sd-", t, "-", i), from, to, 1);
        if (result.status.ok()) ++ok;
        if (result.status.error_message().find("still pending") != std::string::npos) {
          ++pending_answers;
        }
        // Refused from here on: the server is going away.
        if (result.status.error_code() == grpc::StatusCode::UNAVAILABLE ||
            result.status.error_code() == grpc::StatusCode::CANCELLED) {
          return;
        }
      }
    });
  }
  ASSERT_TRUE(testing_util::WaitUntil([&] { return ok.load() >= 50; }, "50 transfers done"));
  server->server().Shutdown();
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(pending_answers.load(), 0);
  server.reset();

  {
    // Nothing was left pending for the next start: the store's pending index is empty.
    storage::StoreOptions options;
    options.data_dir = dir.path();
    absl::StatusOr<std::unique_ptr<storage::RocksDbStore>> store =
        storage::RocksDbStore::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    int pending = 0;
    ASSERT_TRUE((*store)
                    ->ForEachPendingTransfer([&](std::string, const TransferRecord&) { ++pending; })
                    .ok());
    EXPECT_EQ(pending, 0);
  }
  server = std::make_unique<TestServer>(DurableOptions(dir.path(), kTransferShards));
  std::unique_ptr<v1::Ledger::Stub> stub = server->NewStub();
  int64_t total = 0;
  for (const std::string& account : accounts) total += BalanceOf(*stub, account);
  EXPECT_EQ(total, 1000 * kAccounts);
}

TEST(TransferMemoryOnlyTest, TransfersWorkWithoutAStoreButGetTransferIsRefused) {
  ServerOptions options = testing_util::LoopbackOptions();
  options.router.num_shards = kTransferShards;
  TestServer server(options);
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  const std::string a = ShardAccount("m", 0);
  const std::string c = ShardAccount("n", 1);
  ASSERT_TRUE(Deposit(*stub, a, 100).status.ok());
  ASSERT_TRUE(Deposit(*stub, c, 100).status.ok());
  TransferResult moved = Transfer(*stub, "m1", a, c, 30);
  ASSERT_TRUE(moved.status.ok()) << moved.status.error_message();
  EXPECT_EQ(moved.response.from_balance(), 70);
  EXPECT_EQ(moved.response.to_balance(), 130);
  EXPECT_EQ(Transfer(*stub, "m2", a, ShardAccount("ghost", 2), 30).status.error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(BalanceOf(*stub, a), 70);
  GetTransferResult got = GetTransfer(*stub, "m1");
  EXPECT_EQ(got.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(got.status.error_message(), HasSubstr("--durability=none"));
}

}  // namespace
}  // namespace ledger
