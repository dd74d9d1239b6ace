// Watch over real gRPC against an in-process durable ledgerd: order and completeness under mixed
// load (unary calls, Apply, transfers within and across shards), resume from any position, the
// account filter, the bounds, a watcher behind what the log keeps (at the start and mid-stream),
// retention, and the stop.
#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"
#include "proto/error_details.h"
#include "server/history_entry.h"
#include "storage/log_journal_entries.h"
#include "storage/rocksdb_store.h"
#include "tests/metrics_text.h"
#include "tests/scratch_dir.h"
#include "tests/scratch_ledger.h"
#include "tests/server/apply_operations.h"
#include "tests/server/test_server.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;
using testing_util::Balance;
using testing_util::ContextWithDeadline;
using testing_util::Deposit;
using testing_util::DurableOptions;
using testing_util::ScratchLedger;
using testing_util::TestServer;
using testing_util::WaitUntil;
using testing_util::Withdraw;

// What a Watch stream sent until the test stopped reading it (or it ended).
struct Watched {
  std::vector<v1::WatchResponse> messages;
  grpc::Status status;  // CANCELLED when the test stopped it.
  std::vector<v1::WatchEvent> Events() const {
    std::vector<v1::WatchEvent> events;
    for (const v1::WatchResponse& message : messages) {
      events.insert(events.end(), message.events().begin(), message.events().end());
    }
    return events;
  }
};

v1::WatchRequest WatchFrom(uint64_t from, std::vector<std::string> accounts = {}) {
  v1::WatchRequest request;
  request.set_from_position(from);
  for (std::string& account : accounts) request.add_account_ids(std::move(account));
  return request;
}

// Reads the stream until a message reaches position `until` (then cancels it), or it ends.
Watched WatchUntil(v1::Ledger::Stub& stub, const v1::WatchRequest& request, uint64_t until) {
  Watched watched;
  auto context = ContextWithDeadline(std::chrono::seconds(60));
  std::unique_ptr<grpc::ClientReader<v1::WatchResponse>> reader =
      stub.Watch(context.get(), request);
  v1::WatchResponse message;
  while (reader->Read(&message)) {
    watched.messages.push_back(message);
    if (message.position() >= until) {
      context->TryCancel();
      while (reader->Read(&message)) {
      }
      break;
    }
  }
  watched.status = reader->Finish();
  return watched;
}

// The log's own account of what was committed after `from`: every journal entry of every entry,
// as an event, read from the store directly.
std::vector<v1::WatchEvent> EventsInTheLog(storage::LedgerStorage& store, uint64_t from) {
  std::vector<v1::WatchEvent> events;
  absl::StatusOr<std::unique_ptr<storage::LogReader>> reader = store.NewLogReader(from + 1);
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return events;
  const uint64_t last = store.log_progress().position;
  while ((*reader)->next_position() <= last) {
    absl::StatusOr<int> read =
        (*reader)->Read(last, 1 << 20, [&](uint64_t position, absl::string_view payload) {
          absl::Status decoded = storage::ForEachJournalEntry(payload, [&](JournalEntry entry) {
            v1::WatchEvent& event = events.emplace_back();
            event.set_position(position);
            event.set_account_id(entry.account_id);
            ToHistoryEntry(entry, *event.mutable_entry());
          });
          EXPECT_TRUE(decoded.ok()) << decoded;
        });
    EXPECT_TRUE(read.ok()) << read.status();
    if (!read.ok()) break;
  }
  return events;
}

std::string Key(const v1::WatchEvent& event) {
  return absl::StrCat(event.position(), " ", event.account_id(), "#", event.entry().sequence());
}
std::vector<std::string> Keys(const std::vector<v1::WatchEvent>& events) {
  std::vector<std::string> keys;
  for (const v1::WatchEvent& event : events) keys.push_back(Key(event));
  return keys;
}

