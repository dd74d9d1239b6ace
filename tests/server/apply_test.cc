// Apply through gRPC, written from the contract (ledger.proto, rpc Apply): one result per
// operation in request order, each what the operation's own RPC would answer (checked against
// the unary RPCs on a second, fresh server); same-account order; request_id and transfer_id
// replays inside one call and across calls; --require_request_id per operation; the 8,192
// limit and the default message size; a shard part larger than its mailbox (or than the room
// left in it) refused whole while the other shard's part applies; a restart that keeps every
// applied operation and its History; a call of 8,192 deposits; and concurrent calls whose
// results account for every balance exactly.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ledger/v1/ledger.grpc.pb.h"
#include "proto/error_details.h"
#include "server/ledger_service.h"
#include "shard/admission_control.h"
#include "tests/scratch_ledger.h"
#include "tests/server/apply_operations.h"
#include "tests/server/test_server.h"
#include "tests/shard/shard_test_util.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using testing_util::Balance;
using testing_util::BalanceOf;
using testing_util::BalanceOp;
using testing_util::Deposit;
using testing_util::DepositOp;
using testing_util::History;
using testing_util::ScratchLedger;
using testing_util::TestServer;
using testing_util::TransferOp;
using testing_util::WithdrawOp;

constexpr int32_t kApplyShards = 2;
constexpr int kMaxOperations = 8192;  // The contract's limit per ApplyRequest.
constexpr int32_t kOk = static_cast<int32_t>(grpc::StatusCode::OK);
constexpr int32_t kInvalidArgument = static_cast<int32_t>(grpc::StatusCode::INVALID_ARGUMENT);
constexpr int32_t kNotFound = static_cast<int32_t>(grpc::StatusCode::NOT_FOUND);
constexpr int32_t kAlreadyExists = static_cast<int32_t>(grpc::StatusCode::ALREADY_EXISTS);
constexpr int32_t kResourceExhausted = static_cast<int32_t>(grpc::StatusCode::RESOURCE_EXHAUSTED);
constexpr int32_t kFailedPrecondition = static_cast<int32_t>(grpc::StatusCode::FAILED_PRECONDITION);
constexpr int32_t kOutOfRange = static_cast<int32_t>(grpc::StatusCode::OUT_OF_RANGE);
constexpr int32_t kUnavailable = static_cast<int32_t>(grpc::StatusCode::UNAVAILABLE);
constexpr int64_t kMaxBalance = std::numeric_limits<int64_t>::max();

// Two shards; room in each mailbox for a whole call (the --mailbox_capacity default, which
// counts operations); `data_dir` empty keeps the accounts in memory only (no History, no
// deduplication of request_ids).
ServerOptions ApplyOptions(const std::string& data_dir = "") {
  ServerOptions options = testing_util::LoopbackOptions();
  options.router.num_shards = kApplyShards;
  options.router.shard.mailbox_capacity = 16384;
  if (!data_dir.empty()) {
    options.storage.durability = storage::Durability::kSync;
    options.storage.data_dir = data_dir;
  }
  return options;
}

// An account id named after `prefix` that lives on shard `shard` of kApplyShards.
std::string OnShard(const std::string& prefix, int32_t shard) {
  return testing_util::AccountOnShard(prefix, shard, kApplyShards);
}

v1::ApplyResult Result(int32_t code, int64_t balance = 0, bool replayed = false,
                       int64_t to_balance = 0) {
  v1::ApplyResult result;
  result.set_code(code);
  result.set_balance(balance);
  result.set_replayed(replayed);
  result.set_to_balance(to_balance);
  return result;
}

struct ApplyCall {
  grpc::Status status;
  v1::ApplyResponse response;
  // grpc-retry-pushback-ms of the trailing metadata; nullopt when absent.
  std::optional<std::string> pushback;
};

ApplyCall Apply(v1::Ledger::Stub& stub, const std::vector<v1::ApplyOperation>& operations) {
  v1::ApplyRequest request;
  for (const v1::ApplyOperation& op : operations) *request.add_operations() = op;
  // Generous: a call of thousands of durable operations shares two cores with other builds.
  std::unique_ptr<grpc::ClientContext> context =
      testing_util::ContextWithDeadline(std::chrono::seconds(60));
  ApplyCall call;
  call.status = stub.Apply(context.get(), request, &call.response);
  const auto& trailers = context->GetServerTrailingMetadata();
  const auto found = trailers.find(kRetryPushbackKey);
  if (found != trailers.end())
    call.pushback = std::string(found->second.data(), found->second.size());
  return call;
}

// What the operation's own unary RPC answers, written as an ApplyResult.
v1::ApplyResult ViaUnary(v1::Ledger::Stub& stub, const v1::ApplyOperation& op) {
  std::unique_ptr<grpc::ClientContext> context = testing_util::ContextWithDeadline();
  grpc::Status status;
  v1::ApplyResult result;
  switch (op.operation_case()) {
    case v1::ApplyOperation::kDeposit: {
      v1::DepositResponse response;
      status = stub.Deposit(context.get(), op.deposit(), &response);
      result.set_balance(response.balance());
      result.set_replayed(response.replayed());
      break;
    }
    case v1::ApplyOperation::kWithdraw: {
      v1::WithdrawResponse response;
      status = stub.Withdraw(context.get(), op.withdraw(), &response);
      result.set_balance(response.balance());
      result.set_replayed(response.replayed());
      break;
    }
    case v1::ApplyOperation::kBalance: {
      v1::BalanceResponse response;
      status = stub.Balance(context.get(), op.balance(), &response);
      result.set_balance(response.balance());
      break;
    }
    case v1::ApplyOperation::kTransfer: {
      v1::TransferResponse response;
      status = stub.Transfer(context.get(), op.transfer(), &response);
      result.set_balance(response.from_balance());
      result.set_to_balance(response.to_balance());
      result.set_replayed(response.replayed());
      break;
    }
    case v1::ApplyOperation::OPERATION_NOT_SET:
      ADD_FAILURE() << "an operation with no field has no unary RPC";
      break;
  }
  result.set_code(static_cast<int32_t>(status.error_code()));
  result.set_message(status.error_message());
  if (!status.ok()) {
    // Every refusal carries its reason (grpc-status-details-bin), which the ApplyResult repeats.
    std::optional<ErrorDetails> details = DecodeErrorDetails(status.error_details());
    EXPECT_TRUE(details.has_value()) << status.error_message();
    if (details.has_value()) result.set_reason(details->reason);
  }
  return result;
}

// Every result, code and message included, field by field, so that a failure shows which.
void ExpectResults(const v1::ApplyResponse& response, const std::vector<v1::ApplyResult>& expected,
                   const std::vector<v1::ApplyOperation>& operations) {
  ASSERT_EQ(response.results_size(), static_cast<int>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("operation ", i, ": ", operations[i].ShortDebugString()));
    EXPECT_EQ(response.results(i).ShortDebugString(), expected[i].ShortDebugString());
  }
}

