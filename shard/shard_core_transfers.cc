// ShardCore's transfer decisions: a client's Transfer on its source shard (both sides at once when
// the destination lives on the same shard), the credit on the destination's shard, and the settle
// back on the source's. The protocol that carries the steps between shards is TransferCoordinator
// (shard/transfer_coordinator.h); its state machine is in docs/architecture.md, "Transfers".
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "base/check.h"
#include "shard/shard_core.h"

namespace ledger {
namespace {

// A transfer's recorded result, replayed to a retry with the same transfer_id and fields.
Reply ReplayRecorded(const TransferRecord& record) {
  switch (record.state) {
    case TransferState::kPending:
      return {.outcome = Outcome::kTransferPending, .balance = record.from_balance};
    case TransferState::kCommitted:
      return {.outcome = Outcome::kOk,
              .balance = record.from_balance,
              .replayed = true,
              .detail = TransferReply{.to_balance = record.to_balance}};
    case TransferState::kRefused:
      break;
  }
  return {.outcome = record.outcome,
          .balance = record.from_balance,
          .replayed = true,
          .detail = TransferReply{.to_balance = record.to_balance}};
}

// The transfer_id of a transfer's step (TransferCall, CreditStep or SettleStep).
absl::string_view TransferIdOf(const Message& message) {
  if (const auto* call = std::get_if<TransferCall>(&message.kind)) return call->transfer_id;
  if (const auto* credit = std::get_if<CreditStep>(&message.kind)) return credit->transfer_id;
  return message.Get<SettleStep>().transfer_id;
}

}  // namespace

void ShardCore::LoadPendingTransfer(const std::string& transfer_id, const TransferRecord& record) {
  LEDGER_CHECK(batch_.empty());
  LEDGER_CHECK(record.state == TransferState::kPending);
  transfers_.SettleTransfer(transfer_id, record, /*orphan=*/false);  // The router resumes it.
  refundable_[record.from] += record.amount;
}

bool ShardCore::PrefetchTransfer(const Message& message, PrefetchedRecord& prefetched,
                                 bool may_block) {
  const TransferCall* call = std::get_if<TransferCall>(&message.kind);
  if (call != nullptr && call->local && Unsettled(call->to)) {
    if (!may_block) return false;
    SettleAccount(call->to);
  }
  const absl::string_view id = TransferIdOf(message);
  const bool credit = message.op() == Op::kTransferCredit;
  // kTransfer and kTransferSettle run on the source's shard: its own pending record first.
  const absl::string_view source = credit ? absl::string_view() : message.account_id;
  if (credit ? transfers_.CreditUnsettled(id) : transfers_.TransferUnsettled(id)) {
    if (!may_block) return false;
    // Read back what a failed write may have left on disk. When the store cannot say, this
    // message is answered kStorageFailed (its lookup failed), even if a later message of the
    // batch reads the id back.
    absl::Status read_back;
    if (credit) {
      absl::StatusOr<std::optional<CreditReceipt>> stored = options_.store->FindCredit(id);
      read_back = stored.status();
      if (stored.ok()) transfers_.SettleCredit(id, *stored);
    } else {
      // Every pending record of the id, whatever its source: the one of a source this shard
      // owns (at most one: the shard refuses a second source under a pending id) is memory's
      // from now on, so that a pending record never vanishes because another transfer under
      // the same id came by first (a reused id). Sources of other shards are not this one's.
      absl::StatusOr<std::vector<TransferRecord>> stored = options_.store->FindPendingTransfers(id);
      read_back = stored.status();
      if (stored.ok()) {
        std::optional<TransferRecord> owned;
        for (TransferRecord& record : *stored) {
          if (accounts_.contains(record.from)) owned = std::move(record);
        }
        transfers_.SettleTransfer(id, owned, /*orphan=*/true);
        RebuildRefundable();
      }
    }
    if (!read_back.ok()) {
      prefetched.transfer_looked_up = true;
      prefetched.transfer_status = read_back;
      return true;
    }
  }
  if (credit ? transfers_.CreditUnsettled(id) : transfers_.TransferUnsettled(id)) return true;
  if (credit ? transfers_.FindCredit(id) != nullptr : transfers_.FindTransfer(id) != nullptr) {
    return true;  // Memory answers.
  }
  // This source's own pending record is in memory (TransferTable keeps it until it is final),
  // so a new Transfer asks the store only for the id's final record (its own, or another
  // source's): one lookup. A settle asks for this source's pending record first.
  const absl::string_view lookup_source =
      message.op() == Op::kTransferSettle ? source : absl::string_view();
  prefetched.transfer_looked_up = true;
  if (!may_block) {
    // A sender's thread: memory (RocksDB's memtables, cache and bloom filters) must answer, as
    // it does for a new transfer_id; else the shard thread reads the disk.
    if (credit) {
      absl::StatusOr<CreditLookup> found = options_.store->FindCreditInMemory(id);
      if (found.ok() && !found->answered) return false;
      if (found.ok()) {
        prefetched.credit = std::move(found->receipt);
      } else {
        prefetched.transfer_status = found.status();
      }
    } else {
      absl::StatusOr<TransferLookup> found =
          options_.store->FindTransferInMemory(id, lookup_source);
      if (found.ok() && !found->answered) return false;
      if (found.ok()) {
        prefetched.transfer = std::move(found->record);
      } else {
        prefetched.transfer_status = found.status();
      }
    }
    return true;
  }
  if (credit) {
    absl::StatusOr<std::optional<CreditReceipt>> found = options_.store->FindCredit(id);
    if (found.ok()) {
      prefetched.credit = *std::move(found);
    } else {
      prefetched.transfer_status = found.status();
    }
  } else {
    absl::StatusOr<std::optional<TransferRecord>> found =
        options_.store->FindTransfer(id, lookup_source);
    if (found.ok()) {
      prefetched.transfer = *std::move(found);
    } else {
      prefetched.transfer_status = found.status();
    }
  }
  return true;
}

std::optional<TransferRecord> ShardCore::KnownTransfer(absl::string_view transfer_id,
                                                       bool& failed) {
  failed = false;
  if (transfers_.TransferUnsettled(transfer_id)) {
    failed = true;
    return std::nullopt;
  }
  if (const TransferRecord* in_memory = transfers_.FindTransfer(transfer_id)) return *in_memory;
  if (options_.store == nullptr) return std::nullopt;
  const PrefetchedRecord& prefetched = prefetched_records_[replies_.size()];
  LEDGER_CHECK(prefetched.transfer_looked_up);
  if (!prefetched.transfer_status.ok()) {
    observer_->OnStorageError();
    LogStorageError(prefetched.transfer_status, "looking up a transfer");
    failed = true;
    return std::nullopt;
  }
  return prefetched.transfer;
}

bool ShardCore::CreditOverflows(absl::string_view account_id, int64_t balance,
                                int64_t amount) const {
  // Money debited from this account and not yet settled may come back as a refund: a credit may
  // not take the room it needs, or the refund could not be applied.
  int64_t reserved = 0;
  if (!refundable_.empty()) {
    auto found = refundable_.find(account_id);
    if (found != refundable_.end()) reserved = found->second;
  }
  int64_t sum = 0;
  return __builtin_add_overflow(balance, amount, &sum) ||
         __builtin_add_overflow(sum, reserved, &sum);
}

void ShardCore::RebuildRefundable() {
  refundable_.clear();
  transfers_.ForEachPending(
      [this](const TransferRecord& record) { refundable_[record.from] += record.amount; });
}

void ShardCore::RecordTransfer(absl::string_view transfer_id, const TransferRecord& record,
                               bool ends_pending) {
  transfers_.PutTransfer(transfer_id, record);
  if (options_.store != nullptr) {
    write_.transfers.push_back(
        {.transfer_id = std::string(transfer_id), .record = record, .ends_pending = ends_pending});
  }
}

Reply ShardCore::RefuseTransfer(const Message& message, const TransferCall& transfer,
                                Outcome outcome, int64_t from_balance, int64_t to_balance) {
  RecordTransfer(transfer.transfer_id, TransferRecord{.from = std::string(message.account_id),
                                                      .to = std::string(transfer.to),
                                                      .amount = transfer.amount,
                                                      .state = TransferState::kRefused,
                                                      .outcome = outcome,
                                                      .from_balance = from_balance,
                                                      .to_balance = to_balance,
                                                      .created_at = batch_time_,
                                                      .credited_at = absl::InfinitePast(),
                                                      .finished_at = batch_time_});
  return {.outcome = outcome,
          .balance = from_balance,
          .detail = TransferReply{.to_balance = to_balance}};
}

Reply ShardCore::DecideTransfer(const Message& message, const TransferCall& transfer) {
  bool failed = false;
  std::optional<TransferRecord> recorded = KnownTransfer(transfer.transfer_id, failed);
  if (failed) return {.outcome = Outcome::kStorageFailed};
  if (transfer.resume_only) {
    // The coordinator asks after a failed debit whether it landed: carry it on if so.
    if (recorded.has_value() && recorded->state == TransferState::kPending &&
        recorded->from == message.account_id && recorded->to == transfer.to &&
        recorded->amount == transfer.amount && transfers_.TakeOrphan(transfer.transfer_id)) {
      return {.outcome = Outcome::kOk,
              .balance = recorded->from_balance,
              .detail = TransferReply{.debited = true}};
    }
    return {.outcome = Outcome::kOk};  // Not debited, final, or carried by another flight.
  }
  if (recorded.has_value()) {
    if (recorded->from != message.account_id || recorded->to != transfer.to ||
        recorded->amount != transfer.amount) {
      return {.outcome = Outcome::kTransferIdReused,
              .detail = ReusedTransferId{
                  .record = std::make_shared<const TransferRecord>(*std::move(recorded))}};
    }
    // A pending transfer no flight carries (its debit's write was answered as failed but reached
    // the disk): this retry carries it on, as if it had just been debited.
    if (recorded->state == TransferState::kPending && transfers_.TakeOrphan(transfer.transfer_id)) {
      return {.outcome = Outcome::kOk,
              .balance = recorded->from_balance,
              .detail = TransferReply{.debited = true}};
    }
    return ReplayRecorded(*recorded);
  }
  const bool local = transfer.local;
  if (Unsettled(message.account_id) || (local && Unsettled(transfer.to))) {
    return {.outcome = Outcome::kStorageFailed};
  }
  // The rules, in the contract's order. The accounts already exist, so no change below inserts
  // into accounts_ and both iterators stay valid.
  auto from = accounts_.find(message.account_id);
  auto to = local ? accounts_.find(transfer.to) : accounts_.end();
  if (from == accounts_.end())
    return RefuseTransfer(message, transfer, Outcome::kAccountNotFound, 0, 0);
  const int64_t from_balance = from->second.balance;
  if (local && to == accounts_.end()) {
    return RefuseTransfer(message, transfer, Outcome::kCounterpartyNotFound, from_balance, 0);
  }
  const Decision debit =
      ApplyOperation(Op::kWithdraw, from_balance, transfer.amount, options_.policy);
  if (debit.outcome != Outcome::kOk) {
    return RefuseTransfer(message, transfer, debit.outcome, from_balance, 0);
  }
  if (local && CreditOverflows(transfer.to, to->second.balance, transfer.amount)) {
    return RefuseTransfer(message, transfer, Outcome::kOverflow, from_balance, to->second.balance);
  }

  TransferRecord record{.from = std::string(message.account_id),
                        .to = std::string(transfer.to),
                        .amount = transfer.amount,
                        .state = TransferState::kPending,
                        .created_at = batch_time_,
                        .credited_at = absl::InfinitePast(),
                        .finished_at = absl::InfinitePast()};
  record.from_balance = ApplyChange(message.account_id, from, EntryKind::kTransferOut,
                                    transfer.amount, transfer.transfer_id, transfer.to)
                            .balance;
  TransferReply result;
  if (local) {
    record.to_balance = ApplyChange(transfer.to, to, EntryKind::kTransferIn, transfer.amount,
                                    transfer.transfer_id, message.account_id)
                            .balance;
    record.state = TransferState::kCommitted;
    record.credited_at = batch_time_;
    record.finished_at = batch_time_;
    result.to_balance = record.to_balance;
  } else {
    // Pending: the amount may come back as a refund, so it keeps its room in the balance.
    refundable_[record.from] += record.amount;
    result.debited = true;
  }
  RecordTransfer(transfer.transfer_id, record);
  return {.outcome = Outcome::kOk, .balance = record.from_balance, .detail = result};
}

Reply ShardCore::DecideCredit(const Message& message, const CreditStep& credit) {
  const absl::string_view id = credit.transfer_id;
  if (options_.store != nullptr) {
    if (transfers_.CreditUnsettled(id)) return {.outcome = Outcome::kStorageFailed};
    std::optional<CreditReceipt> receipt;
    if (const CreditReceipt* in_memory = transfers_.FindCredit(id)) {
      receipt = *in_memory;
    } else {
      const PrefetchedRecord& prefetched = prefetched_records_[replies_.size()];
      LEDGER_CHECK(prefetched.transfer_looked_up);
      if (!prefetched.transfer_status.ok()) {
        observer_->OnStorageError();
        LogStorageError(prefetched.transfer_status, "looking up a transfer's credit");
        return {.outcome = Outcome::kStorageFailed};
      }
      receipt = prefetched.credit;
    }
    if (receipt.has_value()) {
      // Another transfer under the same id (a client reused it on another source account while
      // the first was in flight): refused, and its source refunds it.
      if (receipt->from != credit.from || receipt->amount != credit.amount) {
        return {.outcome = Outcome::kTransferIdReused};
      }
      // The same credit sent again (its source did not learn the answer): answered from the
      // receipt, never applied twice.
      return {.outcome = receipt->outcome,
              .balance = receipt->to_balance,
              .replayed = true,
              .detail = TransferReply{.to_balance = receipt->to_balance,
                                      .credited_at = receipt->credited_at}};
    }
  }
  // A transfer this shard decided on its own under the same id (both accounts here), still in
  // memory: the same reuse, caught in the window before either is durable.
  if (const TransferRecord* local = transfers_.FindTransfer(id);
      local != nullptr && local->from != credit.from) {
    return {.outcome = Outcome::kTransferIdReused};
  }
  if (Unsettled(message.account_id)) return {.outcome = Outcome::kStorageFailed};
  CreditReceipt receipt{
      .from = std::string(credit.from), .amount = credit.amount, .credited_at = batch_time_};
  auto to = accounts_.find(message.account_id);
  if (to == accounts_.end()) {
    receipt.outcome = Outcome::kCounterpartyNotFound;
  } else if (CreditOverflows(message.account_id, to->second.balance, credit.amount)) {
    receipt.outcome = Outcome::kOverflow;
    receipt.to_balance = to->second.balance;
  } else {
    receipt.to_balance =
        ApplyChange(message.account_id, to, EntryKind::kTransferIn, credit.amount, id, credit.from)
            .balance;
  }
  transfers_.PutCredit(id, receipt);
  if (options_.store != nullptr) {
    write_.credits.push_back({.transfer_id = std::string(id), .receipt = receipt});
  }
  return {.outcome = receipt.outcome,
          .balance = receipt.to_balance,
          .detail =
              TransferReply{.to_balance = receipt.to_balance, .credited_at = receipt.credited_at}};
}

Reply ShardCore::DecideSettle(const Message& message, const SettleStep& settle) {
  bool failed = false;
  std::optional<TransferRecord> recorded = KnownTransfer(settle.transfer_id, failed);
  if (failed) return {.outcome = Outcome::kStorageFailed};
  if (!recorded.has_value() || recorded->from != message.account_id || recorded->to != settle.to ||
      recorded->amount != settle.amount) {
    // This source's record is final (its pending one is gone) and the id's record now belongs
    // to another transfer that reused the id: a settle sent again, answered with the credit's
    // result it carries.
    return {.outcome = settle.credit_outcome,
            .balance = 0,
            .replayed = true,
            .detail = TransferReply{.to_balance = settle.credit_balance}};
  }
  if (recorded->state != TransferState::kPending) return ReplayRecorded(*recorded);
  if (Unsettled(message.account_id)) return {.outcome = Outcome::kStorageFailed};

  TransferRecord record = *std::move(recorded);
  record.to_balance = settle.credit_balance;
  record.credited_at = settle.credited_at;
  record.finished_at = batch_time_;
  auto reserved = refundable_.find(record.from);
  LEDGER_CHECK(reserved != refundable_.end() && reserved->second >= record.amount);
  if ((reserved->second -= record.amount) == 0) refundable_.erase(reserved);
  if (settle.credit_outcome == Outcome::kOk) {
    record.state = TransferState::kCommitted;
    RecordTransfer(settle.transfer_id, record, /*ends_pending=*/true);
    return {.outcome = Outcome::kOk,
            .balance = record.from_balance,
            .detail = TransferReply{.to_balance = record.to_balance}};
  }
  // The destination refused: the debit comes back to the source, as an entry of its own.
  record.state = TransferState::kRefused;
  record.outcome = settle.credit_outcome;
  auto from = accounts_.find(message.account_id);
  LEDGER_CHECK(from != accounts_.end());
  // The room for it was kept (CreditOverflows), so the refund cannot overflow.
  LEDGER_CHECK_LE(from->second.balance, std::numeric_limits<int64_t>::max() - record.amount);
  ApplyChange(message.account_id, from, EntryKind::kTransferRefund, record.amount,
              settle.transfer_id, settle.to);
  RecordTransfer(settle.transfer_id, record, /*ends_pending=*/true);
  return {.outcome = record.outcome,
          .balance = record.from_balance,
          .detail = TransferReply{.to_balance = record.to_balance}};
}

}  // namespace ledger
