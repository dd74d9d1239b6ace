#include "sim/auditor.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace ledger::sim {
namespace {

struct Expected {
  Outcome outcome = Outcome::kOk;
  int64_t balance = 0;
};

// The ledger rules (shard/ledger_rules.h, ApplyOperation), restated in wide arithmetic so that a
// bug in the shard's own arithmetic is not shared by the model.
Expected DecideByRules(Op op, const std::optional<AccountState>& account, int64_t amount,
                       const LedgerPolicy& policy) {
  const int64_t current = account.has_value() ? account->balance : 0;
  if (op != Op::kBalance && amount <= 0) return {Outcome::kInvalidAmount, current};
  if (!account.has_value() && op != Op::kDeposit) return {Outcome::kAccountNotFound, 0};
  if (op == Op::kDeposit) {
    const Wide after = Wide{current} + amount;
    if (after > std::numeric_limits<int64_t>::max()) return {Outcome::kOverflow, current};
    return {Outcome::kOk, static_cast<int64_t>(after)};
  }
  if (op == Op::kWithdraw) {
    const Wide after = Wide{current} - amount;
    if (after < -Wide{policy.overdraft_limit}) return {Outcome::kInsufficientFunds, current};
    return {Outcome::kOk, static_cast<int64_t>(after)};
  }
  return {Outcome::kOk, current};
}

std::optional<AccountState> FindState(const std::map<std::string, AccountState>& accounts,
                                      const std::string& id) {
  auto found = accounts.find(id);
  if (found == accounts.end()) return std::nullopt;
  return found->second;
}

void Put(std::map<std::string, AccountState>& accounts, const std::string& id,
         const std::optional<AccountState>& state) {
  if (state.has_value()) {
    accounts[id] = *state;
  } else {
    accounts.erase(id);
  }
}

std::string DescribeReply(const Reply& reply) {
  std::string text = absl::StrCat(OutcomeName(reply.outcome), " balance ", reply.balance);
  if (reply.replayed) absl::StrAppend(&text, " (replayed)");
  if (const auto* reused = std::get_if<ReusedRequestId>(&reply.detail)) {
    absl::StrAppend(&text, " (recorded ", OpName(reused->op), " ", reused->amount, ")");
  }
  const TransferReply transfer = reply.transfer();
  if (transfer.debited) absl::StrAppend(&text, " (debited)");
  if (transfer.to_balance != 0) absl::StrAppend(&text, " to_balance ", transfer.to_balance);
  const auto* reused_transfer = std::get_if<ReusedTransferId>(&reply.detail);
  if (reused_transfer != nullptr && reused_transfer->record != nullptr) {
    const TransferRecord& recorded = *reused_transfer->record;
    absl::StrAppend(&text, " (recorded ", recorded.from, "->", recorded.to, " ", recorded.amount,
                    ")");
  }
  return text;
}

bool Same(const Reply& a, const Reply& b) {
  if (a.outcome != b.outcome || a.balance != b.balance || a.replayed != b.replayed) return false;
  const auto* a_reused = std::get_if<ReusedRequestId>(&a.detail);
  const auto* b_reused = std::get_if<ReusedRequestId>(&b.detail);
  if (a_reused == nullptr || b_reused == nullptr) return a_reused == b_reused;
  return a_reused->op == b_reused->op && a_reused->amount == b_reused->amount;
}

Reply BalanceReply(const std::optional<AccountState>& account) {
  return account.has_value() ? Reply{.outcome = Outcome::kOk, .balance = account->balance}
                             : Reply{.outcome = Outcome::kAccountNotFound};
}

int64_t Signed(Op op, int64_t amount) { return op == Op::kDeposit ? amount : -amount; }

// The answer to `call` from a record of its request_id: the recorded reply, or kRequestIdReused
// when the call differs from the recorded one.
Reply ReplayOf(const RequestRecord& record, const AuditedCall& call) {
  if (record.op != call.op || record.amount != call.amount) {
    return Reply{.outcome = Outcome::kRequestIdReused,
                 .detail = ReusedRequestId{.op = record.op, .amount = record.amount}};
  }
  return Reply{.outcome = record.outcome, .balance = record.balance, .replayed = true};
}

}  // namespace

