#include "sim/transfer_auditor.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace ledger::sim {
namespace {

// Outcomes no transfer step may give: the front end refuses them before a shard sees the call,
// or they belong to deposits and withdrawals.
bool NeverForTransfers(Outcome outcome) {
  switch (outcome) {
    case Outcome::kInvalidAccountId:
    case Outcome::kInvalidAmount:
    case Outcome::kMailboxFull:
    case Outcome::kInvalidRequestId:
    case Outcome::kRequestIdReused:
    case Outcome::kSameAccount:
    case Outcome::kInvalidTransferId:
      return true;
    default:
      return false;
  }
}

// Never applied: checked by the Auditor (caller gone, abandoning, handler fault), or "outcome
// unknown" (a failed write or lookup), which the store checks resolve.
bool NothingToCheck(Outcome outcome) {
  return outcome == Outcome::kCallerGone || outcome == Outcome::kShuttingDown ||
         outcome == Outcome::kInternal || outcome == Outcome::kStorageFailed;
}

std::string Describe(const AuditedCall& call, const Reply& reply) {
  AuditedCall shown = call;
  shown.reply = reply;
  return DescribeCall(shown);
}

}  // namespace

void TransferAuditor::Sent(const AuditedCall& call) {
  std::vector<Fields>& used = sent_[call.request_id];
  Fields fields{call.account_id, call.counterparty, call.amount};
  if (std::find(used.begin(), used.end(), fields) == used.end()) used.push_back(fields);
  ++sent_count_[{call.request_id, fields}];
}

bool TransferAuditor::Reused(const std::string& id, const Fields& fields) const {
  auto used = sent_.find(id);
  if (used == sent_.end()) return false;
  for (const Fields& other : used->second) {
    if (other != fields) return true;
  }
  return false;
}

std::string TransferAuditor::CheckDecided(const AuditedCall& call) const {
  const Reply& reply = call.decided;
  auto illegal = [&](const std::string& why) {
    return absl::StrCat("illegal transfer reply: ", Describe(call, reply), ": ", why);
  };
  if (NeverForTransfers(reply.outcome)) return illegal("an outcome no transfer step gives");
  if (NothingToCheck(reply.outcome)) {
    if (reply.transfer().debited) return illegal("debited, yet not applied");
    return "";
  }
  const bool missing_from = world_.missing.count(call.account_id) > 0;
  const Fields fields{call.account_id, call.counterparty, call.amount};
  const int64_t floor = -world_.policy.overdraft_limit;
  switch (call.op) {
    case Op::kTransfer: {
      if (call.resume_only) {
        if (reply.outcome != Outcome::kOk) return illegal("a resume_only step answers OK");
        if (reply.replayed) return illegal("a resume_only step replays nothing");
        return "";
      }
      const bool missing_to = world_.missing.count(call.counterparty) > 0;
      switch (reply.outcome) {
        case Outcome::kOk:
          // Across shards the source cannot know the destination: only a replayed commit
          // proves it was open.
          if (missing_from || (missing_to && (call.local_transfer || reply.replayed))) {
            return illegal("an account was never opened");
          }
          if (call.local_transfer) {
            if (reply.transfer().debited) return illegal("a local transfer is never left debited");
          } else if (reply.transfer().debited == reply.replayed) {
            return illegal("across shards: either debited now or a replay of its commit");
          }
          if (!reply.replayed && reply.balance < floor) return illegal("below the overdraft");
          return "";
        case Outcome::kTransferPending: {
          if (call.local_transfer) return illegal("a local transfer is never pending");
          // Sent before this call (which Sent counted already): that one's debit is pending.
          auto sent = sent_count_.find({call.request_id, fields});
          if (sent == sent_count_.end() || sent->second < 2) {
            return illegal("pending, but never sent before");
          }
          return "";
        }
        case Outcome::kAccountNotFound:
          if (!missing_from) return illegal("the source is open");
          return "";
        case Outcome::kCounterpartyNotFound:
          if (!missing_to) return illegal("the destination is open");
          if (!call.local_transfer && !reply.replayed) {
            return illegal("across shards only the credit knows the destination");
          }
          return "";
        case Outcome::kInsufficientFunds:
          if (Wide{reply.balance} - call.amount >= floor) {
            return illegal("the balance it names covers the amount");
          }
          return "";
        case Outcome::kOverflow:
          if (call.counterparty != world_.huge) return illegal("the destination cannot overflow");
          if (!call.local_transfer && !reply.replayed) {
            return illegal("across shards only the credit knows the destination");
          }
          return "";
        case Outcome::kTransferIdReused: {
          if (reply.replayed) {
            // A refusal recorded when the credit found the id's receipt of another transfer.
            if (call.local_transfer || !Reused(call.request_id, fields)) {
              return illegal("replayed as reused, but the id never had other fields");
            }
            return "";
          }
          const auto* reused = std::get_if<ReusedTransferId>(&reply.detail);
          if (reused == nullptr || reused->record == nullptr) {
            return illegal("names no recorded transfer");
          }
          {
            const Fields recorded{reused->record->from, reused->record->to, reused->record->amount};
            if (recorded == fields) return illegal("the recorded transfer has the same fields");
            auto used = sent_.find(call.request_id);
            if (used == sent_.end() ||
                std::count(used->second.begin(), used->second.end(), recorded) == 0) {
              return illegal("the recorded transfer was never sent with this id");
            }
          }
          return "";
        }
        default:
          return illegal("not among the legal outcomes of a transfer");
      }
    }
    case Op::kTransferCredit: {
      const Fields source{call.counterparty, call.account_id, call.amount};
      switch (reply.outcome) {
        case Outcome::kOk:
          if (world_.missing.count(call.account_id) > 0) return illegal("credited a missing one");
          return "";
        case Outcome::kCounterpartyNotFound:
          if (world_.missing.count(call.account_id) == 0) return illegal("the account is open");
          return "";
        case Outcome::kOverflow:
          if (call.account_id != world_.huge) return illegal("this account cannot overflow");
          return "";
        case Outcome::kTransferIdReused:
          if (!Reused(call.request_id, source)) return illegal("the id never had other fields");
          return "";
        default:
          return illegal("not among the legal outcomes of a credit");
      }
    }
    case Op::kTransferSettle:
      if (reply.outcome != call.credit_outcome) return illegal("the settle is the credit's result");
      if (reply.transfer().to_balance != call.credit_balance) {
        return illegal("the destination's balance is the credit's");
      }
      return "";
    default:
      return "";
  }
}

