#include "server/ledger_service.h"

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/proto_buffer_writer.h"
#include "server/status_mapping.h"
#include "shard/check.h"
#include "shard/message.h"

namespace ledger {
namespace {

// Every call ends here, exactly once: counted by its final code, then finished.
void FinishCall(grpc::ServerUnaryReactor& reactor, LedgerMetrics& metrics, RpcMethod method,
                const grpc::Status& status) {
  metrics.RecordRequest(method, static_cast<int>(status.error_code()));
  reactor.Finish(status);
}

// Parses a request's bytes; INVALID_ARGUMENT, saying what may be wrong, when they are not a valid
// `Request`.
template <typename Request>
grpc::Status ParseRequest(const grpc::ByteBuffer& bytes, Request& request) {
  grpc::ByteBuffer consumed(bytes);  // Deserialize empties its buffer; the copy shares the bytes.
  if (grpc::SerializationTraits<Request>::Deserialize(&consumed, &request).ok()) {
    return grpc::Status::OK;
  }
  return {grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("the request is not a valid ", Request::descriptor()->full_name(), ": its ",
                       bytes.Length(),
                       " bytes are not well-formed protobuf (truncated or of another message), "
                       "or a string field is not valid UTF-8")};
}

// Serializes an OK call's response into the bytes gRPC sends.
template <typename Response>
void SerializeResponse(const Response& response, grpc::ByteBuffer& bytes) {
  bool own_buffer = false;
  grpc::Status serialized =
      grpc::SerializationTraits<Response>::Serialize(response, &bytes, &own_buffer);
  LEDGER_CHECK(serialized.ok());  // A message we built always serializes.
}

// One call from its arrival to its answer: owns the parsed request (the shard's Message views its
// strings) for as long as the call lives. Created by the gRPC thread that admitted the call; once
// handed to a shard, used only by the shard thread, which calls CallerGone and then Complete
// exactly once. Finish and Complete delete it.
template <typename Request, typename Response>
class PendingCall final : public Completion {
 public:
  PendingCall(grpc::CallbackServerContext* context, grpc::ByteBuffer* response_bytes,
              LedgerMetrics* metrics, RpcMethod method)
      : context_(context),
        reactor_(context->DefaultReactor()),
        response_bytes_(response_bytes),
        metrics_(metrics),
        method_(method) {}

  grpc::ServerUnaryReactor* reactor() const { return reactor_; }
  Request& request() { return request_; }
  CallFacts& facts() { return facts_; }

  bool CallerGone() const override { return context_->IsCancelled(); }

  void Complete(const Reply& reply) override {
    if (reply.outcome == Outcome::kOk) {
      Response response;
      response.set_balance(reply.balance);
      if constexpr (!std::is_same_v<Response, v1::BalanceResponse>) {
        response.set_replayed(reply.replayed);
      }
      SerializeResponse(response, *response_bytes_);
    }
    Finish(ToGrpcStatus(reply, facts_));
  }

  void Finish(const grpc::Status& status) {
    FinishCall(*reactor_, *metrics_, method_, status);
    delete this;
  }

 private:
  ~PendingCall() = default;

  grpc::CallbackServerContext* const context_;
  grpc::ServerUnaryReactor* const reactor_;
  grpc::ByteBuffer* const response_bytes_;
  LedgerMetrics* const metrics_;
  const RpcMethod method_;
  Request request_;
  CallFacts facts_;
};

Outcome ValidateRequest(const CallFacts& facts) {
  if (Outcome outcome = ValidateAccountId(facts.account_id); outcome != Outcome::kOk) {
    return outcome;
  }
  if (facts.op == Op::kBalance) return Outcome::kOk;
  if (Outcome outcome = ValidateAmount(facts.amount); outcome != Outcome::kOk) return outcome;
  return ValidateRequestId(facts.request_id);
}

constexpr int32_t kDefaultHistoryPageSize = 50;
constexpr int32_t kMaxHistoryPageSize = 1000;
// A page token is a journal sequence number in decimal: at most the 20 digits of a uint64.
constexpr size_t kMaxPageTokenBytes = 20;
// How much of a refused page token an error message quotes.
constexpr size_t kQuotedPageTokenBytes = 24;

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
  return {grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("page_token \"", absl::CHexEscape(quoted),
                       token.size() > quoted.size() ? "..." : "", "\" (", token.size(),
                       " bytes) is not one this server issued: pass a next_page_token from an "
                       "earlier History response unchanged, or leave it empty for the newest "
                       "entries")};
}

v1::Operation ToProto(Op op) {
  return op == Op::kWithdraw ? v1::OPERATION_WITHDRAW : v1::OPERATION_DEPOSIT;
}

}  // namespace

LedgerService::LedgerService(Router* router, LedgerMetrics* metrics, storage::RocksDbStore* store,
                             const ServiceOptions& options)
    : router_(router), metrics_(metrics), store_(store), options_(options) {}

grpc::ServerUnaryReactor* LedgerService::Deposit(grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) {
  return Submit<v1::DepositRequest, v1::DepositResponse>(context, Op::kDeposit, *request, response);
}

grpc::ServerUnaryReactor* LedgerService::Withdraw(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  return Submit<v1::WithdrawRequest, v1::WithdrawResponse>(context, Op::kWithdraw, *request,
                                                           response);
}

grpc::ServerUnaryReactor* LedgerService::Balance(grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) {
  return Submit<v1::BalanceRequest, v1::BalanceResponse>(context, Op::kBalance, *request, response);
}

