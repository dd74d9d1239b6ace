#include "client/batch_call.h"

#include "base/check.h"

namespace ledger {

void AddApplyOperation(const PlannedCall& plan, const std::string& id,
                       const std::vector<std::string>& names, v1::ApplyRequest* request) {
  v1::ApplyOperation* operation = request->add_operations();
  const std::string& account = names[plan.account];
  switch (plan.op) {
    case CallKind::kDeposit: {
      v1::DepositRequest* deposit = operation->mutable_deposit();
      deposit->set_account_id(account);
      deposit->set_amount(plan.amount);
      deposit->set_request_id(id);
      return;
    }
    case CallKind::kWithdraw: {
      v1::WithdrawRequest* withdraw = operation->mutable_withdraw();
      withdraw->set_account_id(account);
      withdraw->set_amount(plan.amount);
      withdraw->set_request_id(id);
      return;
    }
    case CallKind::kBalance:
      operation->mutable_balance()->set_account_id(account);
      return;
    case CallKind::kTransfer: {
      v1::TransferRequest* transfer = operation->mutable_transfer();
      transfer->set_transfer_id(id);
      transfer->set_from_account_id(account);
      transfer->set_to_account_id(names[plan.to_account]);
      transfer->set_amount(plan.amount);
      return;
    }
  }
  LEDGER_CHECK(false);  // Only a value cast from outside the enum.
}

std::vector<grpc::StatusCode> ApplyOperationCodes(const grpc::Status& status,
                                                  const v1::ApplyResponse& response, size_t count) {
  if (!status.ok()) return std::vector<grpc::StatusCode>(count, status.error_code());
  if (static_cast<size_t>(response.results_size()) != count) {
    return std::vector<grpc::StatusCode>(count, grpc::StatusCode::UNKNOWN);
  }
  std::vector<grpc::StatusCode> codes;
  codes.reserve(count);
  for (const v1::ApplyResult& result : response.results()) {
    // A code outside gRPC's range says nothing certain either.
    const int32_t code = result.code();
    codes.push_back(code >= 0 && code <= grpc::StatusCode::UNAUTHENTICATED
                        ? static_cast<grpc::StatusCode>(code)
                        : grpc::StatusCode::UNKNOWN);
  }
  return codes;
}

std::vector<CallOutcome> ApplyOperationOutcomes(const CallOutcome& call,
                                                const v1::ApplyResponse& response, size_t count) {
  if (call.code != grpc::StatusCode::OK) return std::vector<CallOutcome>(count, call);
  const std::vector<grpc::StatusCode> codes =
      ApplyOperationCodes(grpc::Status::OK, response, count);
  const bool one_result_each = static_cast<size_t>(response.results_size()) == count;
  std::vector<CallOutcome> outcomes;
  outcomes.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    // UNKNOWN: no result of its own, or a code outside gRPC's range: the outcome is not known.
    outcomes.push_back(one_result_each && codes[i] != grpc::StatusCode::UNKNOWN
                           ? ReadApplyResult(response.results(static_cast<int>(i)))
                           : ReadCallOutcome(grpc::Status(codes[i], "")));
  }
  return outcomes;
}

}  // namespace ledger