std::string TransferAuditor::Scan(const FaultStore& store) {
  const std::vector<JournalEntry>& journal = store.journal();
  for (; journal_scanned_ < journal.size(); ++journal_scanned_) {
    const JournalEntry& entry = journal[journal_scanned_];
    const std::string where =
        absl::StrCat("journal entry ", journal_scanned_, " (", entry.account_id, " #",
                     entry.sequence, ", transfer ", entry.request_id, "): ");
    switch (entry.kind) {
      case EntryKind::kDeposit:
      case EntryKind::kWithdraw:
        if (world_.accounts.count(entry.account_id) > 0 && entry.sequence != 1) {
          return absl::StrCat(where, "a deposit or withdrawal on a transfer account");
        }
        continue;
      case EntryKind::kTransferOut: {
        const Key key{entry.request_id, entry.account_id};
        Entry& out = outs_[key];
        if (++out.count > 1) return absl::StrCat(where, "a second TRANSFER_OUT of one source");
        out.counterparty = entry.counterparty;
        out.amount = entry.amount;
        in_flight_.insert(key);
        in_flight_amount_ += entry.amount;
        max_in_flight_ = std::max(max_in_flight_, static_cast<int64_t>(in_flight_.size()));
        continue;
      }
      case EntryKind::kTransferIn: {
        Entry& in = ins_[entry.request_id];
        if (++in.count > 1) return absl::StrCat(where, "a second TRANSFER_IN of one transfer");
        in.counterparty = entry.counterparty;
        in.amount = entry.amount;
        ++credits_;
        const Key key{entry.request_id, entry.counterparty};
        auto out = outs_.find(key);
        if (out == outs_.end() || out->second.counterparty != entry.account_id ||
            out->second.amount != entry.amount) {
          return absl::StrCat(where, "a TRANSFER_IN without the matching TRANSFER_OUT before it");
        }
        if (refunds_by_key_.count(key) > 0) {
          return absl::StrCat(where, "a TRANSFER_IN of a transfer already refunded");
        }
        in_flight_.erase(key);
        in_flight_amount_ -= entry.amount;
        continue;
      }
      case EntryKind::kTransferRefund: {
        const Key key{entry.request_id, entry.account_id};
        Entry& refund = refunds_by_key_[key];
        if (++refund.count > 1) return absl::StrCat(where, "a second TRANSFER_REFUND");
        ++refunds_;
        auto out = outs_.find(key);
        if (out == outs_.end() || out->second.amount != entry.amount ||
            out->second.counterparty != entry.counterparty) {
          return absl::StrCat(where, "a TRANSFER_REFUND without the matching TRANSFER_OUT");
        }
        if (HasIn(entry.request_id, entry.account_id)) {
          return absl::StrCat(where, "a TRANSFER_REFUND of a transfer that was credited");
        }
        auto receipt = store.credits().find(entry.request_id);
        if (receipt == store.credits().end() ||
            (receipt->second.from == entry.account_id && receipt->second.outcome == Outcome::kOk)) {
          return absl::StrCat(where, "a TRANSFER_REFUND without a refused credit's receipt");
        }
        in_flight_.erase(key);
        in_flight_amount_ -= entry.amount;
        continue;
      }
    }
  }
  return "";
}

