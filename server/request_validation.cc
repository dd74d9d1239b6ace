#include "server/request_validation.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/impl/codegen/proto_utils.h"  // SerializationTraits for protobuf messages.
#include "server/error_status.h"

namespace ledger {
namespace {

// A page token is a journal sequence number in decimal: at most the 20 digits of a uint64.
constexpr size_t kMaxPageTokenBytes = 20;
// How much of a refused page token an error message quotes.
constexpr size_t kQuotedPageTokenBytes = 24;

Outcome ValidateFacts(const CallFacts& facts) {
  if (Outcome outcome = ValidateAccountId(facts.account_id); outcome != Outcome::kOk) {
    return outcome;
  }
  if (facts.op == Op::kBalance) return Outcome::kOk;
  if (Outcome outcome = ValidateAmount(facts.amount); outcome != Outcome::kOk) return outcome;
  return ValidateRequestId(facts.request_id);
}

// The sequence number a page token names, exactly as this server writes it: 1 to 20 decimal
// digits (no sign, space, leading zero or other byte) within uint64. Empty for anything else.
std::optional<uint64_t> ParsePageToken(absl::string_view token) {
  if (token.empty() || token.size() > kMaxPageTokenBytes || token[0] == '0') return std::nullopt;
  for (char c : token) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  uint64_t sequence = 0;
  if (!absl::SimpleAtoi(token, &sequence) || sequence == 0) return std::nullopt;
  return sequence;
}

grpc::Status InvalidPageToken(absl::string_view token) {
  const absl::string_view quoted = token.substr(0, kQuotedPageTokenBytes);
  return ErrorStatus(
      grpc::StatusCode::INVALID_ARGUMENT, v1::INVALID_REQUEST,
      absl::StrCat("page_token \"", absl::CHexEscape(quoted),
                   token.size() > quoted.size() ? "..." : "", "\" (", token.size(),
                   " bytes) is not one this server issued: pass a next_page_token from an "
                   "earlier History response unchanged, or leave it empty for the newest "
                   "entries"),
      {{"field", "page_token"}});
}

}  // namespace

template <typename Request>
grpc::Status ParseRequest(const grpc::ByteBuffer& bytes, Request& request) {
  grpc::ByteBuffer consumed(bytes);  // Deserialize empties its buffer; the copy shares the bytes.
  if (grpc::SerializationTraits<Request>::Deserialize(&consumed, &request).ok()) {
    return grpc::Status::OK;
  }
  return ErrorStatus(
      grpc::StatusCode::INVALID_ARGUMENT, v1::INVALID_REQUEST,
      absl::StrCat("the request is not a valid ", Request::descriptor()->full_name(), ": its ",
                   bytes.Length(),
                   " bytes are not well-formed protobuf (truncated or of another message), or a "
                   "string field is not valid UTF-8"));
}

template <typename Request>
grpc::Status ParseAndValidate(const grpc::ByteBuffer& bytes, Op op, bool require_request_id,
                              Request& request, CallFacts& facts) {
  if (grpc::Status parsed = ParseRequest(bytes, request); !parsed.ok()) return parsed;
  return ValidateAccountRequest(request, op, require_request_id, facts);
}

template <typename Request>
grpc::Status ValidateAccountRequest(const Request& request, Op op, bool require_request_id,
                                    CallFacts& facts) {
  facts.op = op;
  facts.account_id = request.account_id();
  if constexpr (!std::is_same_v<Request, v1::BalanceRequest>) {
    facts.amount = request.amount();
    facts.request_id = request.request_id();
  }
  if (Outcome invalid = ValidateFacts(facts); invalid != Outcome::kOk) {
    return ToGrpcStatus(invalid, 0, facts);
  }
  if (require_request_id && op != Op::kBalance && facts.request_id.empty()) {
    return ErrorStatus(grpc::StatusCode::INVALID_ARGUMENT, v1::INVALID_REQUEST_ID,
                       "request_id is required by this server (--require_request_id): give every "
                       "Deposit and Withdraw a unique request_id, so that a call whose outcome is "
                       "unknown can be retried safely",
                       {{"field", "request_id"}});
  }
  return grpc::Status::OK;
}

grpc::Status ValidateTransferRequest(const v1::TransferRequest& request, CallFacts& facts) {
  facts.op = Op::kTransfer;
  facts.account_id = request.from_account_id();
  facts.counterparty = request.to_account_id();
  facts.amount = request.amount();
  facts.request_id = request.transfer_id();
  Outcome invalid = ValidateTransferId(facts.request_id);
  if (invalid == Outcome::kOk) invalid = ValidateAccountId(facts.account_id);
  if (invalid == Outcome::kOk) invalid = ValidateAccountId(facts.counterparty);
  if (invalid == Outcome::kOk) invalid = ValidateAmount(facts.amount);
  if (invalid == Outcome::kOk && facts.account_id == facts.counterparty) {
    invalid = Outcome::kSameAccount;
  }
  if (invalid != Outcome::kOk) return ToGrpcStatus(invalid, 0, facts);
  return grpc::Status::OK;
}

grpc::Status ValidateApplySize(const v1::ApplyRequest& request) {
  if (request.operations_size() <= kMaxApplyOperations) return grpc::Status::OK;
  return ErrorStatus(
      grpc::StatusCode::INVALID_ARGUMENT, v1::INVALID_REQUEST,
      absl::StrCat("an Apply call carries at most ", kMaxApplyOperations, " operations; got ",
                   request.operations_size(), ". Nothing was applied: split it into calls of ",
                   kMaxApplyOperations, " or fewer"),
      {{"field", "operations"}, {"operations", absl::StrCat(request.operations_size())}});
}

grpc::Status ValidateApplyOperation(const v1::ApplyOperation& operation, bool require_request_id,
                                    CallFacts& facts) {
  switch (operation.operation_case()) {
    case v1::ApplyOperation::kDeposit:
      return ValidateAccountRequest(operation.deposit(), Op::kDeposit, require_request_id, facts);
    case v1::ApplyOperation::kWithdraw:
      return ValidateAccountRequest(operation.withdraw(), Op::kWithdraw, require_request_id, facts);
    case v1::ApplyOperation::kBalance:
      return ValidateAccountRequest(operation.balance(), Op::kBalance, require_request_id, facts);
    case v1::ApplyOperation::kTransfer:
      return ValidateTransferRequest(operation.transfer(), facts);
    case v1::ApplyOperation::OPERATION_NOT_SET:
      break;
  }
  return ErrorStatus(grpc::StatusCode::INVALID_ARGUMENT, v1::INVALID_REQUEST,
                     "the operation sets none of deposit, withdraw, balance, transfer (or one "
                     "this server does not know): nothing was applied",
                     {{"field", "operation"}});
}

grpc::Status ValidateHistoryRequest(const v1::HistoryRequest& request, HistoryQuery& query) {
  if (ValidateAccountId(request.account_id()) != Outcome::kOk) {
    CallFacts facts;
    facts.account_id = request.account_id();
    return ToGrpcStatus(Outcome::kInvalidAccountId, 0, facts);
  }
  if (request.page_size() < 0 || request.page_size() > kMaxHistoryPageSize) {
    return ErrorStatus(grpc::StatusCode::INVALID_ARGUMENT, v1::INVALID_REQUEST,
                       absl::StrCat("page_size must be 1 to ", kMaxHistoryPageSize, ", or 0 for ",
                                    kDefaultHistoryPageSize, "; got ", request.page_size()),
                       {{"field", "page_size"}});
  }
  query.start_sequence = 0;
  if (!request.page_token().empty()) {
    std::optional<uint64_t> sequence = ParsePageToken(request.page_token());
    if (!sequence.has_value()) return InvalidPageToken(request.page_token());
    query.start_sequence = *sequence;
  }
  query.page_size = request.page_size() == 0 ? kDefaultHistoryPageSize : request.page_size();
  return grpc::Status::OK;
}

template grpc::Status ParseRequest(const grpc::ByteBuffer&, v1::DepositRequest&);
template grpc::Status ParseRequest(const grpc::ByteBuffer&, v1::WithdrawRequest&);
template grpc::Status ParseRequest(const grpc::ByteBuffer&, v1::BalanceRequest&);
template grpc::Status ParseRequest(const grpc::ByteBuffer&, v1::HistoryRequest&);
template grpc::Status ParseRequest(const grpc::ByteBuffer&, v1::TransferRequest&);
template grpc::Status ParseRequest(const grpc::ByteBuffer&, v1::GetTransferRequest&);
template grpc::Status ParseRequest(const grpc::ByteBuffer&, v1::ApplyRequest&);
template grpc::Status ParseRequest(const grpc::ByteBuffer&, v1::WatchRequest&);
template grpc::Status ParseAndValidate(const grpc::ByteBuffer&, Op, bool, v1::DepositRequest&,
                                       CallFacts&);
template grpc::Status ParseAndValidate(const grpc::ByteBuffer&, Op, bool, v1::WithdrawRequest&,
                                       CallFacts&);
template grpc::Status ParseAndValidate(const grpc::ByteBuffer&, Op, bool, v1::BalanceRequest&,
                                       CallFacts&);
template grpc::Status ValidateAccountRequest(const v1::DepositRequest&, Op, bool, CallFacts&);
template grpc::Status ValidateAccountRequest(const v1::WithdrawRequest&, Op, bool, CallFacts&);
template grpc::Status ValidateAccountRequest(const v1::BalanceRequest&, Op, bool, CallFacts&);

}  // namespace ledger
