// Fuzzes the front end's request parsing and validation (server/request_validation.h) with the
// raw bytes a client could send, without a gRPC server. The first byte picks the method (bit 16
// Apply, else bit 8 Transfer, else the low two bits; bit 4 whether the server requires a
// request_id, for Deposit, Withdraw and Apply); the rest is the request.
// Every input must end in INVALID_ARGUMENT with a message, or in a request whose fields satisfy
// the rules; and the verdict must be exactly the rules' verdict on an independent parse.
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>
#include <type_traits>

#include "fuzz/fuzz_check.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "ledger/v1/ledger.pb.h"
#include "server/request_validation.h"
#include "server/status_mapping.h"
#include "shard/ledger_rules.h"

namespace ledger {
namespace {

// The rules of ledger_rules.h restated here, so that a fault in the validators themselves shows:
// an account id is 1 to kAccountIdMaxBytes of [A-Za-z0-9._:@-], a request id 0 to
// kRequestIdMaxBytes of printable ASCII.
bool IsValidAccountId(absl::string_view id) {
  constexpr absl::string_view kAllowed =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:@-";
  return !id.empty() && id.size() <= kAccountIdMaxBytes &&
         id.find_first_not_of(kAllowed) == id.npos;
}

bool IsValidRequestId(absl::string_view id) {
  if (id.size() > kRequestIdMaxBytes) return false;
  for (unsigned char c : id) {
    if (c < ' ' || c > '~') return false;
  }
  return true;
}

bool IsInvalidArgumentWithMessage(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
         !status.error_message().empty();
}

template <typename Request>
void CheckSubmit(const grpc::ByteBuffer& bytes, absl::string_view raw, Op op,
                 bool require_request_id) {
  Request request;
  CallFacts facts;
  const grpc::Status status = ParseAndValidate(bytes, op, require_request_id, request, facts);

  // The expected verdict, from protobuf's own parser and the rules applied one by one.
  Request independent;
  bool valid = independent.ParseFromArray(raw.data(), static_cast<int>(raw.size())) &&
               IsValidAccountId(independent.account_id());
  if constexpr (!std::is_same_v<Request, v1::BalanceRequest>) {
    valid = valid && independent.amount() > 0 && IsValidRequestId(independent.request_id()) &&
            (!require_request_id || !independent.request_id().empty());
  }
  FUZZ_CHECK(status.ok() == valid);
  if (!status.ok()) {
    FUZZ_CHECK(IsInvalidArgumentWithMessage(status));
    return;
  }
  // A validated request: what the shard receives satisfies the rules and is what was sent.
  FUZZ_CHECK(facts.op == op);
  FUZZ_CHECK(facts.account_id == independent.account_id());
  FUZZ_CHECK(facts.account_id.data() == request.account_id().data());  // A view, not a copy.
  FUZZ_CHECK(ValidateAccountId(facts.account_id) == Outcome::kOk);
  if constexpr (!std::is_same_v<Request, v1::BalanceRequest>) {
    FUZZ_CHECK(facts.amount == independent.amount() && facts.amount > 0);
    FUZZ_CHECK(facts.request_id == independent.request_id());
    FUZZ_CHECK(ValidateRequestId(facts.request_id) == Outcome::kOk);
    FUZZ_CHECK(!require_request_id || !facts.request_id.empty());
  }
}

// The page token this server issues for `sequence`, by a route other than the one it parses by.
bool IsIssuedPageToken(const std::string& token) {
  uint64_t sequence = 0;
  const char* end = token.data() + token.size();
  const auto [stop, error] = std::from_chars(token.data(), end, sequence);
  return error == std::errc() && stop == end && sequence >= 1 && std::to_string(sequence) == token;
}

void CheckHistory(const grpc::ByteBuffer& bytes, absl::string_view raw) {
  v1::HistoryRequest request;
  grpc::Status status = ParseRequest(bytes, request);
  v1::HistoryRequest independent;
  const bool parses = independent.ParseFromArray(raw.data(), static_cast<int>(raw.size()));
  FUZZ_CHECK(status.ok() == parses);
  if (!status.ok()) {
    FUZZ_CHECK(IsInvalidArgumentWithMessage(status));
    return;
  }
  HistoryQuery query;
  status = ValidateHistoryRequest(request, query);
  const bool valid = IsValidAccountId(request.account_id()) && request.page_size() >= 0 &&
                     request.page_size() <= kMaxHistoryPageSize &&
                     (request.page_token().empty() || IsIssuedPageToken(request.page_token()));
  FUZZ_CHECK(status.ok() == valid);
  if (!status.ok()) {
    FUZZ_CHECK(IsInvalidArgumentWithMessage(status));
    return;
  }
  FUZZ_CHECK(query.page_size >= 1 && query.page_size <= kMaxHistoryPageSize);
  FUZZ_CHECK(query.page_size ==
             (request.page_size() == 0 ? kDefaultHistoryPageSize : request.page_size()));
  FUZZ_CHECK((query.start_sequence == 0) == request.page_token().empty());
  FUZZ_CHECK(request.page_token().empty() ||
             std::to_string(query.start_sequence) == request.page_token());
}

void CheckTransfer(const grpc::ByteBuffer& bytes, absl::string_view raw) {
  v1::TransferRequest request;
  grpc::Status status = ParseRequest(bytes, request);
  v1::TransferRequest independent;
  const bool parses = independent.ParseFromArray(raw.data(), static_cast<int>(raw.size()));
  FUZZ_CHECK(status.ok() == parses);
  if (!status.ok()) {
    FUZZ_CHECK(IsInvalidArgumentWithMessage(status));
    return;
  }
  CallFacts facts;
  status = ValidateTransferRequest(request, facts);
  const bool valid = !request.transfer_id().empty() && IsValidRequestId(request.transfer_id()) &&
                     IsValidAccountId(request.from_account_id()) &&
                     IsValidAccountId(request.to_account_id()) && request.amount() > 0 &&
                     request.from_account_id() != request.to_account_id();
  FUZZ_CHECK(status.ok() == valid);
  if (!status.ok()) {
    FUZZ_CHECK(IsInvalidArgumentWithMessage(status));
    return;
  }
  // What the coordinator receives is what was sent, as views into the request.
  FUZZ_CHECK(facts.op == Op::kTransfer);
  FUZZ_CHECK(facts.account_id.data() == request.from_account_id().data());
  FUZZ_CHECK(facts.counterparty == request.to_account_id());
  FUZZ_CHECK(facts.request_id == request.transfer_id());
  FUZZ_CHECK(facts.amount == request.amount());
}

// The rules restated for one operation of an Apply call: those of its own RPC.
bool IsValidOperation(const v1::ApplyOperation& operation, bool require_request_id) {
  const auto valid_posting = [&](const auto& request) {
    return IsValidAccountId(request.account_id()) && request.amount() > 0 &&
           IsValidRequestId(request.request_id()) &&
           (!require_request_id || !request.request_id().empty());
  };
  switch (operation.operation_case()) {
    case v1::ApplyOperation::kDeposit:
      return valid_posting(operation.deposit());
    case v1::ApplyOperation::kWithdraw:
      return valid_posting(operation.withdraw());
    case v1::ApplyOperation::kBalance:
      return IsValidAccountId(operation.balance().account_id());
    case v1::ApplyOperation::kTransfer: {
      const v1::TransferRequest& transfer = operation.transfer();
      return !transfer.transfer_id().empty() && IsValidRequestId(transfer.transfer_id()) &&
             IsValidAccountId(transfer.from_account_id()) &&
             IsValidAccountId(transfer.to_account_id()) && transfer.amount() > 0 &&
             transfer.from_account_id() != transfer.to_account_id();
    }
    case v1::ApplyOperation::OPERATION_NOT_SET:
      break;
  }
  return false;  // Sets nothing, or only what this server does not know.
}

// An Apply call: the whole call is refused only for bytes that are not an ApplyRequest or more
// than kMaxApplyOperations operations; each operation is then judged by its own RPC's rules.
void CheckApply(const grpc::ByteBuffer& bytes, absl::string_view raw, bool require_request_id) {
  v1::ApplyRequest request;
  grpc::Status status = ParseRequest(bytes, request);
  v1::ApplyRequest independent;
  const bool parses = independent.ParseFromArray(raw.data(), static_cast<int>(raw.size()));
  FUZZ_CHECK(status.ok() == parses);
  if (!status.ok()) {
    FUZZ_CHECK(IsInvalidArgumentWithMessage(status));
    return;
  }
  status = ValidateApplySize(request);
  FUZZ_CHECK(status.ok() == (independent.operations_size() <= kMaxApplyOperations));
  if (!status.ok()) {
    FUZZ_CHECK(IsInvalidArgumentWithMessage(status));
    return;
  }
  FUZZ_CHECK(request.operations_size() == independent.operations_size());
  for (int i = 0; i < request.operations_size(); ++i) {
    const v1::ApplyOperation& operation = request.operations(i);
    CallFacts facts;
    status = ValidateApplyOperation(operation, require_request_id, facts);
    FUZZ_CHECK(status.ok() == IsValidOperation(independent.operations(i), require_request_id));
    if (!status.ok()) {
      FUZZ_CHECK(IsInvalidArgumentWithMessage(status));
      continue;
    }
    // What the shard receives is what was sent, as views into the request.
    FUZZ_CHECK(ValidateAccountId(facts.account_id) == Outcome::kOk);
    switch (operation.operation_case()) {
      case v1::ApplyOperation::kDeposit:
        FUZZ_CHECK(facts.op == Op::kDeposit && facts.amount == operation.deposit().amount());
        FUZZ_CHECK(facts.account_id.data() == operation.deposit().account_id().data());
        FUZZ_CHECK(facts.request_id == operation.deposit().request_id());
        break;
      case v1::ApplyOperation::kWithdraw:
        FUZZ_CHECK(facts.op == Op::kWithdraw && facts.amount == operation.withdraw().amount());
        FUZZ_CHECK(facts.account_id.data() == operation.withdraw().account_id().data());
        FUZZ_CHECK(facts.request_id == operation.withdraw().request_id());
        break;
      case v1::ApplyOperation::kBalance:
        FUZZ_CHECK(facts.op == Op::kBalance);
        FUZZ_CHECK(facts.account_id.data() == operation.balance().account_id().data());
        break;
      case v1::ApplyOperation::kTransfer:
        FUZZ_CHECK(facts.op == Op::kTransfer && facts.amount == operation.transfer().amount());
        FUZZ_CHECK(facts.account_id.data() == operation.transfer().from_account_id().data());
        FUZZ_CHECK(facts.counterparty == operation.transfer().to_account_id());
        FUZZ_CHECK(facts.request_id == operation.transfer().transfer_id());
        break;
      case v1::ApplyOperation::OPERATION_NOT_SET:
        FUZZ_CHECK(false);  // Never valid.
    }
  }
}

}  // namespace
}  // namespace ledger

