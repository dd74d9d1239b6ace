// balance, history, get-transfer and health: the reads, printed for a person or as JSON.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "base/status_code_names.h"
#include "client/exit_codes.h"
#include "client/history_format.h"
#include "client/json_line.h"
#include "client/ledgerctl_commands.h"
#include "client/ledgerctl_output.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "ledger/v1/ledger.grpc.pb.h"

namespace ledger::ctl {
namespace {

// "COMMITTED", "PENDING", "REFUSED" (the enum's name without its prefix).
std::string TransferStateName(v1::TransferState state) {
  return std::string(absl::StripPrefix(v1::TransferState_Name(state), "TRANSFER_STATE_"));
}

void PrintTransferStateJson(const v1::GetTransferResponse& t) {
  ctl::TransferStateLine line;
  line.set_transfer_id(t.transfer_id());
  line.set_state(TransferStateName(t.state()));
  line.set_from_account_id(t.from_account_id());
  line.set_to_account_id(t.to_account_id());
  line.set_amount(t.amount());
  if (t.state() != v1::TRANSFER_STATE_REFUSED) line.set_from_balance(t.from_balance());
  if (t.state() == v1::TRANSFER_STATE_COMMITTED) line.set_to_balance(t.to_balance());
  if (t.state() == v1::TRANSFER_STATE_REFUSED) {
    line.set_refusal_code(StatusCodeName(t.refusal_code()));
    line.set_refusal_message(t.refusal_message());
  }
  if (t.has_created_time()) *line.mutable_created_time() = t.created_time();
  if (t.has_credited_time()) *line.mutable_credited_time() = t.credited_time();
  if (t.has_finished_time()) *line.mutable_finished_time() = t.finished_time();
  std::cout << JsonLine(line);
}

void PrintTransferState(const v1::GetTransferResponse& t) {
  std::cout << "transfer_id: " << t.transfer_id() << "\n";
  switch (t.state()) {
    case v1::TRANSFER_STATE_COMMITTED:
      std::cout << "state:       COMMITTED: both sides applied and durable\n"
                << "from:        " << t.from_account_id() << " (balance after the debit "
                << t.from_balance() << ")\n"
                << "to:          " << t.to_account_id() << " (balance after the credit "
                << t.to_balance() << ")\n";
      break;
    case v1::TRANSFER_STATE_PENDING:
      std::cout << "state:       PENDING: debited, the credit not yet confirmed; it ends COMMITTED "
                   "or REFUSED on its own\n"
                << "from:        " << t.from_account_id() << " (balance after the debit "
                << t.from_balance() << ")\n"
                << "to:          " << t.to_account_id() << "\n";
      break;
    case v1::TRANSFER_STATE_REFUSED:
      std::cout << "state:       REFUSED: no money moved (a debit, if any, was refunded)\n"
                << "refused:     " << StatusCodeName(t.refusal_code()) << ": "
                << t.refusal_message() << "\n"
                << "from:        " << t.from_account_id() << "\n"
                << "to:          " << t.to_account_id() << "\n";
      break;
    default:  // A state newer than this ledgerctl.
      std::cout << "state:       " << TransferStateName(t.state()) << "\n"
                << "from:        " << t.from_account_id() << "\n"
                << "to:          " << t.to_account_id() << "\n";
      break;
  }
  std::cout << "amount:      " << t.amount() << "\n";
  if (t.has_created_time()) {
    std::cout << "created:     " << FormatTimestamp(t.created_time()) << "\n";
  }
  if (t.has_credited_time()) {
    std::cout << "credited:    " << FormatTimestamp(t.credited_time()) << "\n";
  }
  if (t.has_finished_time()) {
    std::cout << "finished:    " << FormatTimestamp(t.finished_time()) << "\n";
  }
}

void PrintHistoryJson(const std::string& account_id, const v1::HistoryResponse& response) {
  ctl::HistoryPage page;
  page.set_account_id(account_id);
  for (const v1::HistoryEntry& entry : response.entries()) {
    ctl::HistoryPage::Entry& line = *page.add_entries();
    line.set_sequence(entry.sequence());
    line.set_operation(OperationName(entry.operation()));
    line.set_amount(entry.amount());
    line.set_balance_after(entry.balance_after());
    line.set_request_id(entry.request_id());
    *line.mutable_time() = entry.time();
    if (!entry.transfer_id().empty()) {
      line.set_transfer_id(entry.transfer_id());
      line.set_counterparty_account_id(entry.counterparty_account_id());
    }
  }
  page.set_next_page_token(response.next_page_token());
  std::cout << JsonLine(page);
}

}  // namespace

int RunGetTransfer(LedgerctlSession& session, const std::vector<char*>& args) {
  if (args.size() != 3) return UsageError("get-transfer takes ID (a transfer_id)");
  v1::GetTransferRequest request;
  request.set_transfer_id(args[2]);
  v1::GetTransferResponse response;
  const grpc::Status status =
      session.CallHonouringPushback([&](v1::Ledger::Stub& stub, grpc::ClientContext* context) {
        return stub.GetTransfer(context, request, &response);
      });
  if (!status.ok()) return session.Failed(status);
  if (session.options().json) {
    PrintTransferStateJson(response);
  } else {
    PrintTransferState(response);
  }
  return kExitOk;
}

int RunBalance(LedgerctlSession& session, const std::vector<char*>& args) {
  if (args.size() != 3) return UsageError("balance takes ACCOUNT");
  v1::BalanceRequest request;
  request.set_account_id(args[2]);
  v1::BalanceResponse response;
  const grpc::Status status =
      session.CallHonouringPushback([&](v1::Ledger::Stub& stub, grpc::ClientContext* context) {
        return stub.Balance(context, request, &response);
      });
  if (!status.ok()) return session.Failed(status);
  return session.PrintBalance(request.account_id(), response.balance());
}

int RunHistory(LedgerctlSession& session, const std::vector<char*>& args) {
  if (args.size() != 3) return UsageError("history takes ACCOUNT");
  v1::HistoryRequest request;
  request.set_account_id(args[2]);
  request.set_page_size(session.options().page_size);
  request.set_page_token(session.options().page_token);
  v1::HistoryResponse response;
  const grpc::Status status =
      session.CallHonouringPushback([&](v1::Ledger::Stub& stub, grpc::ClientContext* context) {
        return stub.History(context, request, &response);
      });
  if (!status.ok()) return session.Failed(status);
  auto time_of = [](const v1::HistoryEntry& entry) { return FormatTimestamp(entry.time()); };
  if (session.options().json) {
    PrintHistoryJson(request.account_id(), response);
    return kExitOk;
  }
  // OPERATION is as wide as its longest name, transfer_refund.
  std::cout << absl::StrFormat("%-6s %-24s %-15s %12s %14s  %s\n", "SEQ", "TIME (UTC)", "OPERATION",
                               "AMOUNT", "BALANCE AFTER", "REQUEST ID (TRANSFER ID AND ACCOUNT)");
  for (const v1::HistoryEntry& entry : response.entries()) {
    std::cout << absl::StrFormat("%-6d %-24s %-15s %12d %14d  %s\n", entry.sequence(),
                                 time_of(entry), OperationName(entry.operation()), entry.amount(),
                                 entry.balance_after(), EntryReference(entry));
  }
  if (!response.next_page_token().empty()) {
    std::cout << "older entries: ledgerctl history " << request.account_id()
              << " --page_token=" << response.next_page_token() << "\n";
  }
  return kExitOk;
}

int RunHealth(LedgerctlSession& session, const std::vector<char*>& args) {
  if (args.size() != 2) return UsageError("health takes no arguments");
  grpc::health::v1::HealthCheckRequest request;  // "": the server as a whole.
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = grpc::health::v1::Health::NewStub(session.channel())
                                  ->Check(session.NewContext().get(), request, &response);
  if (!status.ok()) return session.Failed(status);
  const std::string serving =
      grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
  if (session.options().json) {
    ctl::HealthLine line;
    line.set_status(serving);
    std::cout << JsonLine(line);
  } else {
    std::cout << serving << "\n";
  }
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? kExitOk
                                                                             : kExitUnavailable;
}

}  // namespace ledger::ctl