// Unary calls, Apply calls and transfers from three threads, over `accounts` accounts.
void MixedLoad(const TestServer& server, int accounts, int rounds) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&server, accounts, rounds, t] {
      std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
      for (int round = 0; round < rounds; ++round) {
        const std::string a = absl::StrCat("acct-", (round * 3 + t) % accounts);
        const std::string b = absl::StrCat("acct-", (round * 7 + t + 1) % accounts);
        EXPECT_TRUE(Deposit(*stub, a, 1000 + round).status.ok());
        Withdraw(*stub, a, 7);  // May be refused: that is not an operation of the stream.
        v1::TransferRequest transfer;
        transfer.set_transfer_id(absl::StrCat("t-", t, "-", round));
        transfer.set_from_account_id(a);
        transfer.set_to_account_id(b);
        transfer.set_amount(3);
        v1::TransferResponse transferred;
        if (a != b) stub->Transfer(ContextWithDeadline().get(), transfer, &transferred);
        v1::ApplyRequest apply;
        for (int k = 0; k < 5; ++k) {
          *apply.add_operations() =
              testing_util::DepositOp(absl::StrCat("acct-", (round + k) % accounts), 10 + k,
                                      absl::StrCat("apply-", t, "-", round, "-", k));
        }
        *apply.add_operations() =
            testing_util::TransferOp(absl::StrCat("at-", t, "-", round), b, a, 2);
        v1::ApplyResponse applied;
        EXPECT_TRUE(stub->Apply(ContextWithDeadline().get(), apply, &applied).ok());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
}

class WatchTest : public testing::Test {
 protected:
  ServerOptions Options(int32_t shards = 4) {
    ServerOptions options = DurableOptions(ledger_.path(), shards);
    return options;
  }
  ScratchLedger ledger_;
};

TEST_F(WatchTest, TheStreamIsTheLogInOrderWithNoGapAndRebuildsEveryBalance) {
  TestServer server(Options());
  // Two watchers during the load (served from the feed's tail as it grows, one unfiltered,
  // one filtered), and one after it (reading the log itself).
  std::atomic<uint64_t> until{UINT64_MAX};
  const auto watch_during = [&](std::vector<std::string> accounts) {
    std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
    auto context = ContextWithDeadline(std::chrono::seconds(120));
    std::unique_ptr<grpc::ClientReader<v1::WatchResponse>> reader =
        stub->Watch(context.get(), WatchFrom(0, std::move(accounts)));
    Watched watched;
    v1::WatchResponse message;
    while (reader->Read(&message)) {
      watched.messages.push_back(message);
      if (message.position() >= until.load()) break;
    }
    context->TryCancel();
    while (reader->Read(&message)) {
    }
    watched.status = reader->Finish();
    return watched;
  };
  Watched during;
  Watched filtered;
  std::thread first([&] { during = watch_during({}); });
  std::thread second([&] { filtered = watch_during({"acct-3", "acct-5"}); });
  MixedLoad(server, 12, 40);
  storage::LedgerStorage& store = *server.server().store();
  const uint64_t last = store.log_progress().position;
  ASSERT_GT(last, 100u);
  until.store(last);
  // A filtered watcher hears of the last position within the progress interval.
  first.join();
  second.join();
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  const Watched watched = WatchUntil(*stub, WatchFrom(0), last);
  EXPECT_EQ(watched.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(Keys(during.Events()), Keys(watched.Events()));
  std::vector<std::string> expected_filtered;
  for (const v1::WatchEvent& event : watched.Events()) {
    if (event.account_id() == "acct-3" || event.account_id() == "acct-5") {
      expected_filtered.push_back(Key(event));
    }
  }
  EXPECT_EQ(Keys(filtered.Events()), expected_filtered);
  EXPECT_FALSE(expected_filtered.empty());
  // Every message covers the positions after the one before: increasing, ending at `last`.
  uint64_t previous = 0;
  for (const v1::WatchResponse& message : watched.messages) {
    EXPECT_GT(message.position(), previous);
    EXPECT_GE(message.committed_position(), message.position());
    for (const v1::WatchEvent& event : message.events()) {
      EXPECT_GT(event.position(), previous);
      EXPECT_LE(event.position(), message.position());
    }
    previous = message.position();
  }
  EXPECT_EQ(previous, last);
  // The operations are the log's, in the log's order, each whole.
  const std::vector<v1::WatchEvent> events = watched.Events();
  const std::vector<v1::WatchEvent> logged = EventsInTheLog(store, 0);
  ASSERT_EQ(events.size(), logged.size());
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].SerializeAsString(), logged[i].SerializeAsString()) << "event " << i;
  }
  // Each account's operations arrive as its History has them: sequences 1, 2, 3, ... and the
  // last balance_after is its balance.
  std::map<std::string, std::vector<v1::HistoryEntry>> by_account;
  for (const v1::WatchEvent& event : events)
    by_account[event.account_id()].push_back(event.entry());
  ASSERT_EQ(by_account.size(), 12u);
  std::map<std::string, int> operations_seen;
  for (const auto& [account, entries] : by_account) {
    for (size_t i = 0; i < entries.size(); ++i) {
      ASSERT_EQ(entries[i].sequence(), i + 1) << account;
      ++operations_seen[v1::Operation_Name(entries[i].operation())];
    }
    EXPECT_EQ(entries.back().balance_after(), Balance(*stub, account).balance) << account;
    const testing_util::HistoryResult history = testing_util::History(*stub, account, 1000);
    ASSERT_TRUE(history.status.ok());
    ASSERT_EQ(static_cast<size_t>(history.response.entries_size()), entries.size());
    // History is newest first.
    EXPECT_EQ(history.response.entries(0).SerializeAsString(), entries.back().SerializeAsString());
  }
  // The load made every kind of operation.
  EXPECT_GT(operations_seen["OPERATION_DEPOSIT"], 0);
  EXPECT_GT(operations_seen["OPERATION_WITHDRAW"], 0);
  EXPECT_GT(operations_seen["OPERATION_TRANSFER_OUT"], 0);
  EXPECT_GT(operations_seen["OPERATION_TRANSFER_IN"], 0);
}

