#include "server/reflection_service.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.pb.h"
#include "proto/descriptor_set.h"

namespace ledger {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;
using Request = ReflectionService::Request;
using Response = ReflectionService::Response;

// A broken embedded set is a bug of the build, not an operating error: stop, in every build.
[[noreturn]] void DieWithBadSet(const std::string& why) {
  std::fprintf(stderr, "ledgerd: the embedded descriptor set is unusable: %s\n", why.c_str());
  std::abort();
}

Response Error(grpc::StatusCode code, std::string message) {
  Response response;
  response.mutable_error_response()->set_error_code(code);
  response.mutable_error_response()->set_error_message(std::move(message));
  return response;
}

// One stream: read a request, write its answer, read the next. At most one request and one
// response are held at a time. Deletes itself when gRPC is done with the call.
class ReflectionReactor final : public grpc::ServerBidiReactor<Request, Response> {
 public:
  explicit ReflectionReactor(const ReflectionService* service) : service_(service) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // The client closed its side (or the call ended): nothing more to answer.
      Finish(grpc::Status::OK);
      return;
    }
    response_ = service_->Answer(request_);
    StartWrite(&response_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {  // Only when the call is already over.
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the reflection client went away"));
      return;
    }
    request_.Clear();
    StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  const ReflectionService* const service_;
  Request request_;
  Response response_;
};

}  // namespace

ReflectionService::ReflectionService() : ReflectionService(EmbeddedDescriptorSet()) {}

ReflectionService::ReflectionService(std::string_view serialized_set) {
  google::protobuf::FileDescriptorSet set;
  if (!set.ParseFromArray(serialized_set.data(), static_cast<int>(serialized_set.size()))) {
    DieWithBadSet("it is not a FileDescriptorSet");
  }
  for (const google::protobuf::FileDescriptorProto& file : set.file()) {
    const FileDescriptor* built = pool_.BuildFile(file);
    if (built == nullptr) DieWithBadSet(absl::StrCat(file.name(), " does not build"));
    serialized_files_[file.name()] = file.SerializeAsString();
    for (int i = 0; i < built->service_count(); ++i) {
      services_.push_back(built->service(i)->full_name());
    }
  }
  std::sort(services_.begin(), services_.end());
}

ReflectionService::Response ReflectionService::Answer(const Request& request) const {
  const size_t request_bytes = request.ByteSizeLong();
  if (request_bytes > kMaxRequestBytes) {
    // Not echoed back (original_request): the answer stays small whatever was sent.
    return Error(grpc::StatusCode::INVALID_ARGUMENT,
                 absl::StrCat("reflection request of ", request_bytes,
                              " bytes is larger than the limit of ", kMaxRequestBytes, " bytes"));
  }
  Response response = AnswerQuestion(request);
  response.set_valid_host(request.host());
  *response.mutable_original_request() = request;
  return response;
}

ReflectionService::Response ReflectionService::AnswerQuestion(const Request& request) const {
  switch (request.message_request_case()) {
    case Request::kListServices: {
      Response response;
      for (const std::string& name : services_) {
        response.mutable_list_services_response()->add_service()->set_name(name);
      }
      return response;
    }
    case Request::kFileByFilename:
      return FileAndImports(pool_.FindFileByName(request.file_by_filename()),
                            absl::StrCat("no file named \"", request.file_by_filename(), "\""));
    case Request::kFileContainingSymbol:
      return FileAndImports(
          pool_.FindFileContainingSymbol(request.file_containing_symbol()),
          absl::StrCat("no symbol named \"", request.file_containing_symbol(), "\""));
    case Request::kFileContainingExtension: {
      const auto& wanted = request.file_containing_extension();
      const Descriptor* type = pool_.FindMessageTypeByName(wanted.containing_type());
      const FieldDescriptor* extension =
          type == nullptr ? nullptr : pool_.FindExtensionByNumber(type, wanted.extension_number());
      return FileAndImports(extension == nullptr ? nullptr : extension->file(),
                            absl::StrCat("no extension ", wanted.extension_number(), " of \"",
                                         wanted.containing_type(), "\""));
    }
    case Request::kAllExtensionNumbersOfType:
      return ExtensionNumbers(request.all_extension_numbers_of_type());
    case Request::MESSAGE_REQUEST_NOT_SET:
      break;
  }
  return Error(grpc::StatusCode::INVALID_ARGUMENT,
               "the reflection request names no question (message_request is not set)");
}

ReflectionService::Response ReflectionService::ExtensionNumbers(
    const std::string& type_name) const {
  const Descriptor* type = pool_.FindMessageTypeByName(type_name);
  if (type == nullptr) {
    return Error(grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("no message type named \"", type_name, "\""));
  }
  std::vector<const FieldDescriptor*> extensions;
  pool_.FindAllExtensions(type, &extensions);
  Response response;
  auto* numbers = response.mutable_all_extension_numbers_response();
  numbers->set_base_type_name(type->full_name());
  for (const FieldDescriptor* extension : extensions) {
    numbers->add_extension_number(extension->number());
  }
  return response;
}

ReflectionService::Response ReflectionService::FileAndImports(const FileDescriptor* file,
                                                              std::string not_found) const {
  if (file == nullptr) return Error(grpc::StatusCode::NOT_FOUND, std::move(not_found));
  // Depth-first over the imports, each file once; the set is a few files deep.
  Response response;
  absl::flat_hash_set<std::string_view> added;
  std::vector<const FileDescriptor*> pending = {file};
  auto* files = response.mutable_file_descriptor_response();
  while (!pending.empty()) {
    const FileDescriptor* next = pending.back();
    pending.pop_back();
    if (!added.insert(next->name()).second) continue;
    // Every file of the pool came from the set, so it has its serialized form.
    files->add_file_descriptor_proto(serialized_files_.at(next->name()));
    for (int i = next->dependency_count() - 1; i >= 0; --i) {
      pending.push_back(next->dependency(i));
    }
  }
  return response;
}

grpc::ServerBidiReactor<ReflectionService::Request, ReflectionService::Response>*
ReflectionService::ServerReflectionInfo(grpc::CallbackServerContext* /*context*/) {
  return new ReflectionReactor(this);
}

}  // namespace ledger
