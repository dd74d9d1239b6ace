// Defines `FakeLedger`, a small in-process ledger.v1.Ledger for client tests: a correct
// in-memory ledger (balances, request_id replay, no overdraft, transfers with transfer_id replay
// and GetTransfer) that sheds the first attempts of each call with RESOURCE_EXHAUSTED and a
// chosen grpc-retry-pushback-ms, and can leave the outcome of a transfer unknown to its caller
// in the ways the real server can. Its Apply runs each operation as its own RPC would (each
// shed operation gets RESOURCE_EXHAUSTED and the call the pushback), and can lose the answer to
// whole calls after applying them, so that a client's retries and settling are tested without
// depending on the real server's overload or failure behaviour.
//
// Every status it answers itself carries ledgerd's machine-readable reason (ErrorInfo), with
// words unlike the real server's: a client that decided by the words instead of the reason
// would do the wrong thing here. A write fault (Shedding::first_write_fault) can even answer
// with words that say the opposite of the reason.
#ifndef LEDGER_TESTS_E2E_FAKE_LEDGER_H_
#define LEDGER_TESTS_E2E_FAKE_LEDGER_H_

#include <cstdint>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "ledger/v1/ledger.grpc.pb.h"
#include "proto/error_details.h"

namespace ledger::testing_util {

// Thread-safe (a sync service: gRPC calls it from its own threads).
class FakeLedger final : public v1::Ledger::Service {
 public:
  // How a transfer's first attempt ends.
  enum class TransferEnding {
    kAnswer,                  // As the ledger decided.
    kDecideThenUnavailable,   // Decided and recorded (applied or refused), answered UNAVAILABLE.
    kDropThenUnavailable,     // Not applied, nothing recorded, answered UNAVAILABLE.
    kPendingThenUnavailable,  // Decided and recorded; answered UNAVAILABLE "still pending", and
                              // GetTransfer says PENDING until asked get_transfer_pending times.
  };
  // What became of the transfers whose first attempt was answered UNAVAILABLE.
  struct AmbiguousTransfers {
    int committed = 0;
    int refused = 0;
    int unrecorded = 0;  // Dropped, and never retried.
  };

  struct Shedding {
    // Attempts shed per call: a deposit or withdraw is the same call while its request_id is;
    // a balance read, while its account is. 0 sheds nothing.
    int attempts_shed = 0;
    // The grpc-retry-pushback-ms value sent with each shed; nullopt sends none.
    std::optional<std::string> pushback_ms = "1";
    // How the first unshed attempt of the n-th transfer_id ends: pattern[n % size]. Retries
    // (same transfer_id) are always answered.
    std::vector<TransferEnding> first_transfer_endings = {TransferEnding::kAnswer};
    // GetTransfer answers PENDING this many times per transfer_id before its real state.
    int get_transfer_pending = 0;
    // Like a server with --durability=none: GetTransfer is FAILED_PRECONDITION, and a retried
    // transfer_id is applied again (no deduplication).
    bool no_transfer_records = false;
    // The first this many Apply calls apply their operations and are answered UNAVAILABLE, as
    // when the connection is lost after the server applied them.
    int apply_calls_lost = 0;
  };

  // How the first unshed attempt of each deposit or withdraw (by request_id) is answered, when
  // set: with this status, after applying it when `applied`. Retries are answered as usual.
  struct WriteFault {
    grpc::StatusCode code;
    v1::ErrorReason reason;
    std::string words;
    bool applied;
  };

  // A status as ledgerd would send it for `reason`, but with the fake's own `words`.
  static grpc::Status Refusal(grpc::StatusCode code, v1::ErrorReason reason, std::string words,
                              std::optional<std::chrono::milliseconds> retry_delay = {}) {
    std::string details = EncodeErrorDetails(
        static_cast<int>(code), words,
        ErrorDetails{.reason = reason, .metadata = {}, .retry_delay = retry_delay});
    return {code, std::move(words), std::move(details)};
  }

  explicit FakeLedger(Shedding shedding, std::optional<WriteFault> first_write_fault = {})
      : shedding_(std::move(shedding)), first_write_fault_(std::move(first_write_fault)) {}

