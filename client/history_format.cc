#include "client/history_format.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace ledger::ctl {

std::string FormatTimestamp(const google::protobuf::Timestamp& time) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ",
                          absl::FromUnixSeconds(time.seconds()) + absl::Nanoseconds(time.nanos()),
                          absl::UTCTimeZone());
}

const char* OperationName(v1::Operation operation) {
  switch (operation) {
    case v1::OPERATION_DEPOSIT:
      return "deposit";
    case v1::OPERATION_WITHDRAW:
      return "withdraw";
    case v1::OPERATION_TRANSFER_OUT:
      return "transfer_out";
    case v1::OPERATION_TRANSFER_IN:
      return "transfer_in";
    case v1::OPERATION_TRANSFER_REFUND:
      return "transfer_refund";
    default:
      return "unknown";
  }
}

std::string EntryReference(const v1::HistoryEntry& entry) {
  switch (entry.operation()) {
    case v1::OPERATION_TRANSFER_OUT:
      return absl::StrCat(entry.transfer_id(), " to ", entry.counterparty_account_id());
    case v1::OPERATION_TRANSFER_IN:
      return absl::StrCat(entry.transfer_id(), " from ", entry.counterparty_account_id());
    case v1::OPERATION_TRANSFER_REFUND:
      return absl::StrCat(entry.transfer_id(), " refused by ", entry.counterparty_account_id());
    default:
      return entry.request_id();
  }
}

}  // namespace ledger::ctl