// The codes, balances and replayed flags; messages are checked to be empty exactly when OK.
void ExpectOutcomes(const v1::ApplyResponse& response, const std::vector<v1::ApplyResult>& expected,
                    const std::vector<v1::ApplyOperation>& operations) {
  ASSERT_EQ(response.results_size(), static_cast<int>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("operation ", i, ": ", operations[i].ShortDebugString()));
    const v1::ApplyResult& got = response.results(static_cast<int>(i));
    EXPECT_EQ(got.code(), expected[i].code()) << got.message();
    EXPECT_EQ(got.balance(), expected[i].balance());
    EXPECT_EQ(got.to_balance(), expected[i].to_balance());
    EXPECT_EQ(got.replayed(), expected[i].replayed());
    if (expected[i].code() == kOk) {
      EXPECT_THAT(got.message(), IsEmpty());
    } else {
      EXPECT_THAT(got.message(), Not(IsEmpty()));
    }
  }
}

grpc::StatusCode BalanceCode(v1::Ledger::Stub& stub, const std::string& account) {
  return Balance(stub, account).status.error_code();
}

// The pushback in ms; -1 when absent or not a decimal integer.
int64_t PushbackMs(const std::optional<std::string>& pushback) {
  if (!pushback.has_value()) return -1;
  int64_t ms = -1;
  const char* end = pushback->data() + pushback->size();
  if (std::from_chars(pushback->data(), end, ms).ptr != end) return -1;
  return ms;
}

TEST(ApplyTest, AnEmptyRequestIsAnsweredOkWithNoResults) {
  TestServer server(ApplyOptions());
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  ApplyCall call = Apply(*stub, {});
  ASSERT_TRUE(call.status.ok()) << call.status.error_message();
  EXPECT_EQ(call.response.results_size(), 0);
}

// The limit and one past it, side by side: 8,192 operations are all applied; 8,193 fail the whole
// call and none of them is applied.
TEST(ApplyTest, AtMost8192OperationsPerCallAndOneMoreAppliesNothing) {
  TestServer server(ApplyOptions());
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  std::vector<v1::ApplyOperation> at_limit;
  for (int i = 0; i < kMaxOperations; ++i) at_limit.push_back(DepositOp("limit", 1));
  ApplyCall accepted = Apply(*stub, at_limit);
  ASSERT_TRUE(accepted.status.ok()) << accepted.status.error_message();
  ASSERT_EQ(accepted.response.results_size(), kMaxOperations);
  EXPECT_EQ(accepted.response.results(kMaxOperations - 1).code(), kOk);
  EXPECT_EQ(accepted.response.results(kMaxOperations - 1).balance(), kMaxOperations);
  EXPECT_EQ(BalanceOf(*stub, "limit"), kMaxOperations);

  std::vector<v1::ApplyOperation> over_limit;
  for (int i = 0; i <= kMaxOperations; ++i) {
    over_limit.push_back(DepositOp(absl::StrCat("over-", i % 10), 1));
  }
  over_limit.push_back(DepositOp("limit", 1));
  ApplyCall refused = Apply(*stub, over_limit);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << refused.status.error_message();
  EXPECT_THAT(refused.status.error_message(), HasSubstr("8192"));
  EXPECT_EQ(refused.response.results_size(), 0);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(BalanceCode(*stub, absl::StrCat("over-", i)), grpc::StatusCode::NOT_FOUND);
  }
  EXPECT_EQ(BalanceOf(*stub, "limit"), kMaxOperations);
}

// The default --max_receive_message_bytes admits the largest valid call: 8,192 transfers with
// every field at its longest (the amount a ten-byte varint, so each is refused by its own rules,
// which keeps the test cheap; the call itself must still be OK).
TEST(ApplyTest, TheDefaultMessageSizeLimitAdmits8192OperationsOfMaximalSize) {
  TestServer server(ApplyOptions());
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  std::vector<v1::ApplyOperation> operations;
  v1::ApplyRequest request;
  for (int i = 0; i < kMaxOperations; ++i) {
    std::string transfer_id = absl::StrCat("t", i);
    transfer_id.resize(128, 'x');
    operations.push_back(TransferOp(transfer_id, std::string(128, 'f'), std::string(128, 't'), -1));
    *request.add_operations() = operations.back();
  }
  EXPECT_GT(request.ByteSizeLong(), size_t{3} << 20);
  ApplyCall call = Apply(*stub, operations);
  ASSERT_TRUE(call.status.ok()) << call.status.error_code() << ": " << call.status.error_message();
  ASSERT_EQ(call.response.results_size(), kMaxOperations);
  for (const v1::ApplyResult& result : call.response.results()) {
    ASSERT_EQ(result.code(), kInvalidArgument);
    ASSERT_THAT(result.message(), HasSubstr("amount must be greater than 0"));
  }
}

TEST(ApplyTest, AnOperationThatSetsNoFieldIsInvalidAndTheOthersApply) {
  TestServer server(ApplyOptions());
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  const std::vector<v1::ApplyOperation> operations = {DepositOp("unset", 5), v1::ApplyOperation(),
                                                      DepositOp("unset", 7)};
  ApplyCall call = Apply(*stub, operations);
  ASSERT_TRUE(call.status.ok()) << call.status.error_message();
  ExpectOutcomes(call.response, {Result(kOk, 5), Result(kInvalidArgument), Result(kOk, 12)},
                 operations);
  ASSERT_EQ(call.response.results_size(), 3);
  const std::string& words = call.response.results(1).message();
  EXPECT_THAT(words, HasSubstr("deposit"));
  EXPECT_THAT(words, HasSubstr("withdraw"));
  EXPECT_THAT(words, HasSubstr("balance"));
  EXPECT_THAT(words, HasSubstr("transfer"));
  EXPECT_EQ(BalanceOf(*stub, "unset"), 12);
}

TEST(ApplyTest, OperationsOnOneAccountApplyInRequestOrder) {
  TestServer server(ApplyOptions());
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  const std::vector<v1::ApplyOperation> operations = {
      DepositOp("order", 10), WithdrawOp("order", 15), DepositOp("order", 10),
      WithdrawOp("order", 15), BalanceOp("order")};
  ApplyCall call = Apply(*stub, operations);
  ASSERT_TRUE(call.status.ok()) << call.status.error_message();
  ExpectOutcomes(call.response,
                 {Result(kOk, 10), Result(kFailedPrecondition), Result(kOk, 20), Result(kOk, 5),
                  Result(kOk, 5)},
                 operations);
  EXPECT_EQ(BalanceOf(*stub, "order"), 5);
}