bool TransferAuditor::HasIn(const std::string& id, const std::string& from) const {
  auto in = ins_.find(id);
  return in != ins_.end() && in->second.counterparty == from;
}

std::string TransferAuditor::CheckReleased(const AuditedCall& call, const Reply& reply,
                                           const FaultStore& store) {
  if (NothingToCheck(reply.outcome)) return "";
  std::string failure = Scan(store);
  if (!failure.empty()) return failure;
  auto violation = [&](const std::string& why) {
    return absl::StrCat("released ", Describe(call, reply), ", but ", why);
  };
  const std::string& id = call.request_id;
  // The source and destination of the transfer, whichever step this is.
  const bool credit = call.op == Op::kTransferCredit;
  const std::string& from = credit ? call.counterparty : call.account_id;
  const std::string& to = credit ? call.account_id : call.counterparty;
  const Key key{id, from};
  auto out = outs_.find(key);
  const bool debited =
      out != outs_.end() && out->second.counterparty == to && out->second.amount == call.amount;
  const bool credited = HasIn(id, from);
  const bool refunded = refunds_by_key_.count(key) > 0;
  const bool pending = store.pending().count(key) > 0;
  switch (call.op) {
    case Op::kTransfer:
      if (call.resume_only || reply.outcome == Outcome::kTransferPending) {
        if ((reply.transfer().debited || reply.outcome == Outcome::kTransferPending) && !debited) {
          return violation("its TRANSFER_OUT is not durable");
        }
        return "";
      }
      if (reply.outcome == Outcome::kOk && reply.transfer().debited) {
        // Its pending record may be final already: a retry that adopts a pending transfer read
        // back after a failed write races the flight that still carries it (both steps are
        // idempotent), and that flight's settle may be in the same durable group.
        if (!debited) return violation("its TRANSFER_OUT is not durable");
        return "";
      }
      if (reply.outcome == Outcome::kOk) {
        if (!debited || !credited) return violation("TRANSFER_OUT and TRANSFER_IN are not durable");
        return "";
      }
      // A definite refusal: nothing moved, or the debit came back.
      if (debited && !refunded) return violation("it was debited and not refunded");
      return "";
    case Op::kTransferCredit:
      if (reply.outcome == Outcome::kOk && !credited) {
        return violation("its TRANSFER_IN is not durable");
      }
      if (reply.outcome != Outcome::kOk && credited) return violation("it was credited");
      return "";
    case Op::kTransferSettle:
      if (!debited) return violation("its TRANSFER_OUT is not durable");
      if (pending) return violation("its record is still pending in the store");
      if (reply.outcome == Outcome::kOk && (!credited || refunded)) {
        return violation("committed without a durable TRANSFER_IN (or with a refund)");
      }
      if (reply.outcome != Outcome::kOk && (credited || !refunded)) {
        return violation("refused without a durable TRANSFER_REFUND (or with a credit)");
      }
      return "";
    default:
      return "";
  }
}

std::string TransferAuditor::CheckStore(const FaultStore& store) {
  if (store.version() == checked_version_) return "";
  std::string failure = Scan(store);
  if (!failure.empty()) return failure;
  Wide sum = 0;
  for (const std::string& account : world_.accounts) {
    auto state = store.accounts().find(account);
    if (state != store.accounts().end()) sum += state->second.balance;
  }
  if (sum + in_flight_amount_ != world_.initial_total) {
    return absl::StrCat("transfer conservation: the transfer accounts hold ",
                        static_cast<double>(sum), " and ", in_flight_.size(), " transfers carry ",
                        static_cast<double>(in_flight_amount_), " in flight; they began with ",
                        static_cast<double>(world_.initial_total));
  }
  for (const Key& key : in_flight_) {
    if (store.pending().count(key) == 0) {
      return absl::StrCat("transfer ", key.first, " from ", key.second,
                          " is debited, neither credited nor refunded, but not pending in the "
                          "store: nobody would resume it");
    }
  }
  for (const auto& [key, record] : store.pending()) {
    if (outs_.count(key) == 0) {
      return absl::StrCat("transfer ", key.first, " from ", key.second,
                          " is pending in the store without its TRANSFER_OUT");
    }
    if (record.from != key.second || record.state != TransferState::kPending) {
      return absl::StrCat("transfer ", key.first, ": the pending index holds another record");
    }
  }
  checked_version_ = store.version();
  return "";
}

std::string TransferAuditor::CheckQuiescent(const FaultStore& store) {
  std::string failure = CheckStore(store);
  if (!failure.empty()) return failure;
  if (!store.pending().empty() || !in_flight_.empty()) {
    const std::string id =
        store.pending().empty() ? in_flight_.begin()->first : store.pending().begin()->first.first;
    return absl::StrCat("quiescent, yet ", store.pending().size(), " transfers are pending and ",
                        in_flight_.size(), " amounts in flight (e.g. transfer ", id,
                        "): left with nobody carrying them");
  }
  return "";
}

}  // namespace ledger::sim
