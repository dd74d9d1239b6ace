#include "proto/error_details.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"

namespace ledger {
namespace {

// Packs `message` with its map entries in key order, so that the same error is the same bytes
// (and a client that prints the metadata prints it sorted, as grpcurl does).
void PackDeterministically(const google::protobuf::Message& message, google::protobuf::Any& any) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  any.set_type_url(absl::StrCat("type.googleapis.com/", message.GetDescriptor()->full_name()));
  any.set_value(std::move(bytes));
}

}  // namespace

std::string EncodeErrorDetails(int code, absl::string_view message, const ErrorDetails& details) {
  google::rpc::Status status;
  status.set_code(code);
  status.set_message(std::string(message));
  google::rpc::ErrorInfo info;
  info.set_reason(v1::ErrorReason_Name(details.reason));
  info.set_domain(kErrorDomain);
  for (const auto& [key, value] : details.metadata) (*info.mutable_metadata())[key] = value;
  PackDeterministically(info, *status.add_details());
  if (details.retry_delay.has_value()) {
    google::rpc::RetryInfo retry;
    const auto millis = details.retry_delay->count();
    retry.mutable_retry_delay()->set_seconds(millis / 1000);
    retry.mutable_retry_delay()->set_nanos(static_cast<int32_t>(millis % 1000) * 1'000'000);
    status.add_details()->PackFrom(retry);
  }
  return status.SerializeAsString();
}

std::optional<ErrorDetails> DecodeErrorDetails(absl::string_view bytes) {
  google::rpc::Status status;
  if (bytes.empty() || !status.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return std::nullopt;
  }
  std::optional<ErrorDetails> details;
  std::optional<std::chrono::milliseconds> retry_delay;
  for (const google::protobuf::Any& any : status.details()) {
    google::rpc::ErrorInfo info;
    google::rpc::RetryInfo retry;
    if (!details.has_value() && any.Is<google::rpc::ErrorInfo>() && any.UnpackTo(&info) &&
        info.domain() == kErrorDomain) {
      details.emplace();
      if (!v1::ErrorReason_Parse(info.reason(), &details->reason)) {
        details->reason = v1::ERROR_REASON_UNSPECIFIED;
      }
      details->metadata.assign(info.metadata().begin(), info.metadata().end());
    } else if (any.Is<google::rpc::RetryInfo>() && any.UnpackTo(&retry) &&
               retry.retry_delay().seconds() >= 0 && retry.retry_delay().nanos() >= 0) {
      retry_delay = std::chrono::milliseconds(retry.retry_delay().seconds() * 1000 +
                                              retry.retry_delay().nanos() / 1'000'000);
    }
  }
  if (details.has_value()) details->retry_delay = retry_delay;
  return details;
}

absl::string_view MetadataValue(const ErrorMetadata& metadata, absl::string_view key) {
  for (const auto& [name, value] : metadata) {
    if (name == key) return value;
  }
  return {};
}

}  // namespace ledger
