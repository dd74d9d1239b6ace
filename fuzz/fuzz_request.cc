// Fuzzes the front end's request parsing and validation (server/request_validation.h) with the
// raw bytes a client could send, without a gRPC server. The first byte picks the method (and,
// for Deposit and Withdraw, whether the server requires a request_id); the rest is the request.
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
