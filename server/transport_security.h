// Defines what secures ledgerd's gRPC port: `TransportSecurityOptions` (TLS, mutual TLS, an
// authorization policy) and `ServerTransportSecurity`, which turns them into the server
// credentials given to grpc::ServerBuilder::AddListeningPort.
//
// TLS is gRPC's own: grpc::experimental::FileWatcherCertificateProvider re-reads the certificate,
// key and client CA files every refresh interval, so a rotated certificate is served without a
// restart. The authorization policy is in gRPC's authorization policy format (gRFC A43, the JSON
// that grpc::experimental::FileWatcherAuthorizationPolicyProvider reads); see authz_policy.h for
// why ledgerd evaluates it itself on Debian 12's gRPC 1.51.
#ifndef LEDGER_SERVER_TRANSPORT_SECURITY_H_
#define LEDGER_SERVER_TRANSPORT_SECURITY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/security/server_credentials.h"

namespace ledger {

class AuthzPolicyWatcher;

struct TransportSecurityOptions {
  // PEM files. All empty: plaintext. cert_file and key_file: TLS. With client_ca_file as well:
  // mutual TLS, every client must present a certificate that this CA bundle verifies.
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;
  // A gRPC authorization policy (JSON). Needs mutual TLS: it names clients by their certificates.
  std::string authz_policy_file;
  // How often the files above are read again for changes (whole seconds, at least 1).
  absl::Duration refresh_interval = absl::Seconds(60);
  // A cluster replica with TLS: the PEM CA bundle that verifies the other members'
  // certificates when it reaches their gRPC ports (server/peer_credentials.h). Empty:
  // client_ca_file, or the system's roots without it.
  std::string peer_ca_file;

  bool tls() const { return !cert_file.empty() || !key_file.empty(); }
  bool mutual_tls() const { return !client_ca_file.empty(); }
};

// The bounds of TransportSecurityOptions::refresh_interval.
inline constexpr absl::Duration kRefreshIntervalMin = absl::Seconds(1);
inline constexpr absl::Duration kRefreshIntervalMax = absl::Hours(24);

// Thread-safe. Owns the certificate provider (through the credentials) and the policy watcher's
// thread, which stops when this is destroyed.
class ServerTransportSecurity {
 public:
  // Checks the combination of options and that every file named can be read now and holds what
  // it should (PEM certificates, a PEM key, a valid policy), so that a typo fails at start
  // instead of at the first handshake. InvalidArgument names the option and the file.
  static absl::StatusOr<std::unique_ptr<ServerTransportSecurity>> Create(
      const TransportSecurityOptions& options);

  ~ServerTransportSecurity();
  ServerTransportSecurity(const ServerTransportSecurity&) = delete;
  ServerTransportSecurity& operator=(const ServerTransportSecurity&) = delete;

  // For AddListeningPort: insecure, or TLS with the file-watching provider (and the policy).
  std::shared_ptr<grpc::ServerCredentials> credentials() const { return credentials_; }
  // For the start-up line, for example "mutual TLS, authorization policy ledger (refresh 60s)".
  const std::string& description() const { return description_; }
  // Null without a policy.
  const AuthzPolicyWatcher* policy_watcher() const { return policy_watcher_.get(); }
  AuthzPolicyWatcher* policy_watcher() { return policy_watcher_.get(); }

 private:
  ServerTransportSecurity() = default;

  std::shared_ptr<grpc::ServerCredentials> credentials_;
  std::unique_ptr<AuthzPolicyWatcher> policy_watcher_;
  std::string description_;
};

}  // namespace ledger

#endif  // LEDGER_SERVER_TRANSPORT_SECURITY_H_