TEST_F(WatchTest, WithBalancesAConsumerStartingMidLoadRebuildsItsAccountsExactly) {
  TestServer server(Options());
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  std::vector<std::string> accounts;
  for (int i = 0; i < 6; ++i) {
    accounts.push_back(absl::StrCat("acct-", i));
    ASSERT_TRUE(Deposit(*stub, accounts.back(), 1000).status.ok());
  }
  std::thread load([&] { MixedLoad(server, 8, 200); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Named out of order and one twice: the balances come in the order named, each once.
  std::vector<std::string> watched(accounts.rbegin(), accounts.rend());
  watched.push_back("never-opened");
  auto context = ContextWithDeadline(std::chrono::seconds(120));
  v1::WatchRequest request = WatchFrom(0, watched);
  request.add_account_ids(accounts[2]);
  request.set_with_balances(true);
  std::unique_ptr<grpc::ClientReader<v1::WatchResponse>> reader =
      stub->Watch(context.get(), request);
  v1::WatchResponse first;
  ASSERT_TRUE(reader->Read(&first));
  ASSERT_EQ(first.balances_size(), 7);
  EXPECT_EQ(first.events_size(), 0);
  const uint64_t start = first.position();
  EXPECT_GT(start, 6u);
  for (size_t i = 0; i < watched.size(); ++i) {
    EXPECT_EQ(first.balances(static_cast<int>(i)).account_id(), watched[i]);
  }
  std::map<std::string, AccountState> rebuilt;
  for (const v1::AccountBalance& balance : first.balances()) {
    if (balance.account_id() == "never-opened") {
      EXPECT_FALSE(balance.opened());
      continue;
    }
    EXPECT_TRUE(balance.opened()) << balance.account_id();
    EXPECT_GE(balance.sequence(), 1u);
    rebuilt[balance.account_id()] = {.balance = balance.balance(), .sequence = balance.sequence()};
  }
  // At least one operation of a watched account after the balances' position, whenever the
  // load ended.
  ASSERT_TRUE(Deposit(*stub, "acct-0", 7, "after-the-balances").status.ok());
  load.join();
  const uint64_t last = server.server().store()->log_position();
  v1::WatchResponse message;
  int after_start = 0;
  while (first.position() < last && reader->Read(&message)) {
    for (const v1::WatchEvent& event : message.events()) {
      EXPECT_GT(event.position(), start);
      AccountState& state = rebuilt[event.account_id()];
      // The first operation after the balances is the next of each account: none missed, none
      // counted twice.
      ASSERT_EQ(event.entry().sequence(), state.sequence + 1) << event.account_id();
      state = {.balance = event.entry().balance_after(), .sequence = event.entry().sequence()};
      ++after_start;
    }
    if (message.position() >= last) break;
  }
  context->TryCancel();
  while (reader->Read(&message)) {
  }
  reader->Finish();
  EXPECT_GT(after_start, 0);  // The load went on after the balances' position.
  for (const std::string& account : accounts) {
    EXPECT_EQ(rebuilt[account].balance, Balance(*stub, account).balance) << account;
    const testing_util::HistoryResult history = testing_util::History(*stub, account, 1);
    ASSERT_TRUE(history.status.ok());
    EXPECT_EQ(rebuilt[account].sequence, history.response.entries(0).sequence()) << account;
  }
  // Without accounts there is nothing to give balances of.
  v1::WatchRequest bare;
  bare.set_with_balances(true);
  const Watched refused = WatchUntil(*stub, bare, 1);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("with_balances"));
}

// The issue's test: a resume from every 100th position of a log of well over a thousand.
TEST_F(WatchTest, AResumeFromEvery100thPositionGivesTheSameSuffix) {
  TestServer server(Options());
  MixedLoad(server, 8, 150);
  storage::LedgerStorage& store = *server.server().store();
  const uint64_t last = store.log_progress().position;
  ASSERT_GE(last, 1000u);
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  const std::vector<v1::WatchEvent> whole = WatchUntil(*stub, WatchFrom(0), last).Events();
  const std::vector<std::string> keys = Keys(whole);
  for (uint64_t from = 0; from < last; from += 100) {
    const std::vector<std::string> suffix = Keys(WatchUntil(*stub, WatchFrom(from), last).Events());
    std::vector<std::string> expected;
    for (const v1::WatchEvent& event : whole) {
      if (event.position() > from) expected.push_back(Key(event));
    }
    EXPECT_EQ(suffix, expected) << "from " << from;
  }
  EXPECT_FALSE(keys.empty());
}

TEST_F(WatchTest, AFilteredWatcherGetsItsAccountsAndKeepsItsPositionMoving) {
  TestServer server(Options());
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  ASSERT_TRUE(Deposit(*stub, "alice", 100).status.ok());
  for (int i = 0; i < 30; ++i)
    ASSERT_TRUE(Deposit(*stub, absl::StrCat("other-", i), 5).status.ok());
  ASSERT_TRUE(Deposit(*stub, "bob", 7).status.ok());
  for (int i = 0; i < 30; ++i)
    ASSERT_TRUE(Deposit(*stub, absl::StrCat("other-", i), 5).status.ok());
  const uint64_t last = server.server().store()->log_progress().position;
  const Watched watched = WatchUntil(*stub, WatchFrom(0, {"alice", "bob", "nobody"}), last);
  const std::vector<v1::WatchEvent> events = watched.Events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].account_id(), "alice");
  EXPECT_EQ(events[0].entry().balance_after(), 100);
  EXPECT_EQ(events[1].account_id(), "bob");
  // After bob's deposit only other accounts changed: the position still reached the end, in a
  // message of its own (within a second, without events).
  ASSERT_FALSE(watched.messages.empty());
  EXPECT_EQ(watched.messages.back().position(), last);
  EXPECT_GT(last, events[1].position());
}

