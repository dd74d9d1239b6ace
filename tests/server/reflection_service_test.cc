// ledgerd's reflection service (server/reflection_service.h), through a real gRPC stream to an
// in-process server: what grpcurl and the Node.js reflection client rely on.
#include "server/reflection_service.h"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/server/test_server.h"
#include "tests/test_paths.h"

namespace ledger {
namespace {

using ::google::protobuf::FileDescriptorProto;
using ::grpc::reflection::v1alpha::ServerReflection;
using ::grpc::reflection::v1alpha::ServerReflectionRequest;
using ::grpc::reflection::v1alpha::ServerReflectionResponse;
using ::testing::ElementsAre;
using testing_util::ContextWithDeadline;
using testing_util::TestServer;

// One reflection stream to a fresh server.
class ReflectionStream {
 public:
  ReflectionStream()
      : stub_(ServerReflection::NewStub(server_.NewChannel())),
        context_(ContextWithDeadline(std::chrono::seconds(60))),
        stream_(stub_->ServerReflectionInfo(context_.get())) {}

  ServerReflectionResponse Ask(const ServerReflectionRequest& request) {
    ServerReflectionResponse response;
    EXPECT_TRUE(stream_->Write(request));
    EXPECT_TRUE(stream_->Read(&response));
    return response;
  }
  bool Write(const ServerReflectionRequest& request) { return stream_->Write(request); }
  bool Read(ServerReflectionResponse* response) { return stream_->Read(response); }
  grpc::Status Close() {
    stream_->WritesDone();
    return stream_->Finish();
  }