std::string DescribeCall(const AuditedCall& call) {
  std::string text = absl::StrCat(OpName(call.op), " ", call.account_id);
  if (call.op >= Op::kTransfer) {
    absl::StrAppend(&text, " counterparty ", call.counterparty);
    if (call.local_transfer) absl::StrAppend(&text, " [local]");
    if (call.resume_only) absl::StrAppend(&text, " [resume_only]");
    if (call.op == Op::kTransferSettle) {
      absl::StrAppend(&text, " credit ", OutcomeName(call.credit_outcome), " ",
                      call.credit_balance);
    }
    if (call.flight >= 0) absl::StrAppend(&text, " flight ", call.flight);
  }
  if (call.op != Op::kBalance) absl::StrAppend(&text, " amount ", call.amount);
  if (!call.request_id.empty()) absl::StrAppend(&text, " request_id ", call.request_id);
  if (call.caller_gone) absl::StrAppend(&text, " [caller gone]");
  if (call.abandoned) absl::StrAppend(&text, " [abandoning]");
  if (call.handler_throws) absl::StrAppend(&text, " [handler throws]");
  absl::StrAppend(&text, " -> ", DescribeReply(call.reply));
  return text;
}

uint64_t Auditor::BeginBatch() {
  Batch batch;
  batch.id = next_id_++;
  batches_.push_back(std::move(batch));
  return batches_.back().id;
}

Auditor::Batch* Auditor::FindBatch(uint64_t id) {
  for (Batch& batch : batches_) {
    if (batch.id == id) return &batch;
  }
  return nullptr;
}

