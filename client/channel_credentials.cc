#include "client/channel_credentials.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"

namespace ledger {
namespace {

// The most bytes a PEM file may hold.
constexpr size_t kPemFileBytesMax = 1 << 20;

absl::StatusOr<std::string> ReadPem(absl::string_view flag, const std::string& path,
                                    absl::string_view kind) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": cannot read ", path, ": ", std::strerror(errno)));
  }
  std::ostringstream content;
  content << file.rdbuf();
  if (content.str().size() > kPemFileBytesMax) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", path, " is larger than ", kPemFileBytesMax, " bytes"));
  }
  if (!absl::StrContains(content.str(), absl::StrCat(kind, "-----"))) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " holds no PEM ", kind,
                                                   " (-----BEGIN ... ", kind, "-----)"));
  }
  return content.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> NewChannelCredentials(
    const ClientTlsOptions& options) {
  if (!options.tls()) return grpc::InsecureChannelCredentials();
  if (options.cert_file.empty() != options.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file and --tls_key_file go together (a client certificate and its key)");
  }
  grpc::SslCredentialsOptions ssl;
  if (!options.ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPem("--tls_ca_file", options.ca_file, "CERTIFICATE");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
  }
  if (!options.cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadPem("--tls_cert_file", options.cert_file, "CERTIFICATE");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem("--tls_key_file", options.key_file, "PRIVATE KEY");
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(ssl);
}

std::shared_ptr<grpc::Channel> NewLedgerChannel(
    const std::string& target, const ClientTlsOptions& options,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    grpc::ChannelArguments arguments) {
  if (!options.server_name.empty()) arguments.SetSslTargetNameOverride(options.server_name);
  return grpc::CreateCustomChannel(target, credentials, arguments);
}

grpc::Status ConnectBefore(grpc::Channel& channel, const std::string& target,
                           std::chrono::system_clock::time_point deadline) {
  grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN) {
      return {grpc::StatusCode::UNAVAILABLE,
              absl::StrCat("no connection to ", target,
                           " (nothing listens there, it cannot be reached, or the TLS handshake "
                           "failed)")};
    }
    if (!channel.WaitForStateChange(state, deadline)) {
      return {grpc::StatusCode::DEADLINE_EXCEEDED,
              absl::StrCat("not connected to ", target, " before the deadline")};
    }
    state = channel.GetState(/*try_to_connect=*/true);
  }
  return grpc::Status::OK;
}

}  // namespace ledger