 private:
  TestServer server_;
  std::unique_ptr<ServerReflection::Stub> stub_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<ServerReflectionRequest, ServerReflectionResponse>>
      stream_;
};

ServerReflectionRequest Symbol(const std::string& name) {
  ServerReflectionRequest request;
  request.set_file_containing_symbol(name);
  return request;
}

std::vector<FileDescriptorProto> Files(const ServerReflectionResponse& response) {
  std::vector<FileDescriptorProto> files;
  for (const std::string& bytes : response.file_descriptor_response().file_descriptor_proto()) {
    files.emplace_back();
    EXPECT_TRUE(files.back().ParseFromString(bytes));
  }
  return files;
}

std::vector<std::string> Names(const std::vector<FileDescriptorProto>& files) {
  std::vector<std::string> names;
  for (const FileDescriptorProto& file : files) names.push_back(file.name());
  return names;
}

// The leading comment of `path` in the file's source info, as protoc records it.
std::string LeadingComment(const FileDescriptorProto& file, const std::vector<int>& path) {
  for (const auto& location : file.source_code_info().location()) {
    if (std::vector<int>(location.path().begin(), location.path().end()) == path) {
      return location.leading_comments();
    }
  }
  return "<no location>";
}

// The "//" lines right above `line_start` in the .proto source, as protoc turns them into a
// leading comment: without the "//", one "\n" after each.
std::string CommentAbove(const std::string& source, const std::string& line_start) {
  std::vector<std::string> lines = absl::StrSplit(source, '\n');
  auto at = std::find_if(lines.begin(), lines.end(), [&](const std::string& line) {
    return absl::StartsWith(absl::StripLeadingAsciiWhitespace(line), line_start);
  });
  std::vector<std::string> comment;
  while (at != lines.begin()) {
    absl::string_view above = absl::StripLeadingAsciiWhitespace(*--at);
    if (!absl::ConsumePrefix(&above, "//")) break;
    comment.insert(comment.begin(), std::string(above));
  }
  return comment.empty() ? "<no comment in the source>" : absl::StrJoin(comment, "\n") + "\n";
}

TEST(ReflectionServiceTest, ListsTheLedgerHealthAndReflectionServices) {
  ReflectionStream stream;
  ServerReflectionRequest request;
  request.set_list_services("");
  std::vector<std::string> services;
  const ServerReflectionResponse listed = stream.Ask(request);
  for (const auto& service : listed.list_services_response().service()) {
    services.push_back(service.name());
  }
  EXPECT_THAT(services,
              ElementsAre("grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection",
                          "ledger.v1.Ledger", "ledger.v1.LedgerAdmin", "ledger.v1.LedgerCluster"));
  EXPECT_TRUE(stream.Close().ok());
}

// Issue 10, item 12: `list` showed the health service, but resolving it failed.
TEST(ReflectionServiceTest, ResolvesTheBuiltInHealthService) {
  ReflectionStream stream;
  const std::vector<FileDescriptorProto> files = Files(stream.Ask(Symbol("grpc.health.v1.Health")));
  ASSERT_THAT(Names(files), ElementsAre("grpc/health/v1/health.proto"));
  ASSERT_EQ(files[0].service_size(), 1);
  EXPECT_EQ(files[0].service(0).name(), "Health");
  std::vector<std::string> methods;
  for (const auto& method : files[0].service(0).method()) methods.push_back(method.name());
  EXPECT_THAT(methods, ElementsAre("Check", "Watch"));
  EXPECT_TRUE(stream.Close().ok());
}

// Issue 10, item 13: `grpcurl describe` shows the .proto's documentation.
TEST(ReflectionServiceTest, ServesTheLedgerProtoWithItsComments) {
  std::ifstream in(testing_util::SourceDir() + "/proto/ledger/v1/ledger.proto");
  std::stringstream source;
  source << in.rdbuf();
  ASSERT_FALSE(source.str().empty());

  ReflectionStream stream;
  const std::vector<FileDescriptorProto> files = Files(stream.Ask(Symbol("ledger.v1.Ledger")));
  ASSERT_THAT(Names(files),
              ElementsAre("ledger/v1/ledger.proto", "google/protobuf/timestamp.proto"));
  const FileDescriptorProto& ledger = files[0];
  ASSERT_TRUE(ledger.has_source_code_info());
  // Paths: 6 = FileDescriptorProto.service, 2 = ServiceDescriptorProto.method.
  EXPECT_EQ(LeadingComment(ledger, {6, 0}), CommentAbove(source.str(), "service Ledger"));
  ASSERT_EQ(ledger.service(0).method_size(), 8);
  for (int i = 0; i < 8; ++i) {
    const std::string& method = ledger.service(0).method(i).name();
    const std::string comment = LeadingComment(ledger, {6, 0, 2, i});
    EXPECT_EQ(comment, CommentAbove(source.str(), absl::StrCat("rpc ", method, "(")));
    EXPECT_THAT(comment, ::testing::HasSubstr("Errors: ")) << method;
  }
  EXPECT_THAT(LeadingComment(ledger, {6, 0, 2, 0}),
              ::testing::StartsWith(" Adds amount to the account's balance"));
  EXPECT_TRUE(stream.Close().ok());
}

TEST(ReflectionServiceTest, AnswersAFileWithEveryFileItImportsOnce) {
  ReflectionStream stream;
  ServerReflectionRequest by_name;
  by_name.set_file_by_filename("ledger/v1/ledger.proto");
  EXPECT_THAT(Names(Files(stream.Ask(by_name))),
              ElementsAre("ledger/v1/ledger.proto", "google/protobuf/timestamp.proto"));
  // A message, a field, an enum value and a method all lead to their file.
  for (const char* symbol : {"ledger.v1.HistoryEntry", "ledger.v1.HistoryEntry.balance_after",
                             "ledger.v1.OPERATION_DEPOSIT", "ledger.v1.Ledger.History"}) {
    EXPECT_THAT(Names(Files(stream.Ask(Symbol(symbol)))),
                ElementsAre("ledger/v1/ledger.proto", "google/protobuf/timestamp.proto"))
        << symbol;
  }
  EXPECT_THAT(Names(Files(stream.Ask(Symbol("google.protobuf.Timestamp")))),
              ElementsAre("google/protobuf/timestamp.proto"));
  EXPECT_TRUE(stream.Close().ok());
}

// What one answer can cost: the largest is a file with all it imports, comments included.
TEST(ReflectionServiceTest, EveryFileAnswerStaysUnder64KiB) {
  ReflectionStream stream;
  size_t largest_bytes = 0;
  for (const char* name :
       {"ledger/v1/ledger.proto", "grpc/health/v1/health.proto",
        "grpc/reflection/v1alpha/reflection.proto", "google/protobuf/timestamp.proto"}) {
    ServerReflectionRequest request;
    request.set_file_by_filename(name);
    const ServerReflectionResponse response = stream.Ask(request);
    ASSERT_TRUE(response.has_file_descriptor_response()) << name;
    std::cout << name << ": " << response.ByteSizeLong() << " bytes\n";
    largest_bytes = std::max(largest_bytes, response.ByteSizeLong());
  }
  EXPECT_LT(largest_bytes, 64u * 1024);
  EXPECT_TRUE(stream.Close().ok());
}

TEST(ReflectionServiceTest, UnknownNamesAreNotFoundAndTheStreamGoesOn) {
  ReflectionStream stream;
  ServerReflectionRequest by_name;
  by_name.set_file_by_filename("ledger/v2/ledger.proto");
  ServerReflectionResponse missing_file = stream.Ask(by_name);
  EXPECT_EQ(missing_file.error_response().error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(missing_file.error_response().error_message(),
            "no file named \"ledger/v2/ledger.proto\"");
  EXPECT_EQ(missing_file.original_request().file_by_filename(), "ledger/v2/ledger.proto");

  ServerReflectionResponse missing_symbol = stream.Ask(Symbol("ledger.v1.Transfer"));
  EXPECT_EQ(missing_symbol.error_response().error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(missing_symbol.error_response().error_message(),
            "no symbol named \"ledger.v1.Transfer\"");

  EXPECT_EQ(Files(stream.Ask(Symbol("ledger.v1.Ledger"))).size(), 2u);
  EXPECT_TRUE(stream.Close().ok());
}

// ledgerd's .proto files declare no extensions.
TEST(ReflectionServiceTest, ExtensionLookupsAnswerNotFoundOrAnEmptyList) {
  ReflectionStream stream;
  ServerReflectionRequest extension;
  extension.mutable_file_containing_extension()->set_containing_type("ledger.v1.DepositRequest");
  extension.mutable_file_containing_extension()->set_extension_number(100);
  ServerReflectionResponse no_extension = stream.Ask(extension);
  EXPECT_EQ(no_extension.error_response().error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(no_extension.error_response().error_message(),
            "no extension 100 of \"ledger.v1.DepositRequest\"");

  ServerReflectionRequest numbers;
  numbers.set_all_extension_numbers_of_type("ledger.v1.DepositRequest");
  ServerReflectionResponse none = stream.Ask(numbers);
  ASSERT_TRUE(none.has_all_extension_numbers_response()) << none.DebugString();
  EXPECT_EQ(none.all_extension_numbers_response().base_type_name(), "ledger.v1.DepositRequest");
  EXPECT_EQ(none.all_extension_numbers_response().extension_number_size(), 0);

  numbers.set_all_extension_numbers_of_type("ledger.v1.NoSuchMessage");
  ServerReflectionResponse unknown_type = stream.Ask(numbers);
  EXPECT_EQ(unknown_type.error_response().error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(unknown_type.error_response().error_message(),
            "no message type named \"ledger.v1.NoSuchMessage\"");
  EXPECT_TRUE(stream.Close().ok());
}

TEST(ReflectionServiceTest, ARequestWithNoQuestionIsInvalidArgument) {
  ReflectionStream stream;
  ServerReflectionRequest empty;
  empty.set_host("localhost");
  ServerReflectionResponse response = stream.Ask(empty);
  EXPECT_EQ(response.error_response().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(response.valid_host(), "localhost");
  EXPECT_TRUE(stream.Close().ok());
}

TEST(ReflectionServiceTest, ARequestOverTheLimitIsRefusedWithoutEchoingIt) {
  ReflectionStream stream;
  // At the limit: answered (NOT_FOUND, the name is made up).
  std::string name(ReflectionService::kMaxRequestBytes - 3, 'a');  // 3 bytes of tag and length.
  ASSERT_EQ(Symbol(name).ByteSizeLong(), ReflectionService::kMaxRequestBytes);
  EXPECT_EQ(stream.Ask(Symbol(name)).error_response().error_code(), grpc::StatusCode::NOT_FOUND);
  // One byte over: refused, and the answer does not carry the request back.
  name += 'a';
  ServerReflectionResponse refused = stream.Ask(Symbol(name));
  EXPECT_EQ(refused.error_response().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(refused.error_response().error_message(),
            "reflection request of 4097 bytes is larger than the limit of 4096 bytes");
  EXPECT_FALSE(refused.has_original_request());
  EXPECT_LT(refused.ByteSizeLong(), 200u);
  // The stream still answers.
  EXPECT_EQ(Files(stream.Ask(Symbol("ledger.v1.Ledger"))).size(), 2u);
  EXPECT_TRUE(stream.Close().ok());
}

// grpcurl keeps one stream for a whole session; a client may also send ahead of the answers.
TEST(ReflectionServiceTest, AnswersEveryRequestOfALongStreamOnceAndInOrder) {
  ReflectionStream stream;
  constexpr int kPipelined = 64;
  for (int i = 0; i < kPipelined; ++i) {
    ServerReflectionRequest request;
    request.set_list_services(absl::StrCat(i));
    ASSERT_TRUE(stream.Write(request));
  }
  for (int i = 0; i < kPipelined; ++i) {
    ServerReflectionResponse response;
    ASSERT_TRUE(stream.Read(&response));
    EXPECT_EQ(response.original_request().list_services(), absl::StrCat(i));
    EXPECT_EQ(response.list_services_response().service_size(), 5);
  }
  constexpr int kOneByOne = 500;
  int files_answered = 0;
  for (int i = 0; i < kOneByOne; ++i) {
    files_answered += Files(stream.Ask(Symbol("ledger.v1.Ledger"))).size() == 2 ? 1 : 0;
  }
  EXPECT_EQ(files_answered, kOneByOne);
  EXPECT_TRUE(stream.Close().ok());
}

// The embedded set is build output: a broken one is a bug, and it stops the process in every
// build instead of serving a reflection that cannot answer.
TEST(ReflectionServiceDeathTest, ABrokenDescriptorSetStopsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(ReflectionService("\xff not a FileDescriptorSet"),
               "the embedded descriptor set is unusable: it is not a FileDescriptorSet");
  // A file whose import is missing from the set does not build.
  google::protobuf::FileDescriptorSet set;
  FileDescriptorProto* file = set.add_file();
  file->set_name("orphan.proto");
  file->add_dependency("missing.proto");
  EXPECT_DEATH(ReflectionService(set.SerializeAsString()),
               "the embedded descriptor set is unusable: orphan.proto does not build");
}

}  // namespace
}  // namespace ledger