  // Listens on 127.0.0.1, a free port; returns "127.0.0.1:PORT".
  std::string Start() {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    return "127.0.0.1:" + std::to_string(port);
  }
  ~FakeLedger() override {
    if (server_ == nullptr) return;
    server_->Shutdown(std::chrono::system_clock::now());  // Cancels what is still in flight...
    server_->Wait();  // ... and returns once no handler runs, before the members go.
  }

  // The request_id of every deposit and withdraw attempt, and the transfer_id of every transfer
  // attempt, in arrival order.
  std::vector<std::string> request_ids() const {
    absl::MutexLock lock(&mu_);
    return request_ids_;
  }
  // Apply calls, lost ones included.
  int apply_calls() const {
    absl::MutexLock lock(&mu_);
    return apply_calls_;
  }
  // Every attempt of every method, shed ones included (an Apply call: one per operation).
  int attempts() const {
    absl::MutexLock lock(&mu_);
    return attempts_;
  }

  AmbiguousTransfers ambiguous_transfers() const {
    absl::MutexLock lock(&mu_);
    AmbiguousTransfers outcomes;
    for (const std::string& id : ambiguous_ids_) {
      const auto found = transfers_.find(id);
      if (found == transfers_.end()) {
        ++outcomes.unrecorded;
      } else if (found->second.state() == v1::TRANSFER_STATE_COMMITTED) {
        ++outcomes.committed;
      } else {
        ++outcomes.refused;
      }
    }
    return outcomes;
  }
  // The sum of all balances: what was deposited minus what was withdrawn, if transfers conserve.
  int64_t balance_sum() const {
    absl::MutexLock lock(&mu_);
    int64_t sum = 0;
    for (const auto& [account, balance] : balances_) sum += balance;
    return sum;
  }
  // Every recorded transfer, by transfer_id.
  std::map<std::string, v1::GetTransferResponse> transfers() const {
    absl::MutexLock lock(&mu_);
    return transfers_;
  }
  // Puts `balance` on `account` directly, for a test's starting point.
  void SetBalance(const std::string& account, int64_t balance) {
    absl::MutexLock lock(&mu_);
    balances_[account] = balance;
  }

  grpc::Status Transfer(grpc::ServerContext* context, const v1::TransferRequest* request,
                        v1::TransferResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++attempts_;
    const std::string& id = request->transfer_id();
    request_ids_.push_back(id);
    if (Shed(context, "transfer:" + id)) return ShedStatus();
    if (id.empty() || request->from_account_id() == request->to_account_id() ||
        request->amount() <= 0) {
      return Refusal(grpc::StatusCode::INVALID_ARGUMENT, v1::INVALID_REQUEST, "bad transfer");
    }
    const bool first = ++transfer_attempts_[id] == 1;
    const auto recorded = transfers_.find(id);
    if (recorded != transfers_.end() && !shedding_.no_transfer_records) {
      return Replay(recorded->second, *request, response);
    }
    TransferEnding ending = TransferEnding::kAnswer;
    if (first) {
      const auto& endings = shedding_.first_transfer_endings;
      ending = endings[transfer_count_++ % endings.size()];
    }
    if (ending != TransferEnding::kAnswer) ambiguous_ids_.push_back(id);
    if (ending == TransferEnding::kDropThenUnavailable) {
      return {grpc::StatusCode::UNAVAILABLE, "fake: connection lost before the transfer"};
    }
    const grpc::Status decided = Decide(*request, response);
    if (ending == TransferEnding::kDecideThenUnavailable) {
      return {grpc::StatusCode::UNAVAILABLE, "fake: connection lost after the transfer"};
    }
    if (ending == TransferEnding::kPendingThenUnavailable) {
      // Words unlike the server's: the client must read TRANSFER_PENDING from the reason.
      return Refusal(grpc::StatusCode::UNAVAILABLE, v1::TRANSFER_PENDING,
                     "fake: transfer " + id + " is between its two shards");
    }
    return decided;
  }