grpc::ServerUnaryReactor* LedgerService::History(grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* request_bytes,
                                                 grpc::ByteBuffer* response_bytes) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::HistoryRequest request;
  grpc::Status status = ParseRequest(*request_bytes, request);
  if (status.ok()) {
    v1::HistoryResponse response;
    status = ReadHistory(request, response);
    if (status.ok()) SerializeResponse(response, *response_bytes);
  }
  FinishCall(*reactor, *metrics_, RpcMethod::kHistory, status);
  return reactor;
}

grpc::Status LedgerService::ReadHistory(const v1::HistoryRequest& request,
                                        v1::HistoryResponse& response) {
  CallFacts facts;
  facts.account_id = request.account_id();
  if (ValidateAccountId(request.account_id()) != Outcome::kOk) {
    return ToGrpcStatus(Outcome::kInvalidAccountId, 0, facts);
  }
  if (request.page_size() < 0 || request.page_size() > kMaxHistoryPageSize) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("page_size must be 1 to ", kMaxHistoryPageSize, ", or 0 for ",
                         kDefaultHistoryPageSize, "; got ", request.page_size())};
  }
  uint64_t start = 0;
  if (!request.page_token().empty()) {
    std::optional<uint64_t> sequence = ParsePageToken(request.page_token());
    if (!sequence.has_value()) return InvalidPageToken(request.page_token());
    start = *sequence;
  }
  if (store_ == nullptr) {
    return {grpc::StatusCode::FAILED_PRECONDITION,
            "this server keeps no history: it runs with --durability=none (memory only)"};
  }
  const int32_t page_size =
      request.page_size() == 0 ? kDefaultHistoryPageSize : request.page_size();
  absl::StatusOr<storage::HistoryPage> page =
      store_->ReadHistory(request.account_id(), start, page_size);
  if (!page.ok()) {
    return {grpc::StatusCode::UNAVAILABLE,
            absl::StrCat("storage failed reading the history: ", page.status().message())};
  }
  // An opened account has at least one entry, so only an empty page needs to ask whether the
  // account exists.
  if (page->entries.empty()) {
    absl::StatusOr<std::optional<AccountState>> account = store_->FindAccount(request.account_id());
    if (!account.ok()) {
      return {grpc::StatusCode::UNAVAILABLE,
              absl::StrCat("storage failed reading the history: ", account.status().message())};
    }
    if (!account->has_value()) return ToGrpcStatus(Outcome::kAccountNotFound, 0, facts);
  }
  for (const JournalEntry& entry : page->entries) {
    v1::HistoryEntry* out = response.add_entries();
    out->set_sequence(entry.sequence);
    out->set_operation(ToProto(entry.op));
    out->set_amount(entry.amount);
    out->set_balance_after(entry.balance_after);
    out->set_request_id(entry.request_id);
    *out->mutable_time() =
        google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(entry.time));
  }
  if (page->next_sequence != 0) response.set_next_page_token(absl::StrCat(page->next_sequence));
  return grpc::Status::OK;
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* LedgerService::Submit(grpc::CallbackServerContext* context, Op op,
                                                const grpc::ByteBuffer& request_bytes,
                                                grpc::ByteBuffer* response_bytes) {
  auto* call = new PendingCall<Request, Response>(context, response_bytes, metrics_, MethodOf(op));
  grpc::ServerUnaryReactor* reactor = call->reactor();
  // From here on `call` may be gone once it is finished or handed to a shard; `reactor` lives
  // until gRPC is done with the call.
  if (grpc::Status parsed = ParseRequest(request_bytes, call->request()); !parsed.ok()) {
    call->Finish(parsed);
    return reactor;
  }
  const Request& request = call->request();
  CallFacts& facts = call->facts();
  facts.op = op;
  facts.account_id = request.account_id();
  facts.overdraft_limit = options_.overdraft_limit;
  if constexpr (!std::is_same_v<Request, v1::BalanceRequest>) {
    facts.amount = request.amount();
    facts.request_id = request.request_id();
  }
  if (Outcome invalid = ValidateRequest(facts); invalid != Outcome::kOk) {
    call->Finish(ToGrpcStatus(invalid, 0, facts));  // Nothing queued.
    return reactor;
  }
  if (options_.require_request_id && op != Op::kBalance && facts.request_id.empty()) {
    call->Finish({grpc::StatusCode::INVALID_ARGUMENT,
                  "request_id is required by this server (--require_request_id): give every "
                  "Deposit and Withdraw a unique request_id, so that a call whose outcome is "
                  "unknown can be retried safely"});
    return reactor;
  }
  facts.shard = router_->ShardFor(facts.account_id);
  facts.mailbox_capacity = router_->shard(facts.shard).mailbox_capacity();
  Message message{.op = op,
                  .amount = facts.amount,
                  .account_id = facts.account_id,
                  .completion = call,
                  .enqueued_at = {},
                  .request_id = facts.request_id};
  switch (router_->TrySend(facts.shard, std::move(message))) {
    case SendOutcome::kAccepted:
      break;  // The shard finishes the call; `call` may already be gone.
    case SendOutcome::kFull:
      call->Complete({Outcome::kMailboxFull, 0});
      break;
    case SendOutcome::kClosed:
      call->Complete({Outcome::kShuttingDown, 0});
      break;
  }
  return reactor;
}

}  // namespace ledger
