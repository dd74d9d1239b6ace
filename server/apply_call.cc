#include "server/apply_call.h"

#include <optional>
#include <utility>

#include "base/check.h"
#include "server/call_answer.h"
#include "server/error_status.h"
#include "server/request_validation.h"

namespace ledger {
namespace {

// Large first blocks: a full call's request is about 3 MB, and its response about 100 kB.
google::protobuf::ArenaOptions CallArenaOptions() {
  google::protobuf::ArenaOptions options;
  options.start_block_size = 64 << 10;
  options.max_block_size = 1 << 20;
  return options;
}

// Whether the call reads a balance, which a cluster leader serves only after a read barrier.
bool HasBalance(const v1::ApplyRequest& request) {
  for (const v1::ApplyOperation& operation : request.operations()) {
    if (operation.has_balance()) return true;
  }
  return false;
}

}  // namespace

ApplyCall::ApplyCall(grpc::CallbackServerContext* context, grpc::ByteBuffer* response_bytes,
                     const ApplyEnvironment& environment)
    : context_(context),
      reactor_(context->DefaultReactor()),
      response_bytes_(response_bytes),
      environment_(environment),
      arena_(CallArenaOptions()),
      request_(google::protobuf::Arena::CreateMessage<v1::ApplyRequest>(&arena_)) {}

grpc::ServerUnaryReactor* ApplyCall::Start(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer& request_bytes,
                                           grpc::ByteBuffer* response_bytes,
                                           const ApplyEnvironment& environment) {
  auto* call = new ApplyCall(context, response_bytes, environment);
  grpc::ServerUnaryReactor* reactor = call->reactor_;
  // From here on `call` may be gone once it has answered; `reactor` lives until gRPC is done.
  grpc::Status valid = ParseRequest(request_bytes, *call->request_);
  if (valid.ok()) valid = ValidateApplySize(*call->request_);
  if (!valid.ok()) {
    call->Finish(valid);  // Nothing sent.
    return reactor;
  }
  if (environment.read_barrier != nullptr && HasBalance(*call->request_)) {
    environment.read_barrier->After([call](const absl::Status& confirmed) {
      if (!confirmed.ok()) {
        call->Finish(call->environment_.leadership->Refusal());  // Nothing sent.
        return;
      }
      call->Dispatch();
    });
    return reactor;
  }
  call->Dispatch();
  return reactor;
}

void ApplyCall::Dispatch() {
  const int count = request_->operations_size();
  environment_.metrics->RecordApplyOperations(static_cast<size_t>(count));
  operations_ = std::make_unique<Operation[]>(static_cast<size_t>(count));
  Router& router = *environment_.router;
  // First pass: validate each operation and find its shard, counting each shard's part.
  std::vector<size_t> part_end(static_cast<size_t>(router.num_shards()), 0);
  for (int i = 0; i < count; ++i) {
    Operation& operation = operations_[i];
    operation.call = this;
    operation.facts.overdraft_limit = environment_.overdraft_limit;
    grpc::Status valid = ValidateApplyOperation(request_->operations(i),
                                                environment_.require_request_id, operation.facts);
    if (!valid.ok()) {
      invalid_.emplace_back(i, std::move(valid));
      continue;
    }
    const int32_t shard = router.ShardFor(operation.facts.account_id);
    operation.facts.shard = shard;
    operation.facts.mailbox_capacity = router.shard(shard).mailbox_capacity();
    ++part_end[shard];
  }
  // Second pass: lay each shard's part out contiguously, in request order, so that operations
  // on one account reach its shard in the order they were asked for.
  std::vector<size_t> part_begin(part_end.size(), 0);
  size_t total = 0;
  for (size_t shard = 0; shard < part_end.size(); ++shard) {
    part_begin[shard] = total;
    total += part_end[shard];
    part_end[shard] = part_begin[shard];  // From here on: where the part's next message goes.
  }
  messages_.resize(total);
  message_operation_.resize(total);
  size_t invalid_cursor = 0;
  for (int i = 0; i < count; ++i) {
    if (invalid_cursor < invalid_.size() && invalid_[invalid_cursor].first == i) {
      ++invalid_cursor;
      continue;
    }
    Operation& operation = operations_[i];
    const size_t position = part_end[operation.facts.shard];
    message_operation_[position] = i;
    if (!BuildMessage(i, messages_[position])) {
      operation.reply = Reply{.outcome = Outcome::kShuttingDown};  // Never sent.
      environment_.admission->CountRefused(RefusalReason::kShuttingDown);
      continue;
    }
    ++part_end[operation.facts.shard];
  }
  // Every operation that is sent counts until it is answered; the one count Dispatch holds keeps
  // the call alive until the last part is sent (parts may be answered before TrySendPart
  // returns).
  size_t sent_total = 0;
  for (size_t shard = 0; shard < part_end.size(); ++shard) {
    sent_total += part_end[shard] - part_begin[shard];
  }
  remaining_.fetch_add(sent_total, std::memory_order_relaxed);
  for (size_t shard = 0; shard < part_end.size(); ++shard) {
    const size_t size = part_end[shard] - part_begin[shard];
    if (size == 0) continue;
    const auto index = static_cast<int32_t>(shard);
    const SendOutcome sent = router.TrySendPart(index, messages_.data() + part_begin[shard], size);
    if (sent != SendOutcome::kAccepted) {
      RefusePart(index, part_begin[shard], part_end[shard], sent);
    } else {
      environment_.admission->AnsweredOperations(index, size);
    }
  }
  OperationDone();  // Dispatch's own count.
}

bool ApplyCall::BuildMessage(int index, Message& message) {
  Operation& operation = operations_[index];
  const CallFacts& facts = operation.facts;
  if (facts.op == Op::kTransfer) {
    std::optional<Message> prepared = environment_.router->transfers().Prepare(
        facts.request_id, facts.account_id, facts.counterparty, facts.amount, &operation);
    if (!prepared.has_value()) return false;
    message = *prepared;
    return true;
  }
  message = MakeAccountCall(facts.op, facts.account_id, facts.amount, facts.request_id, &operation);
  return true;
}

void ApplyCall::RefusePart(int32_t shard, size_t begin, size_t end, SendOutcome sent) {
  const bool full = sent == SendOutcome::kFull;
  AdmissionControl& admission = *environment_.admission;
  if (full && !refused_full_) {
    refused_full_ = true;
    pushback_ = admission.PushbackAfterFullMailbox(
        shard, environment_.router->shard(shard).mailbox_capacity(),
        AdmissionControl::Clock::now());
  }
  admission.CountRefused(full ? RefusalReason::kMailboxFull : RefusalReason::kShuttingDown);
  const Outcome outcome = full ? Outcome::kMailboxFull : Outcome::kShuttingDown;
  for (size_t i = begin; i < end; ++i) {
    // A transfer's completion is its flight, which never started: it ends here.
    if (messages_[i].op() == Op::kTransfer) environment_.router->transfers().Unsent(messages_[i]);
    Operation& operation = operations_[message_operation_[i]];
    operation.reply = Reply{.outcome = outcome};
    operation.facts.part_size = end - begin;
  }
  remaining_.fetch_sub(end - begin, std::memory_order_relaxed);  // Dispatch still holds one.
}

void ApplyCall::Answer() {
  auto* response = google::protobuf::Arena::CreateMessage<v1::ApplyResponse>(&arena_);
  const int count = request_->operations_size();
  response->mutable_results()->Reserve(count);
  std::array<uint64_t, kStatusCodeCount> codes{};
  size_t invalid_cursor = 0;
  for (int i = 0; i < count; ++i) {
    v1::ApplyResult* result = response->add_results();
    if (invalid_cursor < invalid_.size() && invalid_[invalid_cursor].first == i) {
      const grpc::Status& status = invalid_[invalid_cursor++].second;
      result->set_code(static_cast<int32_t>(status.error_code()));
      result->set_message(status.error_message());
      result->set_reason(ReasonOf(status));
      ++codes[static_cast<size_t>(status.error_code())];
      continue;
    }
    const Operation& operation = operations_[i];
    const Reply& reply = operation.reply;
    if (reply.outcome == Outcome::kOk) {
      result->set_balance(reply.balance);
      if (operation.facts.op == Op::kTransfer) result->set_to_balance(reply.transfer().to_balance);
      if (operation.facts.op != Op::kBalance) result->set_replayed(reply.replayed);
      ++codes[0];
      continue;
    }
    const grpc::Status status = ToPlainStatus(reply, operation.facts);
    result->set_code(static_cast<int32_t>(status.error_code()));
    result->set_message(status.error_message());
    result->set_reason(ReasonFor(reply, operation.facts));
    ++codes[static_cast<size_t>(status.error_code())];
  }
  SerializeResponse(*response, *response_bytes_);
  environment_.metrics->RecordApplyResults(codes);
  if (refused_full_) AddPushback(*context_, pushback_);
  Finish(grpc::Status::OK);
}

void ApplyCall::Finish(const grpc::Status& status) {
  FinishCall(*reactor_, *environment_.metrics, *environment_.admission, RpcMethod::kApply,
             /*shard=*/-1, environment_.client, status);
  delete this;
}

}  // namespace ledger
