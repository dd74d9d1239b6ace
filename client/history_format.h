// Defines how ledgerctl shows an applied operation (a v1::HistoryEntry) as text: history's
// lines and watch's.
#ifndef LEDGER_CLIENT_HISTORY_FORMAT_H_
#define LEDGER_CLIENT_HISTORY_FORMAT_H_

#include <string>

#include "google/protobuf/timestamp.pb.h"
#include "ledger/v1/ledger.pb.h"

namespace ledger::ctl {

// "2026-12-06T12:00:00.123Z".
std::string FormatTimestamp(const google::protobuf::Timestamp& time);
// deposit, withdraw, transfer_out, transfer_in, transfer_refund ("unknown" for anything else).
const char* OperationName(v1::Operation operation);
// The request_id, or for a step of a transfer its transfer_id and the other account.
std::string EntryReference(const v1::HistoryEntry& entry);

}  // namespace ledger::ctl

#endif  // LEDGER_CLIENT_HISTORY_FORMAT_H_