  grpc::Status GetTransfer(grpc::ServerContext* context, const v1::GetTransferRequest* request,
                           v1::GetTransferResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++attempts_;
    if (Shed(context, "get-transfer:" + request->transfer_id())) return ShedStatus();
    if (shedding_.no_transfer_records) {
      return Refusal(grpc::StatusCode::FAILED_PRECONDITION, v1::NOT_DURABLE,
                     "the server keeps no transfer records (--durability=none)");
    }
    const auto found = transfers_.find(request->transfer_id());
    if (found == transfers_.end()) {
      return Refusal(grpc::StatusCode::NOT_FOUND, v1::TRANSFER_NOT_FOUND,
                     "transfer " + request->transfer_id() + " not found: no durable record");
    }
    *response = found->second;
    if (++queries_[request->transfer_id()] <= shedding_.get_transfer_pending) {
      response->set_state(v1::TRANSFER_STATE_PENDING);
      response->set_to_balance(0);
      response->clear_credited_time();
      response->clear_finished_time();
      response->set_refusal_code(0);
      response->clear_refusal_message();
    }
    return grpc::Status::OK;
  }

  // The whole history in one page, newest first (page_size and page_token are ignored).
  grpc::Status History(grpc::ServerContext* context, const v1::HistoryRequest* request,
                       v1::HistoryResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++attempts_;
    if (Shed(context, "history:" + request->account_id())) return ShedStatus();
    const auto found = history_.find(request->account_id());
    if (found == history_.end()) {
      return Refusal(grpc::StatusCode::NOT_FOUND, v1::ACCOUNT_NOT_FOUND, "no such account");
    }
    for (auto entry = found->second.rbegin(); entry != found->second.rend(); ++entry) {
      *response->add_entries() = *entry;
    }
    return grpc::Status::OK;
  }

  grpc::Status Deposit(grpc::ServerContext* context, const v1::DepositRequest* request,
                       v1::DepositResponse* response) override {
    return Write(context, request->account_id(), request->amount(), request->request_id(),
                 response);
  }
  grpc::Status Withdraw(grpc::ServerContext* context, const v1::WithdrawRequest* request,
                        v1::WithdrawResponse* response) override {
    return Write(context, request->account_id(), -request->amount(), request->request_id(),
                 response);
  }
  // Each operation as its own RPC, in order.
  grpc::Status Apply(grpc::ServerContext* context, const v1::ApplyRequest* request,
                     v1::ApplyResponse* response) override {
    for (const v1::ApplyOperation& operation : request->operations()) {
      *response->add_results() = ApplyOne(context, operation);
    }
    absl::MutexLock lock(&mu_);
    if (++apply_calls_ <= shedding_.apply_calls_lost) {
      return {grpc::StatusCode::UNAVAILABLE, "fake: connection lost after the Apply call"};
    }
    return grpc::Status::OK;
  }

  grpc::Status Balance(grpc::ServerContext* context, const v1::BalanceRequest* request,
                       v1::BalanceResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++attempts_;
    if (Shed(context, "balance:" + request->account_id())) return ShedStatus();
    const auto found = balances_.find(request->account_id());
    if (found == balances_.end()) {
      return Refusal(grpc::StatusCode::NOT_FOUND, v1::ACCOUNT_NOT_FOUND, "no such account");
    }
    response->set_balance(found->second);
    return grpc::Status::OK;
  }

 private:
  struct Recorded {
    grpc::StatusCode code;
    int64_t balance;
  };

  v1::ApplyResult ApplyOne(grpc::ServerContext* context, const v1::ApplyOperation& operation) {
    v1::ApplyResult result;
    grpc::Status status;
    if (operation.has_deposit()) {
      v1::DepositResponse response;
      status = Deposit(context, &operation.deposit(), &response);
      result.set_balance(response.balance());
      result.set_replayed(response.replayed());
    } else if (operation.has_withdraw()) {
      v1::WithdrawResponse response;
      status = Withdraw(context, &operation.withdraw(), &response);
      result.set_balance(response.balance());
      result.set_replayed(response.replayed());
    } else if (operation.has_balance()) {
      v1::BalanceResponse response;
      status = Balance(context, &operation.balance(), &response);
      result.set_balance(response.balance());
    } else if (operation.has_transfer()) {
      v1::TransferResponse response;
      status = Transfer(context, &operation.transfer(), &response);
      result.set_balance(response.from_balance());
      result.set_to_balance(response.to_balance());
      result.set_replayed(response.replayed());
    } else {
      status = Refusal(grpc::StatusCode::INVALID_ARGUMENT, v1::INVALID_REQUEST, "no operation");
    }
    if (!status.ok()) {
      result.Clear();
      result.set_code(status.error_code());
      result.set_message(status.error_message());
      std::optional<ErrorDetails> details = DecodeErrorDetails(status.error_details());
      if (details.has_value()) result.set_reason(details->reason);
    }
    return result;
  }