TEST_F(WatchTest, ANewOperationReachesAWatcherWaitingAtTheEnd) {
  TestServer server(Options());
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  ASSERT_TRUE(Deposit(*stub, "early", 1).status.ok());
  const uint64_t before = server.server().store()->log_progress().position;
  auto context = ContextWithDeadline(std::chrono::seconds(30));
  std::unique_ptr<grpc::ClientReader<v1::WatchResponse>> reader =
      stub->Watch(context.get(), WatchFrom(before));
  std::thread writer([&server] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::unique_ptr<v1::Ledger::Stub> other = server.NewStub();
    EXPECT_TRUE(Deposit(*other, "late", 42, "late-1").status.ok());
  });
  v1::WatchResponse message;
  ASSERT_TRUE(reader->Read(&message));
  writer.join();
  ASSERT_EQ(message.events_size(), 1);
  EXPECT_EQ(message.events(0).account_id(), "late");
  EXPECT_EQ(message.events(0).entry().amount(), 42);
  EXPECT_EQ(message.events(0).entry().request_id(), "late-1");
  EXPECT_EQ(message.position(), before + 1);
  context->TryCancel();
  while (reader->Read(&message)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

// The refusal's reason and metadata.
ErrorDetails DetailsOf(const grpc::Status& status) {
  std::optional<ErrorDetails> details = DecodeErrorDetails(status.error_details());
  EXPECT_TRUE(details.has_value()) << status.error_message();
  return details.value_or(ErrorDetails{});
}

TEST_F(WatchTest, BadRequestsAndTheBoundsAreRefusedWithTheirReasons) {
  ServerOptions options = Options();
  options.watch.max_watchers = 3;
  options.watch.max_watchers_per_client = 2;
  options.watch.max_accounts = 4;
  TestServer server(options);
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  ASSERT_TRUE(Deposit(*stub, "a", 1).status.ok());

  Watched many = WatchUntil(*stub, WatchFrom(0, {"a", "b", "c", "d", "e"}), 1);
  EXPECT_EQ(many.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(DetailsOf(many.status).reason, v1::INVALID_REQUEST);
  EXPECT_THAT(many.status.error_message(), HasSubstr("--max_watch_accounts"));
  EXPECT_TRUE(many.messages.empty());
  Watched bad = WatchUntil(*stub, WatchFrom(0, {"a", "no spaces"}), 1);
  EXPECT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(DetailsOf(bad.status).reason, v1::INVALID_ACCOUNT_ID);

  // Two from this client (one channel: one address), then its third is refused; another
  // client's is served until the server holds three.
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::WatchResponse>>> open;
  const auto open_one = [&](v1::Ledger::Stub& on) -> grpc::ClientReader<v1::WatchResponse>& {
    contexts.push_back(ContextWithDeadline(std::chrono::seconds(30)));
    open.push_back(on.Watch(contexts.back().get(), WatchFrom(0)));
    return *open.back();
  };
  v1::WatchResponse message;
  ASSERT_TRUE(open_one(*stub).Read(&message));
  ASSERT_TRUE(open_one(*stub).Read(&message));
  EXPECT_FALSE(open_one(*stub).Read(&message));
  grpc::Status third = open.back()->Finish();
  open.pop_back();
  EXPECT_EQ(third.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(DetailsOf(third).reason, v1::WATCH_LIMIT);
  EXPECT_THAT(third.error_message(), HasSubstr("--max_watchers_per_client"));
  EXPECT_TRUE(DetailsOf(third).retry_delay.has_value());
  EXPECT_EQ(server.server().metrics().requests(
                RpcMethod::kWatch, static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED)),
            1u);

  for (auto& context : contexts) context->TryCancel();
  for (auto& reader : open) {
    while (reader->Read(&message)) {
    }
    reader->Finish();
  }
  ASSERT_TRUE(WaitUntil([&] { return server.server().watch_feed().stats().watchers == 0; },
                        "the cancelled watchers are let go"));
}

TEST_F(WatchTest, TheServerWideBoundCountsEveryClient) {
  ServerOptions options = Options();
  options.watch.max_watchers = 3;
  options.fair_share_by = FairShareBy::kConnection;  // Each channel is a client of its own.
  TestServer server(options);
  ASSERT_TRUE(Deposit(*server.NewStub(), "a", 1).status.ok());
  std::vector<std::unique_ptr<v1::Ledger::Stub>> stubs;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::WatchResponse>>> open;
  v1::WatchResponse message;
  for (int i = 0; i < 4; ++i) {
    stubs.push_back(server.NewStub());
    contexts.push_back(ContextWithDeadline(std::chrono::seconds(30)));
    open.push_back(stubs.back()->Watch(contexts.back().get(), WatchFrom(0)));
    EXPECT_EQ(open.back()->Read(&message), i < 3) << "watcher " << i;
  }
  const grpc::Status fourth = open.back()->Finish();
  open.pop_back();
  EXPECT_EQ(fourth.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(DetailsOf(fourth).reason, v1::WATCH_LIMIT);
  EXPECT_THAT(fourth.error_message(), HasSubstr("--max_watchers"));
  EXPECT_EQ(server.server().watch_feed().stats().watchers, 3);
  const std::string scraped =
      prometheus::TextSerializer().Serialize(server.server().metrics().Collect());
  EXPECT_EQ(testing_util::SampleValue(scraped, "ledger_watchers"), 3);
  // The server's stop ends every stream with a definite answer.
  server.server().Shutdown();
  for (int i = 0; i < 3; ++i) {
    while (open[i]->Read(&message)) {
    }
    const grpc::Status ended = open[i]->Finish();
    EXPECT_EQ(ended.error_code(), grpc::StatusCode::UNAVAILABLE) << ended.error_message();
    EXPECT_EQ(DetailsOf(ended).reason, v1::SHUTTING_DOWN);
  }
}

TEST(WatchWithoutALogTest, AServerKeepingNothingOnDiskSaysSo) {
  TestServer server;  // --durability=none
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  ASSERT_TRUE(Deposit(*stub, "a", 1).status.ok());
  const Watched watched = WatchUntil(*stub, WatchFrom(0), 1);
  EXPECT_EQ(watched.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(DetailsOf(watched.status).reason, v1::NOT_DURABLE);
  EXPECT_TRUE(watched.messages.empty());
}

// A ledger of small log segments, so that a few hundred deposits fill several and a checkpoint
// drops them.
class SmallSegmentsTest : public testing::Test {
 protected:
  static constexpr int64_t kSegmentBytes = 64 << 10;
  void SetUp() override { testing_util::InitLedger(dir_.path(), kSegmentBytes); }
  ServerOptions Options() {
    ServerOptions options = DurableOptions(dir_.path(), 2);
    options.storage.log_segment_bytes = kSegmentBytes;
    return options;
  }
  testing_util::ScratchDir dir_;
};

void DepositMany(v1::Ledger::Stub& stub, int count, const std::string& tag) {
  for (int i = 0; i < count; ++i) {
    ASSERT_TRUE(
        Deposit(stub, absl::StrCat("acct-", i % 17), 1 + i, absl::StrCat(tag, "-", i)).status.ok());
  }
}

TEST_F(SmallSegmentsTest, AWatcherBehindWhatTheLogKeepsIsToldTheOldestPosition) {
  TestServer server(Options());
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  ASSERT_NO_FATAL_FAILURE(DepositMany(*stub, 1500, "fill"));
  auto* store = dynamic_cast<storage::RocksDbStore*>(server.server().store());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Checkpoint().ok());
  const uint64_t oldest = store->first_log_position();
  ASSERT_GT(oldest, 2u);
  const Watched refused = WatchUntil(*stub, WatchFrom(0), 1);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  const ErrorDetails details = DetailsOf(refused.status);
  EXPECT_EQ(details.reason, v1::POSITION_NOT_KEPT);
  EXPECT_EQ(MetadataValue(details.metadata, "oldest_position"), absl::StrCat(oldest));
  EXPECT_THAT(refused.status.error_message(), HasSubstr("resync: watch again with_balances"));
  // From just before the oldest kept: served, from it on.
  const uint64_t last = store->log_progress().position;
  const std::vector<v1::WatchEvent> kept = WatchUntil(*stub, WatchFrom(oldest - 1), last).Events();
  ASSERT_FALSE(kept.empty());
  EXPECT_EQ(kept.front().position(), oldest);
  EXPECT_EQ(kept.back().position(), last);
}

TEST_F(SmallSegmentsTest, AWatcherThatStopsReadingIsToldOnceTheLogDroppedItsPlace) {
  ServerOptions options = Options();
  options.watch.tail_bytes = 16 << 10;  // Past the feed's memory of the newest positions too.
  TestServer server(options);
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  ASSERT_NO_FATAL_FAILURE(DepositMany(*stub, 200, "before"));
  // A small window, so that gRPC buffers little for a client that does not read (by default
  // it grows the window to megabytes on loopback).
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  arguments.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16 << 10);
  std::unique_ptr<v1::Ledger::Stub> watcher = v1::Ledger::NewStub(
      grpc::CreateCustomChannel(server.target(), grpc::InsecureChannelCredentials(), arguments));
  auto context = ContextWithDeadline(std::chrono::seconds(60));
  std::unique_ptr<grpc::ClientReader<v1::WatchResponse>> reader =
      watcher->Watch(context.get(), WatchFrom(0));
  v1::WatchResponse message;
  ASSERT_TRUE(reader->Read(&message));
  // It reads nothing more while the ledger goes on and checkpoints past it. What gRPC buffered
  // for it is still delivered, then the error.
  ASSERT_NO_FATAL_FAILURE(DepositMany(*stub, 3000, "after"));
  auto* store = dynamic_cast<storage::RocksDbStore*>(server.server().store());
  ASSERT_TRUE(store->Checkpoint().ok());
  const uint64_t oldest = store->first_log_position();
  ASSERT_GT(oldest, 200u);
  uint64_t position = message.position();
  while (reader->Read(&message)) position = message.position();
  const grpc::Status ended = reader->Finish();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::OUT_OF_RANGE) << ended.error_message();
  EXPECT_EQ(DetailsOf(ended).reason, v1::POSITION_NOT_KEPT);
  EXPECT_LT(position, oldest - 1);
  EXPECT_EQ(MetadataValue(DetailsOf(ended).metadata, "from_position"), absl::StrCat(position));
}

TEST_F(SmallSegmentsTest, RetentionKeepsTheLogThatCheckpointsWouldDrop) {
  ServerOptions options = Options();
  options.storage.watch_retention_bytes = 64 << 20;
  TestServer server(options);
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  ASSERT_NO_FATAL_FAILURE(DepositMany(*stub, 1500, "kept"));
  auto* store = dynamic_cast<storage::RocksDbStore*>(server.server().store());
  ASSERT_TRUE(store->Checkpoint().ok());
  EXPECT_EQ(store->first_log_position(), 1u);
  EXPECT_GT(store->LogSegments().size(), 1u);  // Without retention, all but one would be gone.
  const uint64_t last = store->log_progress().position;
  const std::vector<v1::WatchEvent> all = WatchUntil(*stub, WatchFrom(0), last).Events();
  EXPECT_EQ(all.size(), 1500u);
}

TEST_F(SmallSegmentsTest, AnAgeOfRetentionKeepsWhatWasWrittenWithinIt) {
  ServerOptions options = Options();
  options.storage.watch_retention_age = absl::Hours(1);
  // The store's wall clock, moved forward by the test.
  auto offset = std::make_shared<std::atomic<int64_t>>(0);
  options.storage.clock = [offset] { return absl::Now() + absl::Seconds(offset->load()); };
  TestServer server(options);
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  ASSERT_NO_FATAL_FAILURE(DepositMany(*stub, 1500, "aged"));
  auto* store = dynamic_cast<storage::RocksDbStore*>(server.server().store());
  ASSERT_TRUE(store->Checkpoint().ok());
  EXPECT_EQ(store->first_log_position(), 1u);  // All written within the hour.
  offset->store(int64_t{2} * 3600);
  ASSERT_TRUE(store->Checkpoint().ok());
  EXPECT_GT(store->first_log_position(), 1u);  // Two hours later, only what the start needs.
  EXPECT_EQ(store->LogSegments().size(), 1u);
}

}  // namespace
}  // namespace ledger
