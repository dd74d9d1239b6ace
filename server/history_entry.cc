#include "server/history_entry.h"

#include "google/protobuf/util/time_util.h"

namespace ledger {
namespace {

v1::Operation ToProto(EntryKind kind) {
  switch (kind) {
    case EntryKind::kDeposit:
      return v1::OPERATION_DEPOSIT;
    case EntryKind::kWithdraw:
      return v1::OPERATION_WITHDRAW;
    case EntryKind::kTransferOut:
      return v1::OPERATION_TRANSFER_OUT;
    case EntryKind::kTransferIn:
      return v1::OPERATION_TRANSFER_IN;
    case EntryKind::kTransferRefund:
      return v1::OPERATION_TRANSFER_REFUND;
  }
  return v1::OPERATION_UNSPECIFIED;
}

}  // namespace

void ToHistoryEntry(const JournalEntry& entry, v1::HistoryEntry& out) {
  out.set_sequence(entry.sequence);
  out.set_operation(ToProto(entry.kind));
  out.set_amount(entry.amount);
  out.set_balance_after(entry.balance_after);
  if (entry.counterparty.empty()) {
    out.set_request_id(entry.request_id);
  } else {
    out.set_transfer_id(entry.request_id);
    out.set_counterparty_account_id(entry.counterparty);
  }
  *out.mutable_time() = ToTimestamp(entry.time);
}

google::protobuf::Timestamp ToTimestamp(absl::Time time) {
  return google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(time));
}

}  // namespace ledger