  // Applies a transfer or refuses it, records the outcome, and answers as the ledger would.
  grpc::Status Decide(const v1::TransferRequest& request, v1::TransferResponse* response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    v1::GetTransferResponse& record = transfers_[request.transfer_id()];
    record.set_transfer_id(request.transfer_id());
    record.set_from_account_id(request.from_account_id());
    record.set_to_account_id(request.to_account_id());
    record.set_amount(request.amount());
    record.mutable_created_time()->set_seconds(std::time(nullptr));
    const auto from = balances_.find(request.from_account_id());
    const auto to = balances_.find(request.to_account_id());
    grpc::Status refusal = grpc::Status::OK;
    if (from == balances_.end()) {
      refusal = Refusal(
          grpc::StatusCode::NOT_FOUND, v1::ACCOUNT_NOT_FOUND,
          "account " + request.from_account_id() + " not found: it has never received a deposit");
    } else if (to == balances_.end()) {
      refusal = Refusal(
          grpc::StatusCode::NOT_FOUND, v1::COUNTERPARTY_NOT_FOUND,
          "account " + request.to_account_id() + " not found: it has never received a deposit");
    } else if (from->second < request.amount()) {
      refusal = Refusal(grpc::StatusCode::FAILED_PRECONDITION, v1::INSUFFICIENT_FUNDS,
                        "insufficient funds");
    }
    *record.mutable_finished_time() = record.created_time();
    if (!refusal.ok()) {
      record.set_state(v1::TRANSFER_STATE_REFUSED);
      record.set_refusal_code(refusal.error_code());
      record.set_refusal_message(refusal.error_message());
      record.set_refusal_reason(DecodeErrorDetails(refusal.error_details())->reason);
      return refusal;
    }
    from->second -= request.amount();
    to->second += request.amount();
    AddEntry(request.from_account_id(), v1::OPERATION_TRANSFER_OUT, request.amount(), from->second,
             "", request.transfer_id(), request.to_account_id());
    AddEntry(request.to_account_id(), v1::OPERATION_TRANSFER_IN, request.amount(), to->second, "",
             request.transfer_id(), request.from_account_id());
    record.set_state(v1::TRANSFER_STATE_COMMITTED);
    record.set_from_balance(from->second);
    record.set_to_balance(to->second);
    *record.mutable_credited_time() = record.created_time();
    response->set_from_balance(from->second);
    response->set_to_balance(to->second);
    return grpc::Status::OK;
  }

  // The answer to a retry of a recorded transfer.
  static grpc::Status Replay(const v1::GetTransferResponse& record,
                             const v1::TransferRequest& request, v1::TransferResponse* response) {
    if (record.from_account_id() != request.from_account_id() ||
        record.to_account_id() != request.to_account_id() || record.amount() != request.amount()) {
      return Refusal(grpc::StatusCode::ALREADY_EXISTS, v1::TRANSFER_ID_REUSED,
                     "transfer_id " + request.transfer_id() +
                         " was already used for another "
                         "transfer");
    }
    if (record.state() == v1::TRANSFER_STATE_REFUSED) {
      return Refusal(static_cast<grpc::StatusCode>(record.refusal_code()), record.refusal_reason(),
                     record.refusal_message());
    }
    response->set_from_balance(record.from_balance());
    response->set_to_balance(record.to_balance());
    response->set_replayed(true);
    return grpc::Status::OK;
  }