std::string Auditor::Decide(uint64_t id, const std::vector<AuditedCall>& calls,
                            absl::Time batch_time, int lookup_failures, bool sealed, bool wrote) {
  Batch* batch = FindBatch(id);
  LEDGER_CHECK(batch != nullptr && batch->state == Batch::State::kDeciding);
  // Lookups that may have failed: a mutation answered kStorageFailed, or a read answered from the
  // memory of an unsettled account, may each be explained by one of them.
  int lookup_failures_left = lookup_failures;

  // `work`: memory plus this batch's settles and decisions.
  Accounts work = memory_;
  std::set<std::string> unsettled = maybe_unsettled_;
  std::map<RequestKey, RequestRecord>& batch_records = batch->records;
  // Accounts changed by batches whose write is not durable.
  std::set<std::string> undurable;
  for (const Batch& other : batches_) {
    if (other.state != Batch::State::kSealed && other.state != Batch::State::kFailed) continue;
    for (const auto& [account, state] : other.after) undurable.insert(account);
  }
  Wide batch_net = 0;
  bool writes = false;
  bool has_transfer = false;

  auto settle = [&](const std::string& account) {
    Put(work, account, FindState(durable_, account));
    unsettled.erase(account);
  };
  auto violation = [&](size_t i, const std::string& legal) {
    AuditedCall shown = calls[i];
    shown.reply = shown.decided;
    return absl::StrCat("batch ", id, ": illegal decision for call ", i, " (", DescribeCall(shown),
                        "); legal: ", legal);
  };

  for (size_t i = 0; i < calls.size(); ++i) {
    const AuditedCall& call = calls[i];
    const Reply& decided = call.decided;
    if (call.caller_gone) {
      if (decided.outcome != Outcome::kCallerGone) return violation(i, "caller_gone");
      continue;
    }
    if (call.abandoned) {
      if (decided.outcome != Outcome::kShuttingDown) return violation(i, "shutting_down");
      continue;
    }
    if (call.handler_throws) {
      // A fault before the handler touched anything: answered kInternal, never applied.
      if (decided.outcome != Outcome::kInternal) return violation(i, "internal");
      continue;
    }
    if (call.op >= Op::kTransfer) {
      has_transfer = true;  // The TransferAuditor's (its accounts are not this model's).
      continue;
    }
    const bool mutation = call.op != Op::kBalance;
    if (unsettled.count(call.account_id) > 0) {
      // The shard reloads the account first; only a failed lookup leaves memory as it was.
      const Reply settled_read = BalanceReply(FindState(durable_, call.account_id));
      const Reply stale_read = BalanceReply(FindState(work, call.account_id));
      const bool lookup_may_have_failed = lookup_failures_left > 0;
      if (lookup_may_have_failed && !mutation) {
        // Settled only when the read proves it; equal reads leave the account unsettled.
        if (Same(decided, stale_read)) {
          if (!Same(settled_read, stale_read)) --lookup_failures_left;
          continue;
        }
        if (Same(decided, settled_read)) {
          settle(call.account_id);
          continue;
        }
        return violation(i, absl::StrCat(DescribeReply(settled_read), " or, unsettled, ",
                                         DescribeReply(stale_read)));
      }
      if (lookup_may_have_failed && decided.outcome == Outcome::kStorageFailed) {
        --lookup_failures_left;  // Its reload (or request lookup) failed: not applied.
        continue;
      }
      settle(call.account_id);
    }
    // A decision that reads a change not yet durable (a batch in flight, or this one's).
    if (undurable.count(call.account_id) > 0 || batch->after.count(call.account_id) > 0) {
      ++undurable_reads_;
    }
    if (!mutation) {
      const Reply expected = BalanceReply(FindState(work, call.account_id));
      if (!Same(decided, expected)) return violation(i, DescribeReply(expected));
      continue;
    }
    const RequestKey key{call.account_id, call.request_id};
    if (!call.request_id.empty()) {
      std::optional<RequestRecord> record;
      bool in_flight = false;
      if (auto in_batch = batch_records.find(key); in_batch != batch_records.end()) {
        record = in_batch->second;
      } else if (auto pending = pending_.find(key); pending != pending_.end()) {
        // Recorded by a batch whose write was in flight when this one was prefetched: answered
        // from the shard's memory.
        record = pending->second.second;
        in_flight = true;
        // Expired (a clock jump while its write was in flight): a new decision.
        if (record->recorded_at + idempotency_ttl_ <= batch_time) record.reset();
      } else {
        if (lookup_failures_left > 0 && decided.outcome == Outcome::kStorageFailed) {
          --lookup_failures_left;  // The request lookup failed: not applied.
          continue;
        }
        if (auto stored = records_.find(key);
            stored != records_.end() &&
            stored->second.recorded_at + idempotency_ttl_ > batch_time) {
          record = stored->second;
        }
      }
      if (record.has_value()) {
        const Reply expected = ReplayOf(*record, call);
        if (!Same(decided, expected)) {
          return violation(
              i, absl::StrCat(DescribeReply(expected), " (recorded for ", call.request_id, ")"));
        }
        if (in_flight) ++in_flight_record_answers_;
        continue;
      }
    }
    const std::optional<AccountState> before = FindState(work, call.account_id);
    const Expected rule = DecideByRules(call.op, before, call.amount, policy_);
    const Reply expected{.outcome = rule.outcome, .balance = rule.balance};
    if (!Same(decided, expected)) return violation(i, DescribeReply(expected));
    if (rule.outcome == Outcome::kInvalidAmount) continue;
    if (rule.outcome == Outcome::kOk) {
      const AccountState after{.balance = rule.balance,
                               .sequence = before.has_value() ? before->sequence + 1 : 1};
      batch->before.emplace(call.account_id, before);  // Keeps the first: the state before.
      batch->after[call.account_id] = after;
      Put(work, call.account_id, after);
      batch_net += Signed(call.op, call.amount);
      writes = true;
    }
    if (!call.request_id.empty()) {
      batch_records[key] = RequestRecord{.op = call.op,
                                         .amount = call.amount,
                                         .outcome = rule.outcome,
                                         .balance = rule.balance,
                                         .recorded_at = batch_time};
      writes = true;
    }
  }

  // Transfer steps write what this model does not follow: then only a missing write is wrong.
  if (wrote != writes && !(wrote && has_transfer)) {
    return absl::StrCat("batch ", id, (wrote ? " carries a write" : " carries no write"),
                        ", but its decisions ", writes ? "changed" : "changed nothing", " durable");
  }
  batch->calls = calls;
  batch->net = batch_net;
  batch->writes = wrote;
  memory_ = std::move(work);
  maybe_unsettled_ = std::move(unsettled);
  if (!sealed) {
    // Answered at once: legal only for a batch that changed nothing durable and read nothing
    // undurable (every batch before it finished and was released).
    if (batches_.front().id != id) {
      return absl::StrCat("batch ", id, " was answered at once, but batch ", batches_.front().id,
                          " before it was not answered yet");
    }
    batch->state = Batch::State::kAnswered;
    for (const AuditedCall& call : calls) batch->to_release.push_back(call.decided);
    std::vector<Reply> early = std::move(batch->early);
    for (size_t i = 0; i < early.size(); ++i) Released(id, i, early[i]);
    if (early.size() != calls.size()) {
      return absl::StrCat("batch ", id, " was answered at once, but only ", early.size(),
                          " of its ", calls.size(), " messages were completed");
    }
    return TakeViolation();
  }
  if (!batch->early.empty()) {
    return absl::StrCat("batch ", id, ": a reply (", DescribeReply(batch->early.front()),
                        ") was released before the batch's write was durable");
  }
  batch->state = Batch::State::kSealed;
  for (const AuditedCall& call : calls) batch->to_release.push_back(call.decided);
  for (const auto& [key, record] : batch->records) pending_[key] = {id, record};
  return "";
}

