// deposit, withdraw and transfer: the writes, each sent once the channel is connected, retried
// after an overload refusal with the same id, and explained when their outcome is unknown.
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/call_outcome.h"
#include "client/exit_codes.h"
#include "client/json_line.h"
#include "client/ledgerctl_commands.h"
#include "client/ledgerctl_output.pb.h"
#include "client/request_id.h"
#include "ledger/v1/ledger.grpc.pb.h"

namespace ledger::ctl {
namespace {

// What a failed deposit or withdraw means for the money, after the error line itself.
void ExplainWriteFailure(const LedgerctlSession& session, const grpc::Status& status,
                         const std::string& operation, const std::string& request_id) {
  if (session.options().json) return;
  if (ReadCallOutcome(status).effect != CallEffect::kUnknown) return;
  std::cerr << "ledgerctl: outcome unknown: the " << operation
            << " may have been applied. Retry it exactly like this, which applies it at most "
               "once:\n  "
            << session.RetryCommand("request_id", request_id) << "\n";
}

template <typename Request, typename Response, typename Call>
int Mutate(LedgerctlSession& session, const std::vector<char*>& args, Call call) {
  if (args.size() != 4) return UsageError(absl::StrCat(args[1], " takes ACCOUNT AMOUNT"));
  int64_t amount = 0;
  if (!absl::SimpleAtoi(args[3], &amount)) {
    return UsageError(
        absl::StrCat("AMOUNT must be an integer number of minor units; got ", args[3]));
  }
  Request request;
  request.set_account_id(args[2]);
  request.set_amount(amount);
  const std::string& given_request_id = session.options().request_id;
  request.set_request_id(given_request_id.empty() ? NewRequestId() : given_request_id);
  Response response;
  if (std::optional<int> unsent = session.RefuseUnconnected(args[1])) return *unsent;
  const grpc::Status status =
      session.CallHonouringPushback([&](v1::Ledger::Stub& stub, grpc::ClientContext* context) {
        return call(stub, context, request, &response);
      });
  if (!status.ok()) {
    const int exit_code = session.Failed(status);
    ExplainWriteFailure(session, status, args[1], request.request_id());
    return exit_code;
  }
  if (session.options().json) {
    ctl::WriteLine line;
    line.set_account_id(request.account_id());
    line.set_balance(response.balance());
    line.set_request_id(request.request_id());
    line.set_replayed(response.replayed());
    std::cout << JsonLine(line);
    return kExitOk;
  }
  std::cout << request.account_id() << ": " << response.balance();
  if (response.replayed()) {
    std::cout << " (replayed: the recorded result of an earlier " << args[1] << " with request_id "
              << request.request_id()
              << "; nothing was applied now, and the balance may have changed since)";
  }
  std::cout << "\n";
  return kExitOk;
}

// What a failed transfer means for the money, after the error line itself: how to settle an
// unknown outcome (GetTransfer, or a retry with the same transfer_id).
void ExplainTransferFailure(const LedgerctlSession& session, const grpc::Status& status,
                            const v1::TransferRequest& request) {
  if (session.options().json) return;
  const CallEffect effect = ReadCallOutcome(status).effect;
  if (effect != CallEffect::kUnknown && effect != CallEffect::kPending) return;
  if (effect == CallEffect::kPending) {
    std::cerr << "ledgerctl: the transfer is still pending: debited from "
              << request.from_account_id() << ", its credit to " << request.to_account_id()
              << " not yet confirmed; it ends COMMITTED or REFUSED on its own. See how with:\n  "
              << session.GetTransferCommand(request.transfer_id()) << "\n";
    return;
  }
  std::cerr << "ledgerctl: outcome unknown: the transfer may have been applied. Find out with:\n  "
            << session.GetTransferCommand(request.transfer_id())
            << "\nor retry it exactly like this, which moves the money at most once:\n  "
            << session.RetryCommand("transfer_id", request.transfer_id()) << "\n";
}

}  // namespace

int RunTransfer(LedgerctlSession& session, const std::vector<char*>& args) {
  if (args.size() != 5) return UsageError("transfer takes FROM TO AMOUNT");
  int64_t amount = 0;
  if (!absl::SimpleAtoi(args[4], &amount)) {
    return UsageError(
        absl::StrCat("AMOUNT must be an integer number of minor units; got ", args[4]));
  }
  v1::TransferRequest request;
  request.set_from_account_id(args[2]);
  request.set_to_account_id(args[3]);
  request.set_amount(amount);
  // Always an id, as for deposits: a transfer whose outcome is unknown can then be settled.
  const std::string& given_transfer_id = session.options().transfer_id;
  request.set_transfer_id(given_transfer_id.empty() ? NewRequestId() : given_transfer_id);
  v1::TransferResponse response;
  if (std::optional<int> unsent = session.RefuseUnconnected("transfer")) return *unsent;
  const grpc::Status status =
      session.CallHonouringPushback([&](v1::Ledger::Stub& stub, grpc::ClientContext* context) {
        return stub.Transfer(context, request, &response);
      });
  if (!status.ok()) {
    const int exit_code = session.Failed(status);
    ExplainTransferFailure(session, status, request);
    return exit_code;
  }
  if (session.options().json) {
    ctl::TransferLine line;
    line.set_transfer_id(request.transfer_id());
    line.set_from_account_id(request.from_account_id());
    line.set_from_balance(response.from_balance());
    line.set_to_account_id(request.to_account_id());
    line.set_to_balance(response.to_balance());
    line.set_replayed(response.replayed());
    std::cout << JsonLine(line);
    return kExitOk;
  }
  std::cout << request.from_account_id() << ": " << response.from_balance() << "\n"
            << request.to_account_id() << ": " << response.to_balance() << "\n";
  if (response.replayed()) {
    std::cout << "(replayed: the recorded result of an earlier transfer with transfer_id "
              << request.transfer_id()
              << "; nothing was moved now, and the balances may have changed since)\n";
  }
  return kExitOk;
}

int RunDeposit(LedgerctlSession& session, const std::vector<char*>& args) {
  return Mutate<v1::DepositRequest, v1::DepositResponse>(
      session, args, [](auto& stub, auto* context, const auto& request, auto* response) {
        return stub.Deposit(context, request, response);
      });
}

int RunWithdraw(LedgerctlSession& session, const std::vector<char*>& args) {
  return Mutate<v1::WithdrawRequest, v1::WithdrawResponse>(
      session, args, [](auto& stub, auto* context, const auto& request, auto* response) {
        return stub.Withdraw(context, request, response);
      });
}

}  // namespace ledger::ctl
