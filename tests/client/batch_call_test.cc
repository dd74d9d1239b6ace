#include "client/batch_call.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ledger {
namespace {

const std::vector<std::string> kNames = {"a", "b", "c"};

TEST(AddApplyOperationTest, EachKindCarriesItsAccountsAmountAndId) {
  v1::ApplyRequest request;
  AddApplyOperation({CallKind::kDeposit, 0, 0, 5}, "r-1", kNames, &request);
  AddApplyOperation({CallKind::kWithdraw, 1, 0, 7}, "r-2", kNames, &request);
  AddApplyOperation({CallKind::kBalance, 2, 0, 0}, "r-3", kNames, &request);
  AddApplyOperation({CallKind::kTransfer, 2, 0, 9}, "r-4", kNames, &request);
  ASSERT_EQ(request.operations_size(), 4);
  EXPECT_EQ(request.operations(0).deposit().account_id(), "a");
  EXPECT_EQ(request.operations(0).deposit().amount(), 5);
  EXPECT_EQ(request.operations(0).deposit().request_id(), "r-1");
  EXPECT_EQ(request.operations(1).withdraw().account_id(), "b");
  EXPECT_EQ(request.operations(1).withdraw().amount(), 7);
  EXPECT_EQ(request.operations(1).withdraw().request_id(), "r-2");
  EXPECT_EQ(request.operations(2).balance().account_id(), "c");
  EXPECT_EQ(request.operations(3).transfer().transfer_id(), "r-4");
  EXPECT_EQ(request.operations(3).transfer().from_account_id(), "c");
  EXPECT_EQ(request.operations(3).transfer().to_account_id(), "a");
  EXPECT_EQ(request.operations(3).transfer().amount(), 9);
}

v1::ApplyResponse ResponseWithCodes(const std::vector<int>& codes) {
  v1::ApplyResponse response;
  for (int code : codes) response.add_results()->set_code(code);
  return response;
}

TEST(ApplyOperationCodesTest, AnOkCallGivesEachOperationItsOwnResultsCode) {
  EXPECT_EQ(
      ApplyOperationCodes(grpc::Status::OK, ResponseWithCodes({0, 8, 9}), 3),
      (std::vector<grpc::StatusCode>{grpc::StatusCode::OK, grpc::StatusCode::RESOURCE_EXHAUSTED,
                                     grpc::StatusCode::FAILED_PRECONDITION}));
}

TEST(ApplyOperationCodesTest, AFailedCallGivesEveryOperationTheCallsCode) {
  for (grpc::StatusCode code :
       {grpc::StatusCode::DEADLINE_EXCEEDED, grpc::StatusCode::UNAVAILABLE,
        grpc::StatusCode::CANCELLED, grpc::StatusCode::RESOURCE_EXHAUSTED}) {
    EXPECT_EQ(ApplyOperationCodes(grpc::Status(code, "x"), v1::ApplyResponse(), 2),
              std::vector<grpc::StatusCode>(2, code))
        << code;
  }
}

TEST(ApplyOperationCodesTest, AWrongNumberOfResultsOrAnUnknownCodeLeavesTheOutcomeUnknown) {
  EXPECT_EQ(ApplyOperationCodes(grpc::Status::OK, ResponseWithCodes({0, 0}), 3),
            std::vector<grpc::StatusCode>(3, grpc::StatusCode::UNKNOWN));
  EXPECT_EQ(ApplyOperationCodes(grpc::Status::OK, ResponseWithCodes({0, 0, 0, 0}), 3),
            std::vector<grpc::StatusCode>(3, grpc::StatusCode::UNKNOWN));
  EXPECT_EQ(ApplyOperationCodes(grpc::Status::OK, ResponseWithCodes({17, -1}), 2),
            std::vector<grpc::StatusCode>(2, grpc::StatusCode::UNKNOWN));
}

}  // namespace
}  // namespace ledger
