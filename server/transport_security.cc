#include "server/transport_security.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "server/authz_policy.h"

namespace ledger {
namespace {

// Checks that `path` can be read now and holds a PEM block of `kind` ("CERTIFICATE" or
// "PRIVATE KEY"): the provider reads the files on a thread of its own, where a typo would
// surface only as failed handshakes.
absl::Status CheckPemFile(absl::string_view option, const std::string& path,
                          absl::string_view kind) {
  absl::StatusOr<std::string> content = ReadConfigFile(path);
  if (!content.ok())
    return absl::InvalidArgumentError(absl::StrCat(option, ": ", content.status().message()));
  // "-----BEGIN CERTIFICATE-----"; keys are "PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY".
  const bool found = absl::StrContains(*content, "-----BEGIN ") &&
                     absl::StrContains(*content, absl::StrCat(kind, "-----"));
  if (!found) {
    return absl::InvalidArgumentError(absl::StrCat(option, ": ", path, " holds no PEM ", kind,
                                                   " (-----BEGIN ... ", kind, "-----)"));
  }
  return absl::OkStatus();
}

absl::Status Validate(const TransportSecurityOptions& options) {
  if (!options.tls()) {
    if (options.mutual_tls()) {
      return absl::InvalidArgumentError(
          "--tls_client_ca_file (mutual TLS) needs --tls_cert_file and --tls_key_file: the "
          "server must present a certificate of its own");
    }
    if (!options.authz_policy_file.empty()) {
      return absl::InvalidArgumentError(
          "--authz_policy_file needs mutual TLS (--tls_cert_file, --tls_key_file and "
          "--tls_client_ca_file): the policy names clients by their certificates");
    }
    if (!options.peer_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "--peer_tls_ca_file needs --tls_cert_file and --tls_key_file: a replica reaches the "
          "other members over TLS only when it serves TLS itself");
    }
    return absl::OkStatus();
  }
  if (options.cert_file.empty()) {
    return absl::InvalidArgumentError("--tls_key_file needs --tls_cert_file");
  }
  if (options.key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert_file needs --tls_key_file");
  }
  if (!options.authz_policy_file.empty() && !options.mutual_tls()) {
    return absl::InvalidArgumentError(
        "--authz_policy_file needs mutual TLS (--tls_client_ca_file): the policy names clients "
        "by their certificates");
  }
  if (options.refresh_interval < kRefreshIntervalMin ||
      options.refresh_interval > kRefreshIntervalMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_refresh_interval must be ", absl::FormatDuration(kRefreshIntervalMin),
                     " to ", absl::FormatDuration(kRefreshIntervalMax), "; got ",
                     absl::FormatDuration(options.refresh_interval)));
  }
  absl::Status status = CheckPemFile("--tls_cert_file", options.cert_file, "CERTIFICATE");
  if (status.ok()) status = CheckPemFile("--tls_key_file", options.key_file, "PRIVATE KEY");
  if (status.ok() && options.mutual_tls()) {
    status = CheckPemFile("--tls_client_ca_file", options.client_ca_file, "CERTIFICATE");
  }
  if (status.ok() && !options.peer_ca_file.empty()) {
    status = CheckPemFile("--peer_tls_ca_file", options.peer_ca_file, "CERTIFICATE");
  }
  return status;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServerTransportSecurity>> ServerTransportSecurity::Create(
    const TransportSecurityOptions& options) {
  if (absl::Status status = Validate(options); !status.ok()) return status;
  std::unique_ptr<ServerTransportSecurity> security(new ServerTransportSecurity());
  if (!options.tls()) {
    security->credentials_ = grpc::InsecureServerCredentials();
    security->description_ = "plaintext (no TLS)";
    return security;
  }
  const auto refresh_seconds =
      static_cast<unsigned int>(absl::ToInt64Seconds(options.refresh_interval));
  // Reads the files again every refresh_seconds; a changed certificate is used for the next
  // handshakes, connections already open keep theirs.
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      options.key_file, options.cert_file, options.client_ca_file, refresh_seconds);
  grpc::experimental::TlsServerCredentialsOptions tls(provider);
  tls.watch_identity_key_cert_pairs();
  if (options.mutual_tls()) {
    tls.watch_root_certs();
    tls.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    tls.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  security->credentials_ = grpc::experimental::TlsServerCredentials(tls);
  security->description_ = options.mutual_tls() ? "mutual TLS" : "TLS";
  if (!options.authz_policy_file.empty()) {
    absl::StatusOr<std::unique_ptr<AuthzPolicyWatcher>> watcher =
        AuthzPolicyWatcher::Start(options.authz_policy_file, options.refresh_interval);
    if (!watcher.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--authz_policy_file: ", watcher.status().message()));
    }
    security->policy_watcher_ = *std::move(watcher);
    security->credentials_->SetAuthMetadataProcessor(security->policy_watcher_->NewProcessor());
    absl::StrAppend(&security->description_, ", authorization policy \"",
                    security->policy_watcher_->current()->name(), "\"");
  } else {
    absl::StrAppend(&security->description_, ", no authorization policy");
  }
  absl::StrAppend(&security->description_, " (files re-read every ",
                  absl::FormatDuration(options.refresh_interval), ")");
  return security;
}

ServerTransportSecurity::~ServerTransportSecurity() = default;

}  // namespace ledger
