// The checks of an Apply call before anything is routed: the size bound at its limit and one past
// it, each operation validated exactly as its own RPC validates it (same code, same words, same
// facts), an operation that sets no field, and bytes that are not an ApplyRequest.
#include "server/request_validation.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "gtest/gtest.h"
#include "ledger/v1/ledger.pb.h"
#include "tests/server/apply_operations.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;
using testing_util::BalanceOp;
using testing_util::DepositOp;
using testing_util::TransferOp;
using testing_util::WithdrawOp;

grpc::ByteBuffer BytesOf(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// What the operation's own RPC's validation answers, from the request's bytes as the RPC gets
// them; `facts` as it fills them.
template <typename Request>
grpc::Status UnaryCheck(const Request& request, Op op, bool require_request_id, Request& parsed,
                        CallFacts& facts) {
  return ParseAndValidate(BytesOf(request.SerializeAsString()), op, require_request_id, parsed,
                          facts);
}

struct Case {
  std::string name;
  v1::ApplyOperation operation;
  bool require_request_id = false;
  grpc::StatusCode code = grpc::StatusCode::OK;
};

TEST(ApplyValidationTest, EachOperationIsCheckedExactlyAsItsOwnRpcChecksIt) {
  const std::vector<Case> cases = {
      {"deposit", DepositOp("acc", 5, "r1"), false, grpc::StatusCode::OK},
      {"deposit, bad account id", DepositOp("no spaces", 5, ""), false,
       grpc::StatusCode::INVALID_ARGUMENT},
      {"deposit, empty account id", DepositOp("", 5, ""), false,
       grpc::StatusCode::INVALID_ARGUMENT},
      {"deposit, account id of 129 bytes", DepositOp(std::string(129, 'a'), 5, ""), false,
       grpc::StatusCode::INVALID_ARGUMENT},
      {"deposit, account id of 128 bytes", DepositOp(std::string(128, 'a'), 5, ""), false,
       grpc::StatusCode::OK},
      {"deposit, amount 0", DepositOp("acc", 0, ""), false, grpc::StatusCode::INVALID_ARGUMENT},
      {"deposit, amount 1", DepositOp("acc", 1, ""), false, grpc::StatusCode::OK},
      {"deposit, negative amount", DepositOp("acc", -1, ""), false,
       grpc::StatusCode::INVALID_ARGUMENT},
      {"deposit, request_id of 129 bytes", DepositOp("acc", 5, std::string(129, 'r')), false,
       grpc::StatusCode::INVALID_ARGUMENT},
      {"deposit, request_id of 128 bytes", DepositOp("acc", 5, std::string(128, 'r')), false,
       grpc::StatusCode::OK},
      {"deposit, request_id not printable", DepositOp("acc", 5, "r\x01"), false,
       grpc::StatusCode::INVALID_ARGUMENT},
      {"deposit without request_id, required", DepositOp("acc", 5, ""), true,
       grpc::StatusCode::INVALID_ARGUMENT},
      {"deposit with request_id, required", DepositOp("acc", 5, "r1"), true, grpc::StatusCode::OK},
      {"withdraw", WithdrawOp("acc", 5, ""), false, grpc::StatusCode::OK},
      {"withdraw, amount 0", WithdrawOp("acc", 0, "r"), false, grpc::StatusCode::INVALID_ARGUMENT},
      {"withdraw without request_id, required", WithdrawOp("acc", 5, ""), true,
       grpc::StatusCode::INVALID_ARGUMENT},
      {"balance", BalanceOp("acc"), false, grpc::StatusCode::OK},
      {"balance, required ids do not apply", BalanceOp("acc"), true, grpc::StatusCode::OK},
      {"balance, bad account id", BalanceOp("a/b"), false, grpc::StatusCode::INVALID_ARGUMENT},
      {"transfer", TransferOp("t1", "a", "b", 5), false, grpc::StatusCode::OK},
      {"transfer, required ids are there anyway", TransferOp("t1", "a", "b", 5), true,
       grpc::StatusCode::OK},
      {"transfer, no transfer_id", TransferOp("", "a", "b", 5), false,
       grpc::StatusCode::INVALID_ARGUMENT},
      {"transfer, same account", TransferOp("t1", "a", "a", 5), false,
       grpc::StatusCode::INVALID_ARGUMENT},
      {"transfer, amount 0", TransferOp("t1", "a", "b", 0), false,
       grpc::StatusCode::INVALID_ARGUMENT},
      {"transfer, bad destination", TransferOp("t1", "a", "b c", 5), false,
       grpc::StatusCode::INVALID_ARGUMENT},
  };
  for (const Case& test : cases) {
    SCOPED_TRACE(test.name);
    CallFacts facts;
    const grpc::Status got = ValidateApplyOperation(test.operation, test.require_request_id, facts);
    EXPECT_EQ(got.error_code(), test.code) << got.error_message();
    // The unary path's facts view its parsed request, so the requests outlive the comparisons.
    CallFacts unary_facts;
    grpc::Status unary;
    v1::DepositRequest parsed_deposit;
    v1::WithdrawRequest parsed_withdraw;
    v1::BalanceRequest parsed_balance;
    const v1::ApplyOperation& op = test.operation;
    switch (op.operation_case()) {
      case v1::ApplyOperation::kDeposit:
        unary = UnaryCheck(op.deposit(), Op::kDeposit, test.require_request_id, parsed_deposit,
                           unary_facts);
        break;
      case v1::ApplyOperation::kWithdraw:
        unary = UnaryCheck(op.withdraw(), Op::kWithdraw, test.require_request_id, parsed_withdraw,
                           unary_facts);
        break;
      case v1::ApplyOperation::kBalance:
        unary = UnaryCheck(op.balance(), Op::kBalance, test.require_request_id, parsed_balance,
                           unary_facts);
        break;
      case v1::ApplyOperation::kTransfer:
        unary = ValidateTransferRequest(op.transfer(), unary_facts);
        break;
      case v1::ApplyOperation::OPERATION_NOT_SET:
        FAIL() << "every case sets an operation";
    }
    EXPECT_EQ(got.error_code(), unary.error_code());
    EXPECT_EQ(got.error_message(), unary.error_message());
    if (!got.ok()) continue;
    // The facts the shard gets are the ones the unary call would give it.
    EXPECT_EQ(facts.op, unary_facts.op);
    EXPECT_EQ(facts.account_id, unary_facts.account_id);
    EXPECT_EQ(facts.amount, unary_facts.amount);
    EXPECT_EQ(facts.request_id, unary_facts.request_id);
    EXPECT_EQ(facts.counterparty, unary_facts.counterparty);
  }
}

TEST(ApplyValidationTest, TheFactsViewTheOperationsOwnFields) {
  const v1::ApplyOperation transfer = TransferOp("t9", "from-acc", "to-acc", 42);
  CallFacts facts;
  ASSERT_TRUE(ValidateApplyOperation(transfer, false, facts).ok());
  EXPECT_EQ(facts.op, Op::kTransfer);
  EXPECT_EQ(facts.account_id, "from-acc");
  EXPECT_EQ(facts.counterparty, "to-acc");
  EXPECT_EQ(facts.request_id, "t9");
  EXPECT_EQ(facts.amount, 42);
  const v1::ApplyOperation withdraw = WithdrawOp("w-acc", 7, "w1");
  ASSERT_TRUE(ValidateApplyOperation(withdraw, false, facts).ok());
  EXPECT_EQ(facts.op, Op::kWithdraw);
  EXPECT_EQ(facts.account_id, "w-acc");
  EXPECT_EQ(facts.amount, 7);
  EXPECT_EQ(facts.request_id, "w1");
}

TEST(ApplyValidationTest, AnOperationThatSetsNoFieldIsInvalidAndSaysWhichFieldsThereAre) {
  CallFacts facts;
  const grpc::Status status = ValidateApplyOperation(v1::ApplyOperation(), false, facts);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("none of deposit, withdraw, balance, transfer"));
}