void Auditor::Store(const Batch& batch) {
  ++model_version_;
  for (const auto& [account, state] : batch.after) durable_[account] = state;
  for (const auto& [key, record] : batch.records) records_[key] = record;
}

void Auditor::ForgetPending(const Batch& batch) {
  for (const auto& [key, record] : batch.records) Forget(batch.id, key);
}

void Auditor::Forget(uint64_t id, const RequestKey& key) {
  auto pending = pending_.find(key);
  if (pending != pending_.end() && pending->second.first == id) pending_.erase(pending);
}

void Auditor::Prefetched() {
  for (const auto& [id, key] : finished_records_) Forget(id, key);
  finished_records_.clear();
}

std::string Auditor::GroupWritten(size_t count, const WriteFacts& facts) {
  std::vector<Batch*> group;
  for (Batch& batch : batches_) {
    if (group.size() == count) break;
    if (batch.state == Batch::State::kSealed) group.push_back(&batch);
  }
  LEDGER_CHECK_EQ(group.size(), count);
  bool writes = false;
  for (const Batch* batch : group) writes = writes || batch->writes;
  if (facts.write_called != writes) {
    return absl::StrCat("a group of ", count, " batches from batch ", group.front()->id,
                        facts.write_called ? " wrote" : " did not write",
                        " to the store, but its decisions ", writes ? "changed" : "changed nothing",
                        " durable");
  }
  // Appending after a failed entry removed it first: its decisions are never durable.
  if (facts.repaired) undecided_.clear();
  // A group with nothing to write is durable once the writes before it are, unless it failed
  // behind one that failed (write_result set, the store not called).
  const bool ok = facts.write_result == WriteFault::kNone;
  // Its entry may be whole on disk, or committed by the next leader: a restart decides.
  const bool undecided = facts.write_called && (facts.write_result == WriteFault::kSyncFails ||
                                                facts.write_result == WriteFault::kLeadershipLost);
  if (undecided) undecided_.emplace_back();
  for (Batch* batch : group) {
    if (ok) {
      Store(*batch);
      acknowledged_net_ += batch->net;
      // The shard forgets its records at its next Prefetch; until then they answer from memory.
      for (const auto& [key, record] : batch->records)
        finished_records_.emplace_back(batch->id, key);
      batch->state = Batch::State::kDurable;
      continue;
    }
    if (undecided) undecided_.back().push_back(*batch);
    batch->state = Batch::State::kFailed;
  }
  return "";
}

std::string Auditor::RolledBack(const std::vector<std::vector<Reply>>& rewritten) {
  std::vector<Batch*> failed;
  for (Batch& batch : batches_) {
    if (batch.state == Batch::State::kSealed || batch.state == Batch::State::kFailed) {
      failed.push_back(&batch);
    }
  }
  if (failed.size() != rewritten.size() || failed.front()->state != Batch::State::kFailed) {
    return absl::StrCat("the core rolled back ", rewritten.size(), " batches; the model has ",
                        failed.size(), " undurable ones, the first of which must have failed");
  }
  // The shard restores every account they changed to its state before the first of them.
  for (auto batch = failed.rbegin(); batch != failed.rend(); ++batch) {
    for (const auto& [account, before] : (*batch)->before) Put(memory_, account, before);
  }
  for (size_t k = 0; k < failed.size(); ++k) {
    Batch& batch = *failed[k];
    ForgetPending(batch);
    LEDGER_CHECK_EQ(rewritten[k].size(), batch.calls.size());
    for (size_t i = 0; i < batch.calls.size(); ++i) {
      const AuditedCall& call = batch.calls[i];
      const Reply& reply = rewritten[k][i];
      // Never applied, so they keep their definite answer.
      const bool definite = call.decided.outcome == Outcome::kCallerGone ||
                            call.decided.outcome == Outcome::kShuttingDown ||
                            call.decided.outcome == Outcome::kInternal;
      const Reply expected = definite ? call.decided
                             : call.op != Op::kBalance
                                 ? Reply{.outcome = Outcome::kStorageFailed}
                                 : BalanceReply(FindState(memory_, call.account_id));
      // An account no failed batch changed may have been settled by a batch whose reply could not
      // tell (its lookup failure may have been the request's, not the account's): memory then
      // holds the durable state, not the stale one.
      if (!definite && call.op == Op::kBalance && maybe_unsettled_.count(call.account_id) > 0 &&
          Same(reply, BalanceReply(FindState(durable_, call.account_id)))) {
        if (!Same(reply, expected)) {
          Put(memory_, call.account_id,
              FindState(durable_, call.account_id));  // Now known settled.
          maybe_unsettled_.erase(call.account_id);
        }
      } else if (!Same(reply, expected)) {
        AuditedCall shown = call;
        shown.reply = call.decided;
        return absl::StrCat("batch ", batch.id, ": illegal reply after the rollback for call ", i,
                            " (", DescribeCall(shown), ", rewritten to ", DescribeReply(reply),
                            "); legal: ", DescribeReply(expected));
      }
      if (!definite && call.op != Op::kBalance) ++ambiguous_calls_;
      batch.to_release[i] = reply;
    }
    batch.state = Batch::State::kRolledBack;
  }
  // A failed write may have landed: the shard reloads these accounts before their next use.
  for (const Batch* batch : failed) {
    for (const auto& [account, before] : batch->before) maybe_unsettled_.insert(account);
  }
  return "";
}