// Many accounts on both shards, interleaved: each account's results follow its own operations
// in request order, whatever the other accounts and shards do in the same call.
TEST(ApplyTest, InterleavedAccountsOnBothShardsEachKeepTheirOrder) {
  TestServer server(ApplyOptions());
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  std::vector<std::string> accounts;
  for (int i = 0; i < 6; ++i) {
    accounts.push_back(OnShard(absl::StrCat("mix", i), 0));
    accounts.push_back(OnShard(absl::StrCat("mix", i), 1));
  }
  std::mt19937 random(16);
  std::map<std::string, int64_t> model;  // Opened accounts and their balances.
  std::vector<v1::ApplyOperation> operations;
  std::vector<v1::ApplyResult> expected;
  for (int i = 0; i < 600; ++i) {
    const std::string& account = accounts[random() % accounts.size()];
    const int64_t amount = 1 + static_cast<int64_t>(random() % 50);
    const auto opened = model.find(account);
    switch (random() % 3) {
      case 0:
        operations.push_back(DepositOp(account, amount));
        expected.push_back(Result(kOk, model[account] += amount));
        break;
      case 1:
        operations.push_back(WithdrawOp(account, amount));
        if (opened == model.end()) {
          expected.push_back(Result(kNotFound));
        } else if (opened->second < amount) {
          expected.push_back(Result(kFailedPrecondition));
        } else {
          expected.push_back(Result(kOk, opened->second -= amount));
        }
        break;
      default:
        operations.push_back(BalanceOp(account));
        expected.push_back(opened == model.end() ? Result(kNotFound) : Result(kOk, opened->second));
    }
  }
  ApplyCall call = Apply(*stub, operations);
  ASSERT_TRUE(call.status.ok()) << call.status.error_message();
  ExpectOutcomes(call.response, expected, operations);
  for (const auto& [account, balance] : model) EXPECT_EQ(BalanceOf(*stub, account), balance);
}

// Two durable servers from the same state: the batch goes to one as an Apply, and to the other
// as the unary RPCs one after another; every result, message included, must be the same.
class ApplyAgainstUnaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    batch_server_ = std::make_unique<TestServer>(ApplyOptions(batch_dir_.path()));
    unary_server_ = std::make_unique<TestServer>(ApplyOptions(unary_dir_.path()));
    batch_ = batch_server_->NewStub();
    unary_ = unary_server_->NewStub();
  }

  // The same state on both servers, through the unary RPCs.
  void Prepare(const std::vector<v1::ApplyOperation>& operations) {
    for (const v1::ApplyOperation& op : operations) {
      for (v1::Ledger::Stub* stub : {batch_.get(), unary_.get()}) {
        const v1::ApplyResult result = ViaUnary(*stub, op);
        ASSERT_EQ(result.code(), kOk) << op.ShortDebugString() << ": " << result.message();
      }
    }
  }

  // Applies `operations` to the batch server in one call and one by one to the unary server,
  // expects the same results, and returns the Apply's.
  v1::ApplyResponse ExpectSameAsUnary(const std::vector<v1::ApplyOperation>& operations) {
    ApplyCall call = Apply(*batch_, operations);
    EXPECT_TRUE(call.status.ok()) << call.status.error_message();
    std::vector<v1::ApplyResult> expected;
    for (const v1::ApplyOperation& op : operations) expected.push_back(ViaUnary(*unary_, op));
    ExpectResults(call.response, expected, operations);
    return call.response;
  }

  // The balance on both servers, which must agree.
  int64_t BothBalances(const std::string& account) {
    const int64_t balance = BalanceOf(*batch_, account);
    EXPECT_EQ(BalanceOf(*unary_, account), balance) << account;
    return balance;
  }

  ScratchLedger batch_dir_;
  ScratchLedger unary_dir_;
  std::unique_ptr<TestServer> batch_server_;
  std::unique_ptr<TestServer> unary_server_;
  std::unique_ptr<v1::Ledger::Stub> batch_;
  std::unique_ptr<v1::Ledger::Stub> unary_;
};

TEST_F(ApplyAgainstUnaryTest, EveryKindOfOperationAnswersWhatItsOwnRpcWould) {
  const std::string a0 = OnShard("kind-a", 0);
  const std::string b0 = OnShard("kind-b", 0);
  const std::string c1 = OnShard("kind-c", 1);
  const std::string d1 = OnShard("kind-d", 1);
  Prepare({DepositOp(a0, 1000), DepositOp(b0, 1000), DepositOp(c1, 1000)});
  const std::vector<v1::ApplyOperation> operations = {
      DepositOp(a0, 25, "k-1"),
      DepositOp(d1, 40),
      WithdrawOp(b0, 300, "k-2"),
      BalanceOp(d1),  // Not c1: the cross-shard credit below is in no order with c1's part.
      TransferOp("k-same", a0, b0, 100),
      TransferOp("k-cross", a0, c1, 200),
      BalanceOp(a0),
      WithdrawOp(d1, 40),
  };
  const v1::ApplyResponse response = ExpectSameAsUnary(operations);
  ExpectOutcomes(response,
                 {Result(kOk, 1025), Result(kOk, 40), Result(kOk, 700), Result(kOk, 40),
                  Result(kOk, 925, false, 800), Result(kOk, 725, false, 1200), Result(kOk, 725),
                  Result(kOk, 0)},
                 operations);
  EXPECT_EQ(BothBalances(a0), 725);
  EXPECT_EQ(BothBalances(b0), 800);
  EXPECT_EQ(BothBalances(c1), 1200);
  EXPECT_EQ(BothBalances(d1), 0);
}