TEST(ApplyValidationTest, TheSizeBoundIs8192OperationsAtTheLimitAndOnePast) {
  v1::ApplyRequest request;
  EXPECT_TRUE(ValidateApplySize(request).ok());
  for (int i = 0; i < kMaxApplyOperations; ++i) *request.add_operations() = BalanceOp("acc");
  EXPECT_EQ(kMaxApplyOperations, 8192);
  EXPECT_TRUE(ValidateApplySize(request).ok());
  *request.add_operations() = BalanceOp("acc");
  const grpc::Status status = ValidateApplySize(request);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("8192"));
  EXPECT_THAT(status.error_message(), HasSubstr("8193"));
}

TEST(ApplyValidationTest, BytesThatAreNotAnApplyRequestAreInvalid) {
  v1::ApplyRequest request;
  // Truncated: an operation announced as 5 bytes long, with 3.
  grpc::Status truncated = ParseRequest(BytesOf(std::string("\x0a\x05\x0a\x03\x0a", 5)), request);
  EXPECT_EQ(truncated.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_FALSE(truncated.error_message().empty());
  // Well formed, but a deposit's account_id is not UTF-8 (proto3 strings must be).
  const std::string not_utf8("\x0a\x05\x0a\x03\x0a\x01\xff", 7);
  grpc::Status bad_string = ParseRequest(BytesOf(not_utf8), request);
  EXPECT_EQ(bad_string.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // The same bytes with an ASCII id parse, into one deposit.
  const std::string ascii("\x0a\x05\x0a\x03\x0a\x01\x61", 7);
  ASSERT_TRUE(ParseRequest(BytesOf(ascii), request).ok());
  ASSERT_EQ(request.operations_size(), 1);
  EXPECT_EQ(request.operations(0).deposit().account_id(), "a");
}

}  // namespace
}  // namespace ledger
