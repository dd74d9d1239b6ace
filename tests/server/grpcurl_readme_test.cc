// Runs every grpcurl command of the grpcurl transcripts in README.md (a short one) and docs/api.md
// (every method) against a real ledgerd over real gRPC and compares what grpcurl would print with
// what the document shows. grpcurl itself cannot be
// installed here (it is not in Debian 12, and Go's module proxy is out of reach), so this test
// does what grpcurl does, step by step: it learns the schema by server reflection alone, builds
// the request from the command's JSON, calls the method, and prints the answer in grpcurl's format:
//   - responses: Go's jsonpb with grpcurl's defaults (lowerCamelCase names from json_name, 64-bit
//     integers as strings, fields at their default omitted), re-indented by 2 spaces;
//   - errors: "ERROR:\n  Code: <Go's codes.Code name>\n  Message: <message>";
//   - list: the services, sorted; describe: protoprint's compact, sorted layout with the
//     elements' leading comments.
// A transcript is the ```console block after the marker below; the test fails when a document
// drifts from what the server answers.
#include <algorithm>
#include <atomic>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/descriptor_database.h"
#include "google/protobuf/dynamic_message.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/type_resolver.h"
#include "google/protobuf/util/type_resolver_util.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "tests/scratch_dir.h"
#include "tests/scratch_ledger.h"
#include "tests/server/test_server.h"
#include "tests/test_paths.h"

