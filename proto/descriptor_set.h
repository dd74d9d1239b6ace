// Declares `EmbeddedDescriptorSet`: the FileDescriptorSet that ledgerd's reflection serves, built
// by protoc at build time with source info (the .proto comments) and every import, and compiled
// into the binary (proto/CMakeLists.txt, embed_descriptor_set.cmake).
#ifndef LEDGER_PROTO_DESCRIPTOR_SET_H_
#define LEDGER_PROTO_DESCRIPTOR_SET_H_

#include <string_view>

namespace ledger {

// The serialized google.protobuf.FileDescriptorSet of ledger/v1/ledger.proto,
// grpc/health/v1/health.proto and grpc/reflection/v1alpha/reflection.proto, with their imports,
// each file after the files it imports. Static storage; thread-safe.
std::string_view EmbeddedDescriptorSet();

}  // namespace ledger

#endif  // LEDGER_PROTO_DESCRIPTOR_SET_H_
