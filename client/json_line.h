// Defines `JsonLine`, how ledgerctl prints a protobuf message as one line of JSON: protobuf's
// own JSON mapping (int64 values as strings, enums by name, Timestamps in RFC 3339) with the
// proto field names, as grpcurl prints them.
#ifndef LEDGER_CLIENT_JSON_LINE_H_
#define LEDGER_CLIENT_JSON_LINE_H_

#include <string>

#include "google/protobuf/message.h"

namespace ledger {

// `message` as JSON on one line, with a trailing "\n". Fields without presence are left out at
// their default value (see client/ledgerctl_output.proto for how its messages keep theirs).
std::string JsonLine(const google::protobuf::Message& message);

}  // namespace ledger

#endif  // LEDGER_CLIENT_JSON_LINE_H_