namespace ledger {
namespace {

namespace protobuf = ::google::protobuf;
using grpc::reflection::v1alpha::ServerReflection;
using grpc::reflection::v1alpha::ServerReflectionRequest;
using grpc::reflection::v1alpha::ServerReflectionResponse;
using testing_util::ContextWithDeadline;

constexpr char kMarker[] =
    "<!-- grpcurl transcript: tests/server/grpcurl_readme_test.cc runs each command below";

struct Example {
  std::string command;  // Without the "$ ".
  std::string output;   // Every line up to the next command, without the blank separator line.
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The commands and outputs of the ```console block that follows the marker.
std::vector<Example> ReadTranscript(const std::string& readme) {
  std::vector<Example> examples;
  const size_t marker = readme.find(kMarker);
  if (marker == std::string::npos) return examples;
  const size_t open = readme.find("```console\n", marker);
  const size_t close = readme.find("\n```", open + 1);
  if (open == std::string::npos || close == std::string::npos) return examples;
  const std::string block =
      readme.substr(open + sizeof("```console\n") - 1, close - open - sizeof("```console\n") + 2);
  for (absl::string_view line : absl::StrSplit(absl::StripSuffix(block, "\n"), '\n')) {
    if (absl::ConsumePrefix(&line, "$ ")) {
      examples.push_back({std::string(line), ""});
    } else if (!examples.empty()) {
      absl::StrAppend(&examples.back().output, line, "\n");
    }
  }
  for (Example& example : examples) {
    // A blank line separates one example from the next.
    if (absl::EndsWith(example.output, "\n\n")) example.output.pop_back();
  }
  return examples;
}

// Splits a shell command line on spaces, honouring single quotes (all the transcripts use).
std::vector<std::string> ShellWords(const std::string& command) {
  std::vector<std::string> words;
  std::string word;
  bool quoted = false, in_word = false;
  for (char c : command) {
    if (c == '\'') {
      quoted = !quoted;
      in_word = true;
    } else if (c == ' ' && !quoted) {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(word);
  return words;
}

// Go's encoding/json.Indent(prefix "", indent "  ") applied to compact JSON: what grpcurl does
// to jsonpb's output. Empty objects and arrays stay "{}" and "[]".
std::string IndentLikeGo(const std::string& compact) {
  std::string out;
  int depth = 0;
  bool in_string = false, escaped = false;
  auto newline = [&] {
    out += '\n';
    out.append(2 * depth, ' ');
  };
  for (size_t i = 0; i < compact.size(); ++i) {
    const char c = compact[i];
    if (in_string) {
      out += c;
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        out += c;
        break;
      case '{':
      case '[':
        out += c;
        if (i + 1 < compact.size() && (compact[i + 1] == '}' || compact[i + 1] == ']')) break;
        ++depth;
        newline();
        break;
      case '}':
      case ']':
        if (out.back() != '{' && out.back() != '[') {
          --depth;
          newline();
        }
        out += c;
        break;
      case ',':
        out += c;
        newline();
        break;
      case ':':
        out += ": ";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Go's codes.Code.String(), which grpcurl prints after "Code: ".
std::string GoCodeName(grpc::StatusCode code) {
  static const char* const kNames[] = {
      "OK",       "Canceled",       "Unknown",          "InvalidArgument",   "DeadlineExceeded",
      "NotFound", "AlreadyExists",  "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
      "Aborted",  "OutOfRange",     "Unimplemented",    "Internal",          "Unavailable",
      "DataLoss", "Unauthenticated"};
  return kNames[static_cast<int>(code)];
}

// protoprint's comment lines: each line of a leading comment as "//" + line, a space added when
// the line does not start with one, trailing blanks trimmed, leading/trailing empty lines dropped.
std::string CommentLines(const std::string& comment, const std::string& indent) {
  std::vector<std::string> lines = absl::StrSplit(comment, '\n');
  if (!lines.empty() && lines.front().empty()) lines.erase(lines.begin());
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  std::string out;
  for (std::string line : lines) {
    if (!line.empty() && line[0] != ' ') line = " " + line;
    absl::StrAppend(&out, indent, "//", absl::StripTrailingAsciiWhitespace(line), "\n");
  }
  return out;
}

std::string LeadingComment(const protobuf::ServiceDescriptor& service) {
  protobuf::SourceLocation location;
  return service.GetSourceLocation(&location) ? location.leading_comments : "";
}
std::string LeadingComment(const protobuf::MethodDescriptor& method) {
  protobuf::SourceLocation location;
  return method.GetSourceLocation(&location) ? location.leading_comments : "";
}

// What `grpcurl describe SERVICE` prints: protoprint with Compact, SortElements,
// ForceFullyQualifiedNames and only doc (leading) comments. ledgerd's services have no options.
std::string DescribeService(const protobuf::ServiceDescriptor& service) {
  std::vector<const protobuf::MethodDescriptor*> methods;
  for (int i = 0; i < service.method_count(); ++i) methods.push_back(service.method(i));
  std::sort(methods.begin(), methods.end(), [](auto* a, auto* b) { return a->name() < b->name(); });
  std::string out =
      absl::StrCat(service.full_name(), " is a service:\n",
                   CommentLines(LeadingComment(service), ""), "service ", service.name(), " {\n");
  for (const protobuf::MethodDescriptor* method : methods) {
    absl::StrAppend(&out, CommentLines(LeadingComment(*method), "  "), "  rpc ", method->name(),
                    " ( ", method->client_streaming() ? "stream " : "", ".",
                    method->input_type()->full_name(), " ) returns ( ",
                    method->server_streaming() ? "stream " : "", ".",
                    method->output_type()->full_name(), " );\n");
  }
  return out + "}\n";
}

// grpcurl's side of one ledgerd: a reflection stream and the descriptors it has learned.
class GrpcurlLike {
 public:
  explicit GrpcurlLike(std::shared_ptr<grpc::Channel> channel)
      : channel_(std::move(channel)),
        reflection_(ServerReflection::NewStub(channel_)),
        context_(ContextWithDeadline(std::chrono::seconds(60))),
        stream_(reflection_->ServerReflectionInfo(context_.get())) {}

  ~GrpcurlLike() {
    stream_->WritesDone();
    EXPECT_TRUE(stream_->Finish().ok());
  }

  // What grpcurl prints for one command of the transcript.
  std::string Run(const std::string& command) {
    std::vector<std::string> words = ShellWords(command);
    std::string data;
    std::vector<std::string> positional;
    for (size_t i = 1; i < words.size(); ++i) {
      if (words[i] == "-plaintext") continue;
      if (words[i] == "-d" && i + 1 < words.size()) {
        data = words[++i];
        continue;
      }
      positional.push_back(words[i]);
    }
    if (words.empty() || words[0] != "grpcurl" || positional.size() < 2) {
      return "unsupported command: " + command;
    }
    if (positional[1] == "list") return List();
    if (positional[1] == "describe" && positional.size() == 3) return Describe(positional[2]);
    return Invoke(positional[1], data.empty() ? "{}" : data);
  }

 private:
  ServerReflectionResponse Ask(const ServerReflectionRequest& request) {
    ServerReflectionResponse response;
    EXPECT_TRUE(stream_->Write(request));
    EXPECT_TRUE(stream_->Read(&response));
    return response;
  }

  std::string List() {
    ServerReflectionRequest request;
    request.set_list_services("");
    std::vector<std::string> names;
    const ServerReflectionResponse response = Ask(request);
    for (const auto& service : response.list_services_response().service()) {
      names.push_back(service.name());
    }
    std::sort(names.begin(), names.end());  // grpcurl sorts them.
    return absl::StrJoin(names, "\n") + "\n";
  }

  // Learns the file that defines `symbol`, and what it imports, as grpcurl does; then the pool
  // finds it. Every import must come in the same answer or by name (file_by_filename).
  void LearnFileOf(const std::string& symbol) {
    ServerReflectionRequest request;
    request.set_file_containing_symbol(symbol);
    ServerReflectionResponse response = Ask(request);
    EXPECT_TRUE(response.has_file_descriptor_response()) << response.DebugString();
    for (const std::string& bytes : response.file_descriptor_response().file_descriptor_proto()) {
      protobuf::FileDescriptorProto file;
      EXPECT_TRUE(file.ParseFromString(bytes));
      protobuf::FileDescriptorProto known;
      if (database_.FindFileByName(file.name(), &known)) continue;
      EXPECT_TRUE(database_.Add(file));
      for (const std::string& dependency : file.dependency()) FetchFile(dependency);
    }
  }

  const protobuf::ServiceDescriptor* ResolveService(const std::string& symbol) {
    LearnFileOf(symbol);
    return pool_.FindServiceByName(symbol);
  }

  void FetchFile(const std::string& name) {
    protobuf::FileDescriptorProto known;
    if (database_.FindFileByName(name, &known)) return;
    ServerReflectionRequest request;
    request.set_file_by_filename(name);
    ServerReflectionResponse response = Ask(request);
    for (const std::string& bytes : response.file_descriptor_response().file_descriptor_proto()) {
      protobuf::FileDescriptorProto file;
      EXPECT_TRUE(file.ParseFromString(bytes));
      if (!database_.FindFileByName(file.name(), &known)) {
        EXPECT_TRUE(database_.Add(file));
      }
    }
  }

  std::string Describe(const std::string& symbol) {
    const protobuf::ServiceDescriptor* service = ResolveService(symbol);
    if (service == nullptr) return "cannot resolve " + symbol;
    return DescribeService(*service);
  }

  std::string Invoke(const std::string& full_method, const std::string& json) {
    const std::vector<std::string> parts = absl::StrSplit(full_method, '/');
    if (parts.size() != 2) return "bad method " + full_method;
    const protobuf::ServiceDescriptor* service = ResolveService(parts[0]);
    if (service == nullptr) return "cannot resolve " + parts[0];
    const protobuf::MethodDescriptor* method = service->FindMethodByName(parts[1]);
    if (method == nullptr) return "no method " + full_method;
    std::unique_ptr<protobuf::Message> request(factory_.GetPrototype(method->input_type())->New());
    std::unique_ptr<protobuf::Message> response(
        factory_.GetPrototype(method->output_type())->New());
    auto parsed = protobuf::util::JsonStringToMessage(json, request.get());
    if (!parsed.ok()) return "bad -d: " + parsed.ToString();

    const std::string request_bytes = request->SerializeAsString();
    grpc::Slice slice(request_bytes);
    grpc::ByteBuffer request_buffer(&slice, 1);
    grpc::ByteBuffer response_buffer;
    grpc::GenericStub stub(channel_);
    auto context = ContextWithDeadline();
    absl::Notification done;
    grpc::Status status;
    stub.UnaryCall(context.get(), absl::StrCat("/", full_method), grpc::StubOptions(),
                   &request_buffer, &response_buffer, [&](grpc::Status finished) {
                     status = std::move(finished);
                     done.Notify();
                   });
    if (!done.WaitForNotificationWithTimeout(absl::Seconds(30))) return "call timed out";
    if (!status.ok()) {
      return absl::StrCat("ERROR:\n  Code: ", GoCodeName(status.error_code()),
                          "\n  Message: ", status.error_message(), "\n",
                          Details(status.error_details()));
    }
    grpc::Slice received;
    EXPECT_TRUE(response_buffer.DumpToSingleSlice(&received).ok());
    EXPECT_TRUE(response->ParseFromArray(received.begin(), static_cast<int>(received.size())));
    protobuf::util::JsonPrintOptions options;  // grpcurl's defaults: no -emit-defaults.
    options.always_print_primitive_fields = false;
    options.preserve_proto_field_names = false;
    std::string compact;
    EXPECT_TRUE(protobuf::util::MessageToJsonString(*response, &compact, options).ok());
    return IndentLikeGo(compact) + "\n";
  }

  // grpcurl's "Details:" of an error (grpcurl.PrintStatus): each google.protobuf.Any of the
  // google.rpc.Status in grpc-status-details-bin, its type learnt by reflection, printed as
  // jsonpb with its "@type", the first line after "  N)\t" and the others after as many spaces
  // and a tab. Empty when the status has no details.
  std::string Details(const std::string& bytes) {
    if (bytes.empty()) return "";
    LearnFileOf("google.rpc.Status");
    const protobuf::Descriptor* status_type = pool_.FindMessageTypeByName("google.rpc.Status");
    if (status_type == nullptr) return "cannot resolve google.rpc.Status\n";
    std::unique_ptr<protobuf::Message> status(factory_.GetPrototype(status_type)->New());
    if (!status->ParseFromString(bytes)) return "grpc-status-details-bin does not parse\n";
    const protobuf::FieldDescriptor* details = status_type->FindFieldByName("details");
    const protobuf::Reflection* reflection = status->GetReflection();
    std::unique_ptr<protobuf::util::TypeResolver> resolver(
        protobuf::util::NewTypeResolverForDescriptorPool("type.googleapis.com", &pool_));
    std::string out = "  Details:\n";
    for (int i = 0; i < reflection->FieldSize(*status, details); ++i) {
      const protobuf::Message& any = reflection->GetRepeatedMessage(*status, details, i);
      const std::string type_url =
          any.GetReflection()->GetString(any, any.GetDescriptor()->FindFieldByName("type_url"));
      LearnFileOf(std::string(absl::StripPrefix(type_url, "type.googleapis.com/")));
      std::string compact;
      const auto printed = protobuf::util::BinaryToJsonString(
          resolver.get(), "type.googleapis.com/google.protobuf.Any", any.SerializeAsString(),
          &compact, protobuf::util::JsonPrintOptions());
      if (!printed.ok())
        return absl::StrCat(out, "cannot print ", type_url, ": ", printed.ToString());
      const std::string prefix = absl::StrCat("  ", i + 1, ")");
      const std::vector<std::string> lines = absl::StrSplit(IndentLikeGo(compact), '\n');
      for (size_t k = 0; k < lines.size(); ++k) {
        absl::StrAppend(&out, k == 0 ? prefix : std::string(prefix.size(), ' '), "\t", lines[k],
                        "\n");
      }
    }
    return out;
  }

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<ServerReflection::Stub> reflection_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<ServerReflectionRequest, ServerReflectionResponse>>
      stream_;
  protobuf::SimpleDescriptorDatabase database_;
  protobuf::DescriptorPool pool_{&database_};
  protobuf::DynamicMessageFactory factory_{&pool_};
};

TEST(GrpcurlReadmeTest, IndentLikeGoMatchesEncodingJsonIndent) {
  EXPECT_EQ(IndentLikeGo(R"({"a":"1","b":[{"c":"x,:{"}],"e":{},"f":[]})"),
            "{\n  \"a\": \"1\",\n  \"b\": [\n    {\n      \"c\": \"x,:{\"\n    }\n  ],\n"
            "  \"e\": {},\n  \"f\": []\n}");
}

// Runs the transcript of the document at `path` (relative to the source tree) against a new
// ledger, command by command, and expects at least `examples_min` commands in it.
void ExpectTranscriptIsWhatTheServerAnswers(const std::string& path, size_t examples_min) {
  const std::vector<Example> examples =
      ReadTranscript(ReadFile(testing_util::SourceDir() + "/" + path));
  ASSERT_GE(examples.size(), examples_min)
      << "the grpcurl transcript of " << path << " (after the marker) is gone";

  testing_util::ScratchLedger data;
  ServerOptions options = testing_util::LoopbackOptions();
  options.storage.durability = storage::Durability::kSync;
  options.storage.data_dir = data.path();
  // A clock the test steps, so that History's times are the document's: each command runs 50 ms
  // after the previous one, from 2026-11-30T11:49:59.701Z.
  auto now = std::make_shared<std::atomic<int64_t>>(1796039399701);
  options.storage.clock = [now] { return absl::FromUnixMillis(now->load()); };
  testing_util::TestServer server(options);

  GrpcurlLike grpcurl(server.NewChannel());
  for (const Example& example : examples) {
    EXPECT_EQ(grpcurl.Run(example.command), example.output) << path << ": $ " << example.command;
    now->fetch_add(50);
  }
}

TEST(GrpcurlReadmeTest, EveryApiDocGrpcurlOutputIsWhatTheServerAnswers) {
  ExpectTranscriptIsWhatTheServerAnswers("docs/api.md", 10);
}

TEST(GrpcurlReadmeTest, TheReadmeGrpcurlExampleIsWhatTheServerAnswers) {
  ExpectTranscriptIsWhatTheServerAnswers("README.md", 3);
}

}  // namespace
}  // namespace ledger