// Protobuf logs every string that is not UTF-8 it meets; the properties say what matters, and
// the log would bury libFuzzer's own output.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t selector = data[0];
  const absl::string_view raw(reinterpret_cast<const char*>(data + 1), size - 1);
  grpc::Slice slice(raw.data(), raw.size());
  const grpc::ByteBuffer bytes(&slice, 1);
  const bool require_request_id = (selector & 4) != 0;
  if ((selector & 16) != 0) {
    ledger::CheckApply(bytes, raw, require_request_id);
    return 0;
  }
  if ((selector & 8) != 0) {
    ledger::CheckTransfer(bytes, raw);
    return 0;
  }
  switch (selector & 3) {
    case 0:
      ledger::CheckSubmit<ledger::v1::DepositRequest>(bytes, raw, ledger::Op::kDeposit,
                                                      require_request_id);
      break;
    case 1:
      ledger::CheckSubmit<ledger::v1::WithdrawRequest>(bytes, raw, ledger::Op::kWithdraw,
                                                       require_request_id);
      break;
    case 2:
      ledger::CheckSubmit<ledger::v1::BalanceRequest>(bytes, raw, ledger::Op::kBalance,
                                                      require_request_id);
      break;
    default:
      ledger::CheckHistory(bytes, raw);
      break;
  }
  return 0;
}