  void AddEntry(const std::string& account, v1::Operation operation, int64_t amount,
                int64_t balance_after, const std::string& request_id,
                const std::string& transfer_id, const std::string& counterparty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<v1::HistoryEntry>& entries = history_[account];
    v1::HistoryEntry& entry = entries.emplace_back();
    entry.set_sequence(entries.size());
    entry.set_operation(operation);
    entry.set_amount(amount);
    entry.set_balance_after(balance_after);
    entry.set_request_id(request_id);
    entry.mutable_time()->set_seconds(std::time(nullptr));
    entry.set_transfer_id(transfer_id);
    entry.set_counterparty_account_id(counterparty);
  }

  // Words unlike the server's: the client must read MAILBOX_FULL from the reason.
  grpc::Status ShedStatus() const {
    std::optional<std::chrono::milliseconds> delay;
    int64_t millis = 0;
    if (shedding_.pushback_ms.has_value() && absl::SimpleAtoi(*shedding_.pushback_ms, &millis) &&
        millis >= 0) {
      delay = std::chrono::milliseconds(millis);
    }
    return Refusal(grpc::StatusCode::RESOURCE_EXHAUSTED, v1::MAILBOX_FULL,
                   "fake: the shard could not take it", delay);
  }

  bool Shed(grpc::ServerContext* context, const std::string& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (++attempts_of_[key] > shedding_.attempts_shed) return false;
    if (shedding_.pushback_ms.has_value()) {
      context->AddTrailingMetadata("grpc-retry-pushback-ms", *shedding_.pushback_ms);
    }
    return true;
  }

  // `delta` > 0 deposits, < 0 withdraws.
  template <typename Response>
  grpc::Status Write(grpc::ServerContext* context, const std::string& account, int64_t delta,
                     const std::string& request_id, Response* response) {
    absl::MutexLock lock(&mu_);
    ++attempts_;
    request_ids_.push_back(request_id);
    if (Shed(context, "write:" + request_id)) return ShedStatus();
    if (const auto done = recorded_.find(request_id); done != recorded_.end()) {
      response->set_balance(done->second.balance);
      response->set_replayed(true);
      if (done->second.code == grpc::StatusCode::OK) return grpc::Status::OK;
      return Refusal(done->second.code, v1::INSUFFICIENT_FUNDS, "replayed");
    }
    int64_t& balance = balances_[account];
    if (balance + delta < 0) {
      recorded_[request_id] = {grpc::StatusCode::FAILED_PRECONDITION, balance};
      return Refusal(grpc::StatusCode::FAILED_PRECONDITION, v1::INSUFFICIENT_FUNDS,
                     "insufficient funds");
    }
    const bool faulted = first_write_fault_.has_value() && ++faulted_[request_id] == 1;
    if (faulted && !first_write_fault_->applied) {
      const auto& fault = *first_write_fault_;
      return Refusal(fault.code, fault.reason, fault.words);
    }
    balance += delta;
    AddEntry(account, delta > 0 ? v1::OPERATION_DEPOSIT : v1::OPERATION_WITHDRAW,
             delta > 0 ? delta : -delta, balance, request_id, "", "");
    recorded_[request_id] = {grpc::StatusCode::OK, balance};
    response->set_balance(balance);
    if (faulted) {
      const auto& fault = *first_write_fault_;
      return Refusal(fault.code, fault.reason, fault.words);
    }
    return grpc::Status::OK;
  }

  const Shedding shedding_;
  const std::optional<WriteFault> first_write_fault_;
  std::unique_ptr<grpc::Server> server_;
  mutable absl::Mutex mu_;
  std::map<std::string, int> attempts_of_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> balances_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Recorded> recorded_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> request_ids_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1::GetTransferResponse> transfers_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<v1::HistoryEntry>> history_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> transfer_attempts_ ABSL_GUARDED_BY(mu_);  // Unshed, per transfer_id.
  std::map<std::string, int> queries_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> faulted_ ABSL_GUARDED_BY(
      mu_);  // Write faults, per request_id.  // GetTransfer calls, per transfer_id.
  std::vector<std::string> ambiguous_ids_ ABSL_GUARDED_BY(mu_);  // First attempt not answered.
  size_t transfer_count_ ABSL_GUARDED_BY(mu_) = 0;
  int attempts_ ABSL_GUARDED_BY(mu_) = 0;
  int apply_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_E2E_FAKE_LEDGER_H_
