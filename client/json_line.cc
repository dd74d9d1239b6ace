#include "client/json_line.h"

#include "base/check.h"
#include "google/protobuf/util/json_util.h"

namespace ledger {

std::string JsonLine(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string json;
  // Printing fails only for an Any whose type cannot be resolved: these messages have none.
  const bool printed = google::protobuf::util::MessageToJsonString(message, &json, options).ok();
  LEDGER_CHECK(printed);
  return json + "\n";
}

}  // namespace ledger
