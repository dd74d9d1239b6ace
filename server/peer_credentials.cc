#include "server/peer_credentials.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/security/credentials.h"
#include "server/authz_policy.h"

namespace ledger {
namespace {

absl::StatusOr<std::string> ReadFlagFile(absl::string_view flag, const std::string& path) {
  absl::StatusOr<std::string> content = ReadConfigFile(path);
  if (!content.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " (to reach the other members over TLS): ", content.status().message()));
  }
  return content;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> PeerChannelCredentials(
    const TransportSecurityOptions& own) {
  if (!own.tls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  const bool own_ca = !own.peer_ca_file.empty();
  if (own_ca || own.mutual_tls()) {
    absl::StatusOr<std::string> roots =
        ReadFlagFile(own_ca ? "--peer_tls_ca_file" : "--tls_client_ca_file",
                     own_ca ? own.peer_ca_file : own.client_ca_file);
    if (!roots.ok()) return roots.status();
    ssl.pem_root_certs = *std::move(roots);
  }
  absl::StatusOr<std::string> cert = ReadFlagFile("--tls_cert_file", own.cert_file);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadFlagFile("--tls_key_file", own.key_file);
  if (!key.ok()) return key.status();
  ssl.pem_cert_chain = *std::move(cert);
  ssl.pem_private_key = *std::move(key);
  return grpc::SslCredentials(ssl);
}

}  // namespace ledger
