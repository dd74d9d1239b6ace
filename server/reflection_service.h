// Defines `ReflectionService`: gRPC server reflection (grpc.reflection.v1alpha.ServerReflection,
// the protocol grpcurl and the Node.js reflection clients speak), answered from the descriptor set
// that the build embeds in the binary (proto/descriptor_set.h) rather than from the descriptors
// compiled into C++. That set carries the .proto comments, so `grpcurl describe` shows the
// documentation, and it holds grpc/health/v1/health.proto, which gRPC's built-in health service
// (not protobuf-generated) cannot contribute.
#ifndef LEDGER_SERVER_REFLECTION_SERVICE_H_
#define LEDGER_SERVER_REFLECTION_SERVICE_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "google/protobuf/descriptor.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace ledger {

// Thread-safe: immutable after construction; every stream runs on gRPC's callback threads.
//
// Each stream answers its requests one at a time, in order, exactly one response per request: the
// next request is read only after the previous response is written, so a client that pipelines
// requests waits in gRPC's flow control and never makes the server hold more than one request and
// one response per stream. Errors are answered in the stream (error_response, as the protocol
// says), never by ending it:
//   INVALID_ARGUMENT  a request larger than kMaxRequestBytes, or with no request set;
//   NOT_FOUND         an unknown file name, symbol, message type, or extension (ledgerd's
//                     .proto files declare no extensions, so every extension lookup is NOT_FOUND;
//                     all_extension_numbers_of_type of a known message answers an empty list).
// A file is answered with every file it imports, transitively, each once, the requested one first.
class ReflectionService final
    : public grpc::reflection::v1alpha::ServerReflection::CallbackService {
 public:
  using Request = grpc::reflection::v1alpha::ServerReflectionRequest;
  using Response = grpc::reflection::v1alpha::ServerReflectionResponse;

  // The largest request (serialized) that is answered. A real one names one file or symbol:
  // well under 1 KiB.
  static constexpr size_t kMaxRequestBytes = 4096;

  // Serves EmbeddedDescriptorSet().
  ReflectionService();
  // Serves `serialized_set`, a FileDescriptorSet in which each file follows its imports. A set
  // that does not parse or build is a bug of the build: it stops the process with a message.
  explicit ReflectionService(std::string_view serialized_set);

  ReflectionService(const ReflectionService&) = delete;
  ReflectionService& operator=(const ReflectionService&) = delete;

  // The answer to one request. Any thread.
  Response Answer(const Request& request) const;

  // What list_services answers: every service the set defines, sorted by full name.
  const std::vector<std::string>& services() const { return services_; }

  grpc::ServerBidiReactor<Request, Response>* ServerReflectionInfo(
      grpc::CallbackServerContext* context) override;

 private:
  // The answer to the question the request asks (its message_request).
  Response AnswerQuestion(const Request& request) const;
  // all_extension_numbers_of_type: NOT_FOUND for an unknown message type.
  Response ExtensionNumbers(const std::string& type_name) const;
  // `file` and, after it, every file it imports, each once; NOT_FOUND with `not_found` for null.
  Response FileAndImports(const google::protobuf::FileDescriptor* file,
                          std::string not_found) const;

  google::protobuf::DescriptorPool pool_;
  // File name → the FileDescriptorProto as protoc wrote it (with source info), serialized.
  absl::flat_hash_map<std::string, std::string> serialized_files_;
  std::vector<std::string> services_;
};

}  // namespace ledger

#endif  // LEDGER_SERVER_REFLECTION_SERVICE_H_