void Auditor::Released(uint64_t id, size_t index, const Reply& reply) {
  auto fail = [&](const std::string& text) {
    if (violation_.empty()) {
      violation_ = absl::StrCat("batch ", id, " message ", index, " released ",
                                DescribeReply(reply), ": ", text);
    }
  };
  if (batches_.empty() || id < batches_.front().id) {
    return fail("completed again; every accepted message is completed exactly once");
  }
  Batch* batch = FindBatch(id);
  LEDGER_CHECK(batch != nullptr);
  if (batch->state == Batch::State::kDeciding) {
    // Seal may answer it at once; Decide judges that.
    if (batch->id != batches_.front().id) {
      return fail(absl::StrCat("released before batch ", batches_.front().id,
                               " (decided earlier) was released"));
    }
    batch->early.push_back(reply);
    return;
  }
  if (batch->state == Batch::State::kSealed) {
    return fail("released before its batch's write was durable");
  }
  if (batch->state == Batch::State::kFailed) {
    return fail("released after its batch's write failed but before the rollback");
  }
  if (batch != &batches_.front()) {
    return fail(absl::StrCat("released out of order: batch ", batches_.front().id,
                             " (decided earlier) was not released completely"));
  }
  if (index != batch->released) {
    return fail(index < batch->released
                    ? "completed again; every accepted message is completed exactly once"
                    : absl::StrCat("released before message ", batch->released, " of its batch"));
  }
  if (!Same(reply, batch->to_release[index])) {
    return fail(absl::StrCat("legal: ", DescribeReply(batch->to_release[index])));
  }
  batch->calls[index].reply = reply;
  if (++batch->released == batch->calls.size()) batches_.pop_front();
}

std::string Auditor::CheckMemory(
    const std::vector<std::pair<std::string, std::optional<AccountState>>>& core) const {
  bool in_flight = false;
  for (const Batch& batch : batches_) {
    in_flight =
        in_flight || batch.state == Batch::State::kSealed || batch.state == Batch::State::kFailed;
  }
  auto text = [](const std::optional<AccountState>& state) {
    return state.has_value() ? absl::StrCat(state->balance, "#", state->sequence)
                             : std::string("none");
  };
  for (const auto& [account, state] : core) {
    const std::optional<AccountState> model = FindState(memory_, account);
    const std::optional<AccountState> stored = FindState(durable_, account);
    if (maybe_unsettled_.count(account) > 0) {
      if (state != model && state != stored) {
        return absl::StrCat("the shard's memory holds ", account, "=", text(state),
                            "; legal: ", text(model), " (not yet settled) or ", text(stored),
                            " (settled)");
      }
      continue;
    }
    if (state != model) {
      return absl::StrCat("the shard's memory holds ", account, "=", text(state), "; the model ",
                          text(model));
    }
    if (!in_flight && state != stored) {
      return absl::StrCat("nothing is in flight and ", account,
                          " is settled, but the shard's memory holds ", text(state),
                          " and the store ", text(stored));
    }
  }
  return "";
}

