// Defines how a ledger call is answered, the same way by every handler: counted by method and
// code, released from the in-flight count, its response serialized, the retry pushback added.
#ifndef LEDGER_SERVER_CALL_ANSWER_H_
#define LEDGER_SERVER_CALL_ANSWER_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "base/check.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/proto_utils.h"  // SerializationTraits for protobuf messages.
#include "metrics/ledger_metrics.h"
#include "shard/admission_control.h"

namespace ledger {

// The trailing-metadata key of gRPC's retry pushback convention: on every RESOURCE_EXHAUSTED the
// service answers (in-flight limit, full mailbox), how many milliseconds the client should wait
// before it retries, as a decimal integer.
inline constexpr char kRetryPushbackKey[] = "grpc-retry-pushback-ms";

// Every admitted call ends here, exactly once: counted by its final code, released from the
// in-flight count and its client's share (`shard`: the shard that answered it, -1 for none;
// `client`: its Admission's slot), then finished.
inline void FinishCall(grpc::ServerUnaryReactor& reactor, LedgerMetrics& metrics,
                       AdmissionControl& admission, RpcMethod method, int32_t shard,
                       ClientShares::Slot client, const grpc::Status& status) {
  metrics.RecordRequest(method, static_cast<int>(status.error_code()));
  admission.Answered(shard, client);
  reactor.Finish(status);
}

// Tells the client when to retry: gRPC's pushback convention, in whole milliseconds.
inline void AddPushback(grpc::CallbackServerContext& context, std::chrono::milliseconds pushback) {
  context.AddTrailingMetadata(kRetryPushbackKey, std::to_string(pushback.count()));
}

// Serializes an OK call's response into the bytes gRPC sends.
template <typename Response>
void SerializeResponse(const Response& response, grpc::ByteBuffer& bytes) {
  bool own_buffer = false;
  grpc::Status serialized =
      grpc::SerializationTraits<Response>::Serialize(response, &bytes, &own_buffer);
  LEDGER_CHECK(serialized.ok());  // A message we built always serializes.
}

}  // namespace ledger

#endif  // LEDGER_SERVER_CALL_ANSWER_H_
