// One ApplyOperation of each kind, built from its fields, for the tests that write Apply calls.
#ifndef LEDGER_TESTS_SERVER_APPLY_OPERATIONS_H_
#define LEDGER_TESTS_SERVER_APPLY_OPERATIONS_H_

#include <cstdint>
#include <string>

#include "ledger/v1/ledger.pb.h"

namespace ledger::testing_util {

inline v1::ApplyOperation DepositOp(const std::string& account, int64_t amount,
                                    const std::string& request_id = "") {
  v1::ApplyOperation op;
  op.mutable_deposit()->set_account_id(account);
  op.mutable_deposit()->set_amount(amount);
  op.mutable_deposit()->set_request_id(request_id);
  return op;
}

inline v1::ApplyOperation WithdrawOp(const std::string& account, int64_t amount,
                                     const std::string& request_id = "") {
  v1::ApplyOperation op;
  op.mutable_withdraw()->set_account_id(account);
  op.mutable_withdraw()->set_amount(amount);
  op.mutable_withdraw()->set_request_id(request_id);
  return op;
}

inline v1::ApplyOperation BalanceOp(const std::string& account) {
  v1::ApplyOperation op;
  op.mutable_balance()->set_account_id(account);
  return op;
}

inline v1::ApplyOperation TransferOp(const std::string& transfer_id, const std::string& from,
                                     const std::string& to, int64_t amount) {
  v1::ApplyOperation op;
  op.mutable_transfer()->set_transfer_id(transfer_id);
  op.mutable_transfer()->set_from_account_id(from);
  op.mutable_transfer()->set_to_account_id(to);
  op.mutable_transfer()->set_amount(amount);
  return op;
}

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_SERVER_APPLY_OPERATIONS_H_
