#include "sim/auditor.h"

#include <cstdint>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "shard/check.h"

namespace ledger::sim {
namespace {

struct Expected {
  Outcome outcome = Outcome::kOk;
  int64_t balance = 0;
};

// The ledger rules (shard/ledger_rules.h, ApplyOperation), restated in wide arithmetic so that a
// bug in the shard's own arithmetic is not shared by the model.
Expected Decide(Op op, const std::optional<AccountState>& account, int64_t amount,
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

std::optional<AccountState> Find(const std::map<std::string, AccountState>& accounts,
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
  if (reply.outcome == Outcome::kRequestIdReused) {
    absl::StrAppend(&text, " (recorded ", OpName(reply.recorded_op), " ", reply.recorded_amount,
                    ")");
  }
  return text;
}

bool Same(const Reply& a, const Reply& b) {
  if (a.outcome != b.outcome || a.balance != b.balance || a.replayed != b.replayed) return false;
  if (a.outcome == Outcome::kRequestIdReused) {
    return a.recorded_op == b.recorded_op && a.recorded_amount == b.recorded_amount;
  }
  return true;
}

Reply BalanceReply(const std::optional<AccountState>& account) {
  return account.has_value() ? Reply{.outcome = Outcome::kOk, .balance = account->balance}
                             : Reply{.outcome = Outcome::kAccountNotFound};
}

int64_t Signed(Op op, int64_t amount) { return op == Op::kDeposit ? amount : -amount; }

}  // namespace

std::string DescribeCall(const AuditedCall& call) {
  std::string text = absl::StrCat(OpName(call.op), " ", call.account_id);
  if (call.op != Op::kBalance) absl::StrAppend(&text, " amount ", call.amount);
  if (!call.request_id.empty()) absl::StrAppend(&text, " request_id ", call.request_id);
  if (call.caller_gone) absl::StrAppend(&text, " [caller gone]");
  if (call.abandoned) absl::StrAppend(&text, " [abandoning]");
  if (call.handler_throws) absl::StrAppend(&text, " [handler throws]");
  absl::StrAppend(&text, " -> ", DescribeReply(call.reply));
  return text;
}

std::string Auditor::CheckBatch(const std::vector<AuditedCall>& calls, absl::Time batch_time,
                                const BatchFacts& facts) {
  const bool write_failed = facts.write_called && facts.write_result != WriteFault::kNone;
  LEDGER_CHECK(!write_failed || facts.lookup_failures == 0);
  // Lookups that may have failed: a mutation answered kStorageFailed, or a read answered from the
  // memory of an unsettled account, may each be explained by one of them.
  int lookup_failures_left = facts.lookup_failures;

  // `base`: memory with this batch's settles (what a rollback restores); `work`: base plus this
  // batch's decisions.
  Accounts base = memory_;
  Accounts work = memory_;
  std::set<std::string> unsettled = maybe_unsettled_;
  std::map<RequestKey, RequestRecord> batch_records;
  std::set<std::string> mutated;
  Wide batch_net = 0;
  bool writes = false;

  auto settle = [&](const std::string& id) {
    Put(base, id, Find(durable_, id));
    Put(work, id, Find(durable_, id));
    unsettled.erase(id);
  };
  auto violation = [&](size_t i, const std::string& legal) {
    return absl::StrCat("illegal reply to call ", i, " (", DescribeCall(calls[i]),
                        "); legal: ", legal);
  };

  for (size_t i = 0; i < calls.size(); ++i) {
    const AuditedCall& call = calls[i];
    if (call.completions != 1) {
      return absl::StrCat("call ", i, " (", DescribeCall(call), ") completed ", call.completions,
                          " times; every accepted message is completed exactly once");
    }
    // In a failed batch every reply is rewritten after the decisions; those are checked below.
    const bool check_now = !write_failed;
    if (call.caller_gone) {
      if (call.reply.outcome != Outcome::kCallerGone) return violation(i, "caller_gone");
      continue;
    }
    if (call.abandoned) {
      // Never decided, so answered kShuttingDown whether or not the batch's write failed.
      if (call.reply.outcome != Outcome::kShuttingDown) return violation(i, "shutting_down");
      continue;
    }
    if (call.handler_throws) {
      // A fault before the handler touched anything: answered kInternal, even after a failed
      // write, and never applied.
      if (call.reply.outcome != Outcome::kInternal) return violation(i, "internal");
      continue;
    }
    const bool mutation = call.op != Op::kBalance;
    if (unsettled.count(call.account_id) > 0) {
      // The shard reloads the account first; only a failed lookup leaves memory as it was.
      const Reply settled_read = BalanceReply(Find(durable_, call.account_id));
      const Reply stale_read = BalanceReply(Find(work, call.account_id));
      const bool lookup_may_have_failed = lookup_failures_left > 0 && !write_failed;
      if (lookup_may_have_failed && !mutation) {
        // Settled only when the read proves it; equal reads leave the account unsettled.
        if (Same(call.reply, stale_read)) {
          if (!Same(settled_read, stale_read)) --lookup_failures_left;
          continue;
        }
        if (Same(call.reply, settled_read)) {
          settle(call.account_id);
          continue;
        }
        return violation(i, absl::StrCat(DescribeReply(settled_read), " or, unsettled, ",
                                         DescribeReply(stale_read)));
      }
      if (lookup_may_have_failed && call.reply.outcome == Outcome::kStorageFailed) {
        --lookup_failures_left;  // Its reload (or request lookup) failed: not applied.
        continue;
      }
      settle(call.account_id);
    }
    if (!mutation) {
      const Reply expected = BalanceReply(Find(work, call.account_id));
      if (check_now && !Same(call.reply, expected)) return violation(i, DescribeReply(expected));
      continue;
    }
    const RequestKey key{call.account_id, call.request_id};
    if (!call.request_id.empty()) {
      std::optional<RequestRecord> record;
      if (auto in_batch = batch_records.find(key); in_batch != batch_records.end()) {
        record = in_batch->second;
      } else {
        if (check_now && lookup_failures_left > 0 &&
            call.reply.outcome == Outcome::kStorageFailed) {
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
        const Reply expected =
            record->op != call.op || record->amount != call.amount
                ? Reply{.outcome = Outcome::kRequestIdReused,
                        .recorded_op = record->op,
                        .recorded_amount = record->amount}
                : Reply{.outcome = record->outcome, .balance = record->balance, .replayed = true};
        if (check_now && !Same(call.reply, expected)) {
          return violation(
              i, absl::StrCat(DescribeReply(expected), " (recorded for ", call.request_id, ")"));
        }
        continue;
      }
    }
    const std::optional<AccountState> before = Find(work, call.account_id);
    const Expected decided = Decide(call.op, before, call.amount, policy_);
    const Reply expected{.outcome = decided.outcome, .balance = decided.balance};
    if (check_now && !Same(call.reply, expected)) return violation(i, DescribeReply(expected));
    if (decided.outcome == Outcome::kInvalidAmount) continue;
    if (decided.outcome == Outcome::kOk) {
      const AccountState after{.balance = decided.balance,
                               .sequence = before.has_value() ? before->sequence + 1 : 1};
      Put(work, call.account_id, after);
      mutated.insert(call.account_id);
      batch_net += Signed(call.op, call.amount);
      writes = true;
    }
    if (!call.request_id.empty()) {
      batch_records[key] = RequestRecord{.op = call.op,
                                         .amount = call.amount,
                                         .outcome = decided.outcome,
                                         .balance = decided.balance,
                                         .recorded_at = batch_time};
      writes = true;
    }
  }

  if (facts.write_called != writes) {
    return absl::StrCat("the batch ", facts.write_called ? "wrote" : "did not write",
                        " to the store, but its decisions ", writes ? "changed" : "changed nothing",
                        " durable");
  }
  if (!write_failed) {
    // Written (or nothing to write): the decisions are durable and acknowledged.
    for (const std::string& id : mutated) Put(durable_, id, Find(work, id));
    for (const auto& [key, record] : batch_records) records_[key] = record;
    memory_ = work;
    maybe_unsettled_ = unsettled;
    acknowledged_net_ += batch_net;
    return "";
  }

  // The write failed: the shard rolled memory back to `base` and rewrote every reply.
  for (size_t i = 0; i < calls.size(); ++i) {
    const AuditedCall& call = calls[i];
    if (call.caller_gone || call.abandoned || call.handler_throws) continue;
    const Reply expected = call.op != Op::kBalance ? Reply{.outcome = Outcome::kStorageFailed}
                                                   : BalanceReply(Find(base, call.account_id));
    // An account no handler of this batch settled may have been settled by an earlier batch
    // whose reply could not tell (its lookup failure may have been the request's, not the
    // account's): memory then holds the durable state, not the stale one.
    if (call.op == Op::kBalance && unsettled.count(call.account_id) > 0 &&
        Same(call.reply, BalanceReply(Find(durable_, call.account_id)))) {
      if (!Same(call.reply, expected)) {
        Put(base, call.account_id, Find(durable_, call.account_id));  // Now known settled.
        unsettled.erase(call.account_id);
      }
      continue;
    }
    if (!Same(call.reply, expected)) {
      return violation(i, absl::StrCat(DescribeReply(expected), " (the batch's write failed)"));
    }
    if (call.op != Op::kBalance) ++ambiguous_calls_;
  }
  if (facts.write_result == WriteFault::kFailLanded) {
    for (const std::string& id : mutated) Put(durable_, id, Find(work, id));
    for (const auto& [key, record] : batch_records) records_[key] = record;
    landed_ambiguous_net_ += batch_net;
  }
  memory_ = base;
  maybe_unsettled_ = unsettled;
  maybe_unsettled_.insert(mutated.begin(), mutated.end());
  return "";
}

std::string Auditor::CheckStore(const FaultStore& store) const {
  if (store.accounts() != durable_) {
    std::string text = "the store's accounts differ from the model:";
    for (const auto& [id, state] : store.accounts()) {
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
  std::map<std::string, AccountState> replayed;
  for (const JournalEntry& entry : store.journal()) {
    AccountState& state = replayed[entry.account_id];
    if (entry.sequence != state.sequence + 1) {
      return absl::StrCat("journal of ", entry.account_id, ": entry ", entry.sequence, " follows ",
                          state.sequence);
    }
    const int64_t expected = state.balance + Signed(entry.op, entry.amount);
    if (entry.balance_after != expected) {
      return absl::StrCat("journal of ", entry.account_id, " entry ", entry.sequence,
                          ": balance_after ", entry.balance_after, ", previous ± amount is ",
                          expected);
    }
    state = {.balance = entry.balance_after, .sequence = entry.sequence};
  }
  if (replayed != store.accounts()) {
    return "the accounts are not the end of their journals";
  }
  Wide sum = 0;
  for (const auto& [id, state] : store.accounts()) sum += state.balance;
  if (sum != acknowledged_net_ + landed_ambiguous_net_) {
    return absl::StrCat("conservation: the store holds ", static_cast<double>(sum),
                        ", acknowledged net ", static_cast<double>(acknowledged_net_),
                        " + landed ambiguous ", static_cast<double>(landed_ambiguous_net_));
  }
  return "";
}

void Auditor::Restart() {
  memory_ = durable_;
  maybe_unsettled_.clear();
}

}  // namespace ledger::sim