std::string Auditor::CheckAllReleased() const {
  for (const Batch& batch : batches_) {
    if (batch.state == Batch::State::kDeciding && batch.early.empty()) continue;
    return absl::StrCat("batch ", batch.id, ": ", batch.released, " of its ", batch.calls.size(),
                        " messages were completed; every accepted message is completed");
  }
  return "";
}

std::string Auditor::CheckStore(const FaultStore& store) {
  // Nothing changed on either side since the last check passed: it passes again. (Checking every
  // step in full made the run quadratic in its length.)
  if (store.version() == checked_store_version_ && model_version_ == checked_model_version_) {
    return "";
  }
  Accounts stored;
  for (const auto& [id, state] : store.accounts()) {
    if (excluded_.count(id) == 0) stored.emplace(id, state);
  }
  if (stored != durable_) {
    std::string text = "the store's accounts differ from the model:";
    for (const auto& [id, state] : stored) {
      absl::StrAppend(&text, " store ", id, "=", state.balance, "#", state.sequence);
    }
    for (const auto& [id, state] : durable_) {
      absl::StrAppend(&text, " model ", id, "=", state.balance, "#", state.sequence);
    }
    return text;
  }
  if (store.requests() != records_) {
    return absl::StrCat("the store holds ", store.requests().size(), " request records, the model ",
                        records_.size(), " (or they differ in content)");
  }
  // The journal only grows: each entry is checked once, against the accounts replayed so far.
  LEDGER_CHECK_LE(journal_checked_, store.journal().size());
  for (; journal_checked_ < store.journal().size(); ++journal_checked_) {
    const JournalEntry& entry = store.journal()[journal_checked_];
    AccountState& state = replayed_[entry.account_id];
    if (entry.sequence != state.sequence + 1) {
      return absl::StrCat("journal of ", entry.account_id, ": entry ", entry.sequence, " follows ",
                          state.sequence);
    }
    const bool credit = entry.kind == EntryKind::kDeposit || entry.kind == EntryKind::kTransferIn ||
                        entry.kind == EntryKind::kTransferRefund;
    const int64_t expected = state.balance + (credit ? entry.amount : -entry.amount);
    if (entry.balance_after != expected) {
      return absl::StrCat("journal of ", entry.account_id, " entry ", entry.sequence,
                          ": balance_after ", entry.balance_after, ", previous ± amount is ",
                          expected);
    }
    state = {.balance = entry.balance_after, .sequence = entry.sequence};
  }
  if (replayed_ != store.accounts()) {
    return "the accounts are not the end of their journals";
  }
  Wide sum = 0;
  for (const auto& [id, state] : stored) sum += state.balance;
  if (sum != acknowledged_net_ + landed_ambiguous_net_) {
    return absl::StrCat("conservation: the store holds ", static_cast<double>(sum),
                        ", acknowledged net ", static_cast<double>(acknowledged_net_),
                        " + landed ambiguous ", static_cast<double>(landed_ambiguous_net_));
  }
  checked_store_version_ = store.version();
  checked_model_version_ = model_version_;
  return "";
}

void Auditor::Crashed() {
  std::deque<Batch> kept;
  for (Batch& batch : batches_) {
    if (batch.state == Batch::State::kSealed || batch.state == Batch::State::kFailed) {
      // Never answered: a client cannot tell whether its changes landed.
      for (const AuditedCall& call : batch.calls) {
        if (call.op != Op::kBalance) ++ambiguous_calls_;
      }
      continue;
    }
    kept.push_back(std::move(batch));
  }
  batches_.swap(kept);
}

void Auditor::Reopened(size_t kept_entries) {
  if (kept_entries > 0) {
    if (undecided_.size() < kept_entries) {
      // A write after the failure repaired the log, which takes the entry back for good.
      if (violation_.empty()) {
        violation_ =
            "the log kept, at a restart, an entry that a later write had repaired away: writes "
            "decided without it precede it";
      }
      return;
    }
    // Raft commits in order: the entries kept are the oldest.
    for (size_t entry = 0; entry < kept_entries; ++entry) {
      for (const Batch& batch : undecided_[entry]) {
        Store(batch);
        landed_ambiguous_net_ += batch.net;
      }
    }
  }
  undecided_.clear();
}

void Auditor::Restart() {
  LEDGER_CHECK(CheckAllReleased().empty());
  batches_.clear();  // Only registered batches never decided (none sent) may be left.
  memory_ = durable_;
  pending_.clear();
  finished_records_.clear();
  maybe_unsettled_.clear();
}

}  // namespace ledger::sim