// Every error class in one call, each at its index with its own RPC's code and words, the OKs
// around them applied, and the final balances exact.
TEST_F(ApplyAgainstUnaryTest, ABatchWithEveryErrorClassAnswersEachOperationAtItsIndex) {
  const std::string rich = OnShard("rich", 0);
  const std::string peer = OnShard("peer", 0);
  const std::string far = OnShard("far", 1);
  const std::string payer = OnShard("payer", 0);
  const std::string full = OnShard("full", 1);
  const std::string ghost0 = OnShard("ghost", 0);
  const std::string ghost1 = OnShard("ghost", 1);
  Prepare({DepositOp(rich, 1000), DepositOp(peer, 1000), DepositOp(far, 1000),
           DepositOp(payer, 1000), DepositOp(full, kMaxBalance - 10)});
  const std::vector<v1::ApplyOperation> operations = {
      DepositOp("bad id!", 5),                       // 0 INVALID_ARGUMENT: account id
      DepositOp(rich, 0),                            // 1 INVALID_ARGUMENT: amount
      WithdrawOp(ghost0, 5),                         // 2 NOT_FOUND
      BalanceOp(ghost1),                             // 3 NOT_FOUND
      WithdrawOp(rich, 5000),                        // 4 FAILED_PRECONDITION
      DepositOp(full, 11),                           // 5 OUT_OF_RANGE
      DepositOp(rich, 100, "e-1"),                   // 6 OK 1100
      DepositOp(rich, 200, "e-1"),                   // 7 ALREADY_EXISTS: other amount
      WithdrawOp(rich, 100, "e-1"),                  // 8 ALREADY_EXISTS: other operation
      DepositOp(full, 10),                           // 9 OK: exactly the maximum
      TransferOp("e-same", rich, peer, 50),          // 10 OK 1050 / 1050
      TransferOp("e-cross", rich, far, 60),          // 11 OK 990 / 1060
      TransferOp("", rich, far, 1),                  // 12 INVALID_ARGUMENT: transfer_id
      TransferOp("e-nf", payer, ghost1, 7),          // 13 NOT_FOUND (destination, across shards)
      TransferOp("e-same", rich, peer, 51),          // 14 ALREADY_EXISTS
      TransferOp("e-self", rich, rich, 1),           // 15 INVALID_ARGUMENT: same account
      TransferOp("e-broke", peer, far, 5000),        // 16 FAILED_PRECONDITION
      WithdrawOp(rich, 10, "e-2"),                   // 17 OK 980
      DepositOp(rich, -3),                           // 18 INVALID_ARGUMENT: negative amount
      WithdrawOp(rich, 100, std::string(129, 'x')),  // 19 INVALID_ARGUMENT: request_id too long
  };
  const v1::ApplyResponse response = ExpectSameAsUnary(operations);
  ExpectOutcomes(response,
                 {Result(kInvalidArgument),
                  Result(kInvalidArgument),
                  Result(kNotFound),
                  Result(kNotFound),
                  Result(kFailedPrecondition),
                  Result(kOutOfRange),
                  Result(kOk, 1100),
                  Result(kAlreadyExists),
                  Result(kAlreadyExists),
                  Result(kOk, kMaxBalance),
                  Result(kOk, 1050, false, 1050),
                  Result(kOk, 990, false, 1060),
                  Result(kInvalidArgument),
                  Result(kNotFound),
                  Result(kAlreadyExists),
                  Result(kInvalidArgument),
                  Result(kFailedPrecondition),
                  Result(kOk, 980),
                  Result(kInvalidArgument),
                  Result(kInvalidArgument)},
                 operations);
  EXPECT_EQ(BothBalances(rich), 980);
  EXPECT_EQ(BothBalances(peer), 1050);
  EXPECT_EQ(BothBalances(far), 1060);
  EXPECT_EQ(BothBalances(payer), 1000);  // Debited, then refunded.
  EXPECT_EQ(BothBalances(full), kMaxBalance);
  EXPECT_EQ(BalanceCode(*batch_, ghost0), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(BalanceCode(*batch_, ghost1), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ApplyAgainstUnaryTest, ARequestIdReplaysInsideOneCallAndAcrossCalls) {
  const std::string a = OnShard("idem-a", 0);
  const std::string b = OnShard("idem-b", 1);
  const std::vector<v1::ApplyOperation> first = {
      DepositOp(a, 10, "r1"),    DepositOp(a, 10, "r1"),   DepositOp(a, 11, "r2"),
      DepositOp(a, 12, "r2"),    WithdrawOp(a, 5, "r1"),   DepositOp(b, 7, "r1"),
      WithdrawOp(a, 1000, "r4"), DepositOp(a, 5000, "r5"), WithdrawOp(a, 1000, "r4"),
  };
  const v1::ApplyResponse once = ExpectSameAsUnary(first);
  ExpectOutcomes(once,
                 {Result(kOk, 10), Result(kOk, 10, true), Result(kOk, 21), Result(kAlreadyExists),
                  Result(kAlreadyExists), Result(kOk, 7), Result(kFailedPrecondition),
                  Result(kOk, 5021), Result(kFailedPrecondition)},
                 first);
  EXPECT_EQ(BothBalances(a), 5021);

  const std::vector<v1::ApplyOperation> second = {
      DepositOp(a, 10, "r1"), DepositOp(a, 11, "r2"), WithdrawOp(a, 3, "r3"),
      WithdrawOp(a, 3, "r3"), DepositOp(a, 13, "r2"), DepositOp(b, 7, "r1"),
  };
  const v1::ApplyResponse again = ExpectSameAsUnary(second);
  ExpectOutcomes(again,
                 {Result(kOk, 10, true), Result(kOk, 21, true), Result(kOk, 5018),
                  Result(kOk, 5018, true), Result(kAlreadyExists), Result(kOk, 7, true)},
                 second);
  EXPECT_EQ(BothBalances(a), 5018);
  EXPECT_EQ(BothBalances(b), 7);
}

TEST_F(ApplyAgainstUnaryTest, ATransferIdReplaysInsideOneCallAndAcrossCalls) {
  const std::string a0 = OnShard("tid-a", 0);
  const std::string b0 = OnShard("tid-b", 0);
  const std::string c1 = OnShard("tid-c", 1);
  Prepare({DepositOp(a0, 1000), DepositOp(b0, 1000), DepositOp(c1, 1000)});
  const std::vector<v1::ApplyOperation> first = {
      TransferOp("s1", a0, b0, 100), TransferOp("s1", a0, b0, 100), TransferOp("x1", a0, c1, 100),
      TransferOp("s1", a0, b0, 101), TransferOp("s1", a0, c1, 100),
  };
  const v1::ApplyResponse once = ExpectSameAsUnary(first);
  ExpectOutcomes(once,
                 {Result(kOk, 900, false, 1100), Result(kOk, 900, true, 1100),
                  Result(kOk, 800, false, 1100), Result(kAlreadyExists), Result(kAlreadyExists)},
                 first);
  const std::vector<v1::ApplyOperation> second = {
      TransferOp("x1", a0, c1, 100),
      TransferOp("s1", a0, b0, 100),
      TransferOp("x1", a0, c1, 99),
  };
  const v1::ApplyResponse again = ExpectSameAsUnary(second);
  ExpectOutcomes(
      again, {Result(kOk, 800, true, 1100), Result(kOk, 900, true, 1100), Result(kAlreadyExists)},
      second);
  EXPECT_EQ(BothBalances(a0), 800);
  EXPECT_EQ(BothBalances(b0), 1100);
  EXPECT_EQ(BothBalances(c1), 1100);
}

// A cross-shard transfer and its retry in the same call: the retry reaches the source while the
// first may still be in flight, where a unary retry would be told "still pending"; either answer
// is legal, but the money moves once.
TEST(ApplyTest, ACrossShardTransferRepeatedInOneCallMovesTheMoneyOnce) {
  ScratchLedger dir;
  TestServer server(ApplyOptions(dir.path()));
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  const std::string a0 = OnShard("twice-a", 0);
  const std::string c1 = OnShard("twice-c", 1);
  ASSERT_TRUE(Deposit(*stub, a0, 1000).status.ok());
  ASSERT_TRUE(Deposit(*stub, c1, 1000).status.ok());
  ApplyCall call = Apply(*stub, {TransferOp("x2", a0, c1, 50), TransferOp("x2", a0, c1, 50)});
  ASSERT_TRUE(call.status.ok()) << call.status.error_message();
  ASSERT_EQ(call.response.results_size(), 2);
  EXPECT_EQ(call.response.results(0).ShortDebugString(),
            Result(kOk, 950, false, 1050).ShortDebugString());
  const v1::ApplyResult& retry = call.response.results(1);
  EXPECT_THAT(retry.code(), AnyOf(kOk, kUnavailable)) << retry.message();
  if (retry.code() == kOk) {
    EXPECT_EQ(retry.ShortDebugString(), Result(kOk, 950, true, 1050).ShortDebugString());
  } else {
    EXPECT_THAT(retry.message(), HasSubstr("still pending"));
  }
  EXPECT_EQ(BalanceOf(*stub, a0), 950);
  EXPECT_EQ(BalanceOf(*stub, c1), 1050);
}

TEST(ApplyTest, RequireRequestIdRefusesEachWriteWithoutOneAndAppliesTheRest) {
  ServerOptions options = ApplyOptions();
  options.require_request_id = true;
  TestServer server(options);
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  const std::vector<v1::ApplyOperation> operations = {
      DepositOp("strict", 5, "q1"),  DepositOp("strict", 5), WithdrawOp("strict", 1),
      WithdrawOp("strict", 1, "q2"), BalanceOp("strict"),
  };
  ApplyCall call = Apply(*stub, operations);
  ASSERT_TRUE(call.status.ok()) << call.status.error_message();
  // The unary answers, refused before anything is applied, so they leave the state as it is.
  const v1::ApplyResult deposit_refused = ViaUnary(*stub, operations[1]);
  const v1::ApplyResult withdraw_refused = ViaUnary(*stub, operations[2]);
  ASSERT_EQ(deposit_refused.code(), kInvalidArgument);
  ASSERT_EQ(withdraw_refused.code(), kInvalidArgument);
  ExpectResults(call.response,
                {Result(kOk, 5), deposit_refused, withdraw_refused, Result(kOk, 4), Result(kOk, 4)},
                operations);
  EXPECT_EQ(BalanceOf(*stub, "strict"), 4);
}

// --mailbox_capacity counts operations: a shard part larger than the capacity can never fit, so
// it is refused whole, while the other shard's part (and a part exactly at the capacity) applies.
class ApplySheddingTest : public ::testing::Test {
 protected:
  static constexpr size_t kCapacity = 8;

  void SetUp() override {
    ServerOptions options = ApplyOptions();
    options.router.shard.mailbox_capacity = kCapacity;
    server_ = std::make_unique<TestServer>(options);
    stub_ = server_->NewStub();
    for (const std::string& account : {s0a_, s0b_, s1a_, s1b_}) {
      ASSERT_TRUE(Deposit(*stub_, account, 100).status.ok());
    }
    // The test's mapping is the server's.
    ASSERT_EQ(server_->server().router().ShardFor(s0a_), 0);
    ASSERT_EQ(server_->server().router().ShardFor(s0b_), 0);
    ASSERT_EQ(server_->server().router().ShardFor(s0new_), 0);
    ASSERT_EQ(server_->server().router().ShardFor(s1a_), 1);
    ASSERT_EQ(server_->server().router().ShardFor(s1b_), 1);
  }

  void ExpectRefusedOnShard0(const v1::ApplyResult& result) {
    EXPECT_EQ(result.code(), kResourceExhausted) << result.message();
    EXPECT_THAT(result.message(), HasSubstr("shard 0"));
    EXPECT_THAT(result.message(), HasSubstr("nothing was applied"));
    EXPECT_EQ(result.balance(), 0);
    EXPECT_FALSE(result.replayed());
  }

  std::unique_ptr<TestServer> server_;
  std::unique_ptr<v1::Ledger::Stub> stub_;
  const std::string s0a_ = OnShard("shed-a", 0);
  const std::string s0b_ = OnShard("shed-b", 0);
  const std::string s0new_ = OnShard("shed-new", 0);
  const std::string s1a_ = OnShard("shed-c", 1);
  const std::string s1b_ = OnShard("shed-d", 1);
};

TEST_F(ApplySheddingTest, APartLargerThanTheMailboxIsRefusedWholeAndTheOtherShardApplies) {
  // Nine operations on shard 0 interleaved with three on shard 1.
  const std::vector<v1::ApplyOperation> operations = {
      DepositOp(s0a_, 1),      DepositOp(s1a_, 5),   DepositOp(s0b_, 2),  WithdrawOp(s0a_, 50),
      BalanceOp(s0b_),         DepositOp(s0new_, 3), WithdrawOp(s1b_, 7), DepositOp(s0a_, 4),
      DepositOp(s0b_, 5, "p"), WithdrawOp(s0b_, 6),  BalanceOp(s1a_),     DepositOp(s0a_, 7),
  };
  const std::vector<int> shard1 = {1, 6, 10};
  ApplyCall call = Apply(*stub_, operations);
  ASSERT_TRUE(call.status.ok()) << call.status.error_message();
  ASSERT_EQ(call.response.results_size(), static_cast<int>(operations.size()));
  for (int i = 0; i < call.response.results_size(); ++i) {
    SCOPED_TRACE(absl::StrCat("operation ", i, ": ", operations[i].ShortDebugString()));
    if (std::find(shard1.begin(), shard1.end(), i) != shard1.end()) continue;
    ExpectRefusedOnShard0(call.response.results(i));
    // No back-off makes room for nine operations in a mailbox of eight: the message says so.
    EXPECT_THAT(call.response.results(i).message(),
                HasSubstr("(9 operations) is larger than its mailbox (capacity 8 operations)"));
    EXPECT_THAT(call.response.results(i).message(), HasSubstr("split the call"));
  }
  EXPECT_EQ(call.response.results(1).ShortDebugString(), Result(kOk, 105).ShortDebugString());
  EXPECT_EQ(call.response.results(6).ShortDebugString(), Result(kOk, 93).ShortDebugString());
  EXPECT_EQ(call.response.results(10).ShortDebugString(), Result(kOk, 105).ShortDebugString());
  const int64_t pushback = PushbackMs(call.pushback);
  EXPECT_GE(pushback, kMinPushback.count()) << call.pushback.value_or("(absent)");
  EXPECT_LE(pushback, kMaxPushback.count());
  EXPECT_EQ(BalanceOf(*stub_, s0a_), 100);
  EXPECT_EQ(BalanceOf(*stub_, s0b_), 100);
  EXPECT_EQ(BalanceCode(*stub_, s0new_), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(BalanceOf(*stub_, s1a_), 105);
  EXPECT_EQ(BalanceOf(*stub_, s1b_), 93);
  // The refused request_id was not recorded: it applies now (memory only keeps no ids anyway).
  ApplyCall retry = Apply(*stub_, {DepositOp(s0b_, 5, "p")});
  ASSERT_TRUE(retry.status.ok());
  ASSERT_EQ(retry.response.results_size(), 1);
  EXPECT_EQ(retry.response.results(0).ShortDebugString(), Result(kOk, 105).ShortDebugString());
}

TEST_F(ApplySheddingTest, APartExactlyAtTheMailboxCapacityIsApplied) {
  std::vector<v1::ApplyOperation> operations;
  std::vector<v1::ApplyResult> expected;
  for (int i = 1; i <= static_cast<int>(kCapacity); ++i) {
    operations.push_back(DepositOp(s0a_, 1));
    expected.push_back(Result(kOk, 100 + i));
  }
  operations.push_back(DepositOp(s1a_, 1));
  expected.push_back(Result(kOk, 101));
  ApplyCall call = Apply(*stub_, operations);
  ASSERT_TRUE(call.status.ok()) << call.status.error_message();
  ExpectResults(call.response, expected, operations);
  EXPECT_EQ(BalanceOf(*stub_, s0a_), 100 + static_cast<int64_t>(kCapacity));
}

// A transfer belongs to its source's part: refused with shard 0's part, while a transfer of shard
// 1's part still credits an account on shard 0.
TEST_F(ApplySheddingTest, ATransferInARefusedPartMovesNothing) {
  std::vector<v1::ApplyOperation> operations;
  for (size_t i = 0; i < kCapacity; ++i) operations.push_back(DepositOp(s0a_, 1));
  operations.push_back(TransferOp("shed-out", s0b_, s1a_, 10));  // The ninth on shard 0.
  operations.push_back(TransferOp("shed-in", s1b_, s0b_, 20));
  ApplyCall call = Apply(*stub_, operations);
  ASSERT_TRUE(call.status.ok()) << call.status.error_message();
  ASSERT_EQ(call.response.results_size(), static_cast<int>(operations.size()));
  for (size_t i = 0; i <= kCapacity; ++i) {
    SCOPED_TRACE(absl::StrCat("operation ", i, ": ", operations[i].ShortDebugString()));
    ExpectRefusedOnShard0(call.response.results(static_cast<int>(i)));
  }
  EXPECT_EQ(call.response.results(kCapacity + 1).ShortDebugString(),
            Result(kOk, 80, false, 120).ShortDebugString());
  EXPECT_GE(PushbackMs(call.pushback), kMinPushback.count());
  EXPECT_EQ(BalanceOf(*stub_, s0a_), 100);
  EXPECT_EQ(BalanceOf(*stub_, s0b_), 120);
  EXPECT_EQ(BalanceOf(*stub_, s1a_), 100);
  EXPECT_EQ(BalanceOf(*stub_, s1b_), 80);
}

// A part is taken only when all of it fits beside what its shard already holds: with one
// operation queued behind a held one in shard 0 (capacity 8; without a journal the held one has
// left the mailbox), a part of 8 is refused whole, nothing of it applied, and a part of 7 is
// taken and applied once the shard moves on.
TEST(ApplyAdmissionTest, APartIsRefusedWholeWhenOnlySomeOfItFits) {
  constexpr int64_t kHolderAmount = 1'000'000;
  constexpr int kCapacity = 8;
  testing_util::Event held;
  testing_util::Event release;
  ServerOptions options = ApplyOptions();
  options.router.shard.mailbox_capacity = kCapacity;
  options.router.shard.inline_execution = false;
  options.router.shard.max_batch = 1;
  ServerTestHooks hooks;
  hooks.router.shard.before_handle = [&held, &release](const Message& message) {
    if (testing_util::DepositAmount(message) == kHolderAmount) {
      held.Notify();
      release.WaitForNotification();
    }
  };
  TestServer server(options, hooks);
  absl::Cleanup always_release = [&] { release.Notify(); };
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  const std::string s0a = OnShard("room-a", 0);
  const std::string s0b = OnShard("room-b", 0);
  const std::string s1 = OnShard("room-c", 1);
  for (const std::string& account : {s0a, s0b, s1}) {
    ASSERT_TRUE(Deposit(*stub, account, 100).status.ok());
  }

  // The holder: one operation of shard 0, accepted and held unanswered.
  v1::DepositRequest holder_request;
  holder_request.set_account_id(s0a);
  holder_request.set_amount(kHolderAmount);
  v1::DepositResponse holder_response;
  grpc::ClientContext holder_context;
  holder_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  grpc::Status holder_status;
  testing_util::Event holder_done;
  stub->async()->Deposit(&holder_context, &holder_request, &holder_response,
                         [&](grpc::Status status) {
                           holder_status = std::move(status);
                           holder_done.Notify();
                         });
  ASSERT_TRUE(testing_util::WaitUntil([&] { return held.HasBeenNotified(); }, "the holder runs"));
  // One operation queued behind it, which takes one of the eight places.
  v1::DepositRequest queued_request;
  queued_request.set_account_id(s0a);
  queued_request.set_amount(5);
  v1::DepositResponse queued_response;
  grpc::ClientContext queued_context;
  queued_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  grpc::Status queued_status;
  testing_util::Event queued_done;
  stub->async()->Deposit(&queued_context, &queued_request, &queued_response,
                         [&](grpc::Status status) {
                           queued_status = std::move(status);
                           queued_done.Notify();
                         });
  const Shard& shard0 = server.server().router().shard(0);
  ASSERT_TRUE(testing_util::WaitUntil([&] { return shard0.MailboxDepth() == 1; },
                                      "one operation queued on shard 0"));

  // Eight more do not fit beside it: refused whole, at once, while shard 1's part applies.
  std::vector<v1::ApplyOperation> too_many;
  for (int i = 0; i < kCapacity; ++i) too_many.push_back(DepositOp(s0b, 1));
  too_many.push_back(DepositOp(s1, 5));
  ApplyCall refused = Apply(*stub, too_many);
  EXPECT_FALSE(release.HasBeenNotified());
  ASSERT_TRUE(refused.status.ok()) << refused.status.error_message();
  ASSERT_EQ(refused.response.results_size(), kCapacity + 1);
  for (int i = 0; i < kCapacity; ++i) {
    SCOPED_TRACE(absl::StrCat("operation ", i));
    EXPECT_EQ(refused.response.results(i).code(), kResourceExhausted);
    EXPECT_THAT(refused.response.results(i).message(), HasSubstr("shard 0"));
  }
  EXPECT_EQ(refused.response.results(kCapacity).ShortDebugString(),
            Result(kOk, 105).ShortDebugString());
  EXPECT_GE(PushbackMs(refused.pushback), kMinPushback.count());

  // Seven fit beside it: taken, and answered once the holder is done.
  v1::ApplyRequest fits_request;
  for (int i = 0; i < kCapacity - 1; ++i) *fits_request.add_operations() = DepositOp(s0b, 1);
  v1::ApplyResponse fits_response;
  grpc::ClientContext fits_context;
  fits_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  grpc::Status fits_status;
  testing_util::Event fits_done;
  stub->async()->Apply(&fits_context, &fits_request, &fits_response, [&](grpc::Status status) {
    fits_status = std::move(status);
    fits_done.Notify();
  });
  release.Notify();
  holder_done.WaitForNotification();
  queued_done.WaitForNotification();
  fits_done.WaitForNotification();
  ASSERT_TRUE(holder_status.ok()) << holder_status.error_message();
  ASSERT_TRUE(queued_status.ok()) << queued_status.error_message();
  ASSERT_TRUE(fits_status.ok()) << fits_status.error_message();
  ASSERT_EQ(fits_response.results_size(), kCapacity - 1);
  for (int i = 0; i < kCapacity - 1; ++i) {
    EXPECT_EQ(fits_response.results(i).ShortDebugString(), Result(kOk, 101 + i).ShortDebugString())
        << "operation " << i;
  }
  EXPECT_EQ(BalanceOf(*stub, s0a), 100 + kHolderAmount + 5);
  EXPECT_EQ(BalanceOf(*stub, s0b), 100 + kCapacity - 1);
  EXPECT_EQ(BalanceOf(*stub, s1), 105);
}

// A part whose caller gave up while it waited in the mailbox is skipped, every operation of it,
// as a unary call is (ledger_service_test.cc's CallerGone test, whose one wait on time this
// copies for the same reason).
TEST(ApplyAdmissionTest, APartWhoseCallerGaveUpIsSkipped) {
  testing_util::Event held;
  testing_util::Event release;
  ServerOptions options = ApplyOptions();
  options.router.shard.inline_execution = false;
  options.router.shard.max_batch = 1;
  ServerTestHooks hooks;
  hooks.router.shard.before_handle = [&held, &release](const Message&) {
    if (!held.HasBeenNotified()) {
      held.Notify();
      release.WaitForNotification();
    }
  };
  const std::string account = OnShard("gone", 0);
  v1::DepositRequest first;
  first.set_account_id(account);
  first.set_amount(1);
  v1::DepositResponse first_response;
  auto first_context = testing_util::ContextWithDeadline();
  testing_util::Event first_done;
  grpc::Status first_status;
  v1::ApplyRequest part;
  for (int i = 0; i < 3; ++i) *part.add_operations() = DepositOp(account, 1000);
  v1::ApplyResponse part_response;
  constexpr std::chrono::seconds kPartTimeout{1};
  auto part_context = testing_util::ContextWithDeadline(kPartTimeout);
  testing_util::Event part_done;
  grpc::Status part_status;
  TestServer server(options, hooks);
  absl::Cleanup always_release = [&] { release.Notify(); };
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  const Shard& shard = server.server().router().shard(0);
  stub->async()->Deposit(first_context.get(), &first, &first_response, [&](grpc::Status status) {
    first_status = std::move(status);
    first_done.Notify();
  });
  ASSERT_TRUE(testing_util::WaitUntil([&] { return held.HasBeenNotified(); }, "the first runs"));
  stub->async()->Apply(part_context.get(), &part, &part_response, [&](grpc::Status status) {
    part_status = std::move(status);
    part_done.Notify();
  });
  ASSERT_TRUE(testing_util::WaitUntil([&] { return shard.MailboxDepth() == 1; },
                                      "the part is queued behind the held deposit"));
  const auto queued_by = std::chrono::steady_clock::now();
  ASSERT_TRUE(
      testing_util::WaitUntil([&] { return part_done.HasBeenNotified(); }, "the caller gives up"));
  EXPECT_EQ(part_status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // NOTE: the one wait on time, a lower bound only: see ledger_service_test.cc.
  std::this_thread::sleep_until(queued_by + kPartTimeout + std::chrono::seconds(1));
  release.Notify();
  first_done.WaitForNotification();
  EXPECT_TRUE(first_status.ok()) << first_status.error_message();
  // Balance queues behind the part, so it sees whatever the shard did with it.
  EXPECT_EQ(BalanceOf(*stub, account), 1);
  EXPECT_GE(server.server().metrics().shard(0).expired(), 1u);
}

TEST(ApplyDurabilityTest, ARestartKeepsEveryAppliedOperationAndItsHistoryInOrder) {
  ScratchLedger dir;
  auto server = std::make_unique<TestServer>(ApplyOptions(dir.path()));
  std::unique_ptr<v1::Ledger::Stub> stub = server->NewStub();
  const std::string a = OnShard("keep-a", 0);
  const std::string b = OnShard("keep-b", 0);
  const std::string c = OnShard("keep-c", 1);
  const std::vector<v1::ApplyOperation> operations = {
      DepositOp(a, 100, "h1"),         DepositOp(c, 70, "h2"),           DepositOp(a, 50, "h3"),
      WithdrawOp(a, 30, "h4"),         WithdrawOp(a, 1000, "h5"),        DepositOp(b, 5, "h6"),
      TransferOp("ht-same", a, b, 20), TransferOp("ht-cross", a, c, 10), BalanceOp(a),
  };
  ApplyCall call = Apply(*stub, operations);
  ASSERT_TRUE(call.status.ok()) << call.status.error_message();
  ExpectOutcomes(call.response,
                 {Result(kOk, 100), Result(kOk, 70), Result(kOk, 150), Result(kOk, 120),
                  Result(kFailedPrecondition), Result(kOk, 5), Result(kOk, 100, false, 25),
                  Result(kOk, 90, false, 80), Result(kOk, 90)},
                 operations);
  stub.reset();
  server.reset();  // Closes the store, so that the next server can open it.
  server = std::make_unique<TestServer>(ApplyOptions(dir.path()));
  stub = server->NewStub();
  EXPECT_EQ(BalanceOf(*stub, a), 90);
  EXPECT_EQ(BalanceOf(*stub, b), 25);
  EXPECT_EQ(BalanceOf(*stub, c), 80);

  testing_util::HistoryResult history = History(*stub, a);
  ASSERT_TRUE(history.status.ok()) << history.status.error_message();
  ASSERT_EQ(history.response.entries_size(), 5);  // Newest first; the refused withdraw is absent.
  struct Entry {
    v1::Operation operation;
    int64_t amount;
    int64_t balance_after;
    std::string request_id;
    std::string transfer_id;
  };
  const std::vector<Entry> expected = {
      {v1::OPERATION_TRANSFER_OUT, 10, 90, "", "ht-cross"},
      {v1::OPERATION_TRANSFER_OUT, 20, 100, "", "ht-same"},
      {v1::OPERATION_WITHDRAW, 30, 120, "h4", ""},
      {v1::OPERATION_DEPOSIT, 50, 150, "h3", ""},
      {v1::OPERATION_DEPOSIT, 100, 100, "h1", ""},
  };
  for (int i = 0; i < 5; ++i) {
    SCOPED_TRACE(absl::StrCat("entry ", i));
    const v1::HistoryEntry& entry = history.response.entries(i);
    EXPECT_EQ(entry.sequence(), static_cast<uint64_t>(5 - i));
    EXPECT_EQ(entry.operation(), expected[i].operation);
    EXPECT_EQ(entry.amount(), expected[i].amount);
    EXPECT_EQ(entry.balance_after(), expected[i].balance_after);
    EXPECT_EQ(entry.request_id(), expected[i].request_id);
    EXPECT_EQ(entry.transfer_id(), expected[i].transfer_id);
  }
  testing_util::HistoryResult credited = History(*stub, c);
  ASSERT_TRUE(credited.status.ok());
  ASSERT_EQ(credited.response.entries_size(), 2);
  EXPECT_EQ(credited.response.entries(0).operation(), v1::OPERATION_TRANSFER_IN);
  EXPECT_EQ(credited.response.entries(0).balance_after(), 80);
  EXPECT_EQ(credited.response.entries(1).request_id(), "h2");

  // The recorded ids survived too: the same call again applies nothing new.
  ApplyCall replay = Apply(*stub, operations);
  ASSERT_TRUE(replay.status.ok()) << replay.status.error_message();
  ExpectOutcomes(replay.response,
                 {Result(kOk, 100, true), Result(kOk, 70, true), Result(kOk, 150, true),
                  Result(kOk, 120, true), Result(kFailedPrecondition), Result(kOk, 5, true),
                  Result(kOk, 100, true, 25), Result(kOk, 90, true, 80), Result(kOk, 90)},
                 operations);
  EXPECT_EQ(BalanceOf(*stub, a), 90);
  EXPECT_EQ(History(*stub, a).response.entries_size(), 5);
}

// The largest call, durable: 8,192 deposits over 1,000 accounts on both shards. Each result is
// the account's running sum in request order; each final balance is the sum of its deposits.
TEST(ApplyDurabilityTest, ACallOf8192DepositsOver1000AccountsAppliesEveryOne) {
  ScratchLedger dir;
  TestServer server(ApplyOptions(dir.path()));
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  constexpr int kAccounts = 1000;
  std::vector<int64_t> sums(kAccounts, 0);
  std::vector<v1::ApplyOperation> operations;
  std::vector<v1::ApplyResult> expected;
  for (int i = 0; i < kMaxOperations; ++i) {
    const int account = (i * 7919) % kAccounts;
    const int64_t amount = 1 + i % 97;
    operations.push_back(DepositOp(absl::StrCat("bulk-", account), amount, absl::StrCat("d", i)));
    expected.push_back(Result(kOk, sums[account] += amount));
  }
  ApplyCall call = Apply(*stub, operations);
  ASSERT_TRUE(call.status.ok()) << call.status.error_message();
  ExpectOutcomes(call.response, expected, operations);
  for (int account = 0; account < kAccounts; ++account) {
    EXPECT_EQ(BalanceOf(*stub, absl::StrCat("bulk-", account)), sums[account]) << account;
  }
}

// What the results of the concurrent calls say happened to one account.
struct AccountAccount {
  int64_t applied_delta = 0;
  int applied = 0;
  // The balance each applied operation reported, by request_id or transfer_id (and side).
  std::map<std::string, int64_t> balance_after;
};

// Four clients, each 20 calls of 500 mixed operations over 200 accounts on both shards: every
// balance is what its applied results add up to, the total is deposits minus withdrawals, and
// each account's durable History holds exactly the applied operations with the balances the
// results reported.
TEST(ApplyConcurrencyTest, ConcurrentCallsAccountForEveryBalanceExactly) {
  ScratchLedger dir;
  TestServer server(ApplyOptions(dir.path()));
  constexpr int kAccounts = 200;
  constexpr int kThreads = 4;
  constexpr int kCalls = 20;
  constexpr int kOperations = 500;
  // Low, so that the overdraft rule refuses some withdrawals and transfers.
  constexpr int64_t kOpening = 100;
  std::vector<std::string> accounts;
  {
    std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
    std::vector<v1::ApplyOperation> open;
    for (int i = 0; i < kAccounts; ++i) {
      accounts.push_back(absl::StrCat("conc-", i));
      open.push_back(DepositOp(accounts.back(), kOpening, "open"));
    }
    ApplyCall opened = Apply(*stub, open);
    ASSERT_TRUE(opened.status.ok()) << opened.status.error_message();
    for (const v1::ApplyResult& result : opened.response.results()) ASSERT_EQ(result.code(), kOk);
  }
  // Per thread: its operations and their results, checked once all threads are done.
  std::vector<std::vector<v1::ApplyOperation>> sent(kThreads);
  std::vector<std::vector<v1::ApplyResult>> answered(kThreads);
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
      std::mt19937 random(1600 + t);
      for (int c = 0; c < kCalls; ++c) {
        std::vector<v1::ApplyOperation> operations;
        for (int i = 0; i < kOperations; ++i) {
          const std::string id = absl::StrCat("c", t, "-", c, "-", i);
          const size_t from = random() % kAccounts;
          const int64_t amount = 1 + static_cast<int64_t>(random() % 100);
          const uint32_t kind = random() % 20;
          if (kind < 8) {
            operations.push_back(DepositOp(accounts[from], amount, id));
          } else if (kind < 15) {
            operations.push_back(WithdrawOp(accounts[from], amount, id));
          } else {
            const size_t to = (from + 1 + random() % (kAccounts - 1)) % kAccounts;
            operations.push_back(TransferOp(id, accounts[from], accounts[to], amount));
          }
        }
        ApplyCall call = Apply(*stub, operations);
        if (!call.status.ok() || call.response.results_size() != kOperations) {
          failures[t] = absl::StrCat("call ", c, ": ", call.status.error_message(), " (",
                                     call.response.results_size(), " results)");
          return;
        }
        sent[t].insert(sent[t].end(), operations.begin(), operations.end());
        answered[t].insert(answered[t].end(), call.response.results().begin(),
                           call.response.results().end());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::string& failure : failures) ASSERT_THAT(failure, IsEmpty());

  std::map<std::string, AccountAccount> books;
  int64_t deposited = 0;
  int64_t withdrawn = 0;
  int refused = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (size_t i = 0; i < sent[t].size(); ++i) {
      const v1::ApplyOperation& op = sent[t][i];
      const v1::ApplyResult& result = answered[t][i];
      if (result.code() != kOk) {
        // Only the overdraft rule may refuse: every account is open and every input valid.
        EXPECT_EQ(result.code(), kFailedPrecondition)
            << op.ShortDebugString() << ": " << result.message();
        ++refused;
        continue;
      }
      EXPECT_FALSE(result.replayed()) << op.ShortDebugString();
      if (op.has_deposit()) {
        AccountAccount& book = books[op.deposit().account_id()];
        book.applied_delta += op.deposit().amount();
        ++book.applied;
        book.balance_after[op.deposit().request_id()] = result.balance();
        deposited += op.deposit().amount();
      } else if (op.has_withdraw()) {
        AccountAccount& book = books[op.withdraw().account_id()];
        book.applied_delta -= op.withdraw().amount();
        ++book.applied;
        book.balance_after[op.withdraw().request_id()] = result.balance();
        withdrawn += op.withdraw().amount();
      } else {
        const v1::TransferRequest& transfer = op.transfer();
        AccountAccount& from = books[transfer.from_account_id()];
        from.applied_delta -= transfer.amount();
        ++from.applied;
        from.balance_after["out:" + transfer.transfer_id()] = result.balance();
        AccountAccount& to = books[transfer.to_account_id()];
        to.applied_delta += transfer.amount();
        ++to.applied;
        to.balance_after["in:" + transfer.transfer_id()] = result.to_balance();
      }
    }
  }
  EXPECT_GT(refused, 0);  // The mix does overdraw some accounts, or the test proves less.
  std::unique_ptr<v1::Ledger::Stub> stub = server.NewStub();
  int64_t total = 0;
  for (const std::string& account : accounts) {
    SCOPED_TRACE(account);
    const AccountAccount& book = books[account];
    const int64_t balance = BalanceOf(*stub, account);
    EXPECT_EQ(balance, kOpening + book.applied_delta);
    total += balance;
    // History, newest first, paged: one entry per applied operation plus the opening deposit,
    // each with the balance its result reported.
    int entries = 0;
    std::string page_token;
    for (int page = 0; page < 10; ++page) {
      testing_util::HistoryResult history = History(*stub, account, 1000, page_token);
      ASSERT_TRUE(history.status.ok()) << history.status.error_message();
      for (const v1::HistoryEntry& entry : history.response.entries()) {
        ++entries;
        std::string key = entry.request_id();
        if (entry.operation() == v1::OPERATION_TRANSFER_OUT) key = "out:" + entry.transfer_id();
        if (entry.operation() == v1::OPERATION_TRANSFER_IN) key = "in:" + entry.transfer_id();
        if (key == "open") continue;
        const auto reported = book.balance_after.find(key);
        if (reported == book.balance_after.end()) {
          ADD_FAILURE() << "History holds an operation no result reported as applied: "
                        << entry.ShortDebugString();
          continue;
        }
        EXPECT_EQ(entry.balance_after(), reported->second) << key;
      }
      page_token = history.response.next_page_token();
      if (page_token.empty()) break;
    }
    EXPECT_EQ(entries, book.applied + 1);
  }
  EXPECT_EQ(total, kOpening * kAccounts + deposited - withdrawn);
}

}  // namespace
}  // namespace ledger
