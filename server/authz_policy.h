// Defines `AuthzPolicy`, a gRPC authorization policy (gRFC A43's JSON: who may call which
// method), `AuthzPolicyWatcher`, which re-reads the policy file while the server runs, and the
// grpc::AuthMetadataProcessor that applies it to every call.
//
// NOTE: why ledgerd evaluates the policy itself. gRPC 1.51 has an authorization engine
// (grpc::experimental::FileWatcherAuthorizationPolicyProvider with
// ServerBuilder::experimental().SetAuthorizationPolicyProvider), but Debian 12 ships only its
// header: the provider and the JSON-to-RBAC translator live in upstream's separate
// libgrpc_authorization_provider, which Debian does not build (libgrpc++.so.1.51 has no
// FileWatcherAuthorizationPolicyProvider::Create, libgrpc.so no
// grpc_authorization_policy_provider_file_watcher_create). So ledgerd reads the same JSON, with
// the same meaning for what it supports, and applies it through gRPC's public per-call hook on
// the TLS credentials. A policy file written for gRPC's engine keeps working when a gRPC that
// ships the provider replaces this code.
//
// Supported: "name"; "deny_rules" and "allow_rules", each rule with "name", "source":
// {"principals": [...]} and "request": {"paths": [...]}. Refused at load, never ignored:
// "headers" and any other field. A pattern is exact, "*" (anything; for a principal: any client
// with a verified certificate), "prefix*" or "*suffix".
// Admin methods (/ledger.v1.LedgerAdmin/...) are stricter than gRPC's engine: only an allow rule
// that lists principals and paths, none of them "*", admits them, so that a rule written for
// "every client" or "every method" never hands out a backup of the whole ledger.
// Decision, as gRPC's: a matching deny rule refuses; else a matching allow rule admits; else the
// call is refused. A rule matches when every part it has matches (an absent part matches all).
// A principal matches a client whose certificate's URI SAN, DNS SAN or subject ("CN=reporting")
// it matches, in that order. Refused calls end PERMISSION_DENIED before they reach a service.
#ifndef LEDGER_SERVER_AUTHZ_POLICY_H_
#define LEDGER_SERVER_AUTHZ_POLICY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/steady_wait.h"
#include "grpcpp/security/auth_metadata_processor.h"
#include "metrics/ledger_metrics.h"

namespace ledger {

// The methods only a rule naming the caller admits (see above).
inline constexpr absl::string_view kAdminServicePrefix = "/ledger.v1.LedgerAdmin/";

// The most bytes a policy or PEM file may hold; a bigger one is refused, not read.
inline constexpr size_t kConfigFileBytesMax = 1 << 20;

// Reads a whole file of at most kConfigFileBytesMax bytes. InvalidArgument says which file and
// why (the errno's meaning, or too big).
absl::StatusOr<std::string> ReadConfigFile(const std::string& path);

// Who a client is, as the policy sees it: what its verified certificate says.
struct PeerIdentity {
  // True only for a client that presented a certificate the server verified.
  bool authenticated = false;
  std::vector<std::string> uri_sans;
  std::vector<std::string> dns_sans;
  std::string subject;  // RFC 2253, e.g. "CN=reporting,O=Example".

  // How error messages name the client: its first URI or DNS SAN, else its subject.
  std::string Name() const;
};

// Immutable after Parse; thread-safe.
class AuthzPolicy {
 public:
  // InvalidArgument names what is wrong and where (e.g. "allow_rules[1].request.paths[0]").
  static absl::StatusOr<AuthzPolicy> Parse(absl::string_view json);

  // OK when the policy lets `peer` call `path` ("/package.Service/Method"), else
  // PermissionDenied saying who may not call what, and which rule decided it.
  absl::Status Check(absl::string_view path, const PeerIdentity& peer) const;

  const std::string& name() const { return name_; }

 private:
  struct Pattern {
    enum class Kind { kAny, kExact, kPrefix, kSuffix };
    Kind kind = Kind::kExact;
    std::string text;
    bool Matches(absl::string_view value) const;
  };
  struct Rule {
    std::string name;
    std::vector<Pattern> principals;  // Empty: any client, with or without a certificate.
    std::vector<Pattern> paths;       // Empty: any method.
    bool Matches(absl::string_view path, const PeerIdentity& peer) const;
    // Lists principals and paths, none of them "*": what an admin method needs.
    bool NamesCallersAndPaths() const;
  };
  friend class AuthzPolicyParser;

  std::string name_;
  std::vector<Rule> deny_rules_;
  std::vector<Rule> allow_rules_;
};

// Thread-safe. Holds the current policy and re-reads its file every refresh interval on a
// thread of its own (never on a gRPC thread). A changed file that parses replaces the policy; one
// that does not is logged once and the previous policy stays, as gRPC's file watcher does.
// Destruction stops and joins the thread.
class AuthzPolicyWatcher {
 public:
  // Reads and parses the file now: an error here fails start-up.
  static absl::StatusOr<std::unique_ptr<AuthzPolicyWatcher>> Start(const std::string& path,
                                                                   absl::Duration refresh_interval);
  ~AuthzPolicyWatcher();
  AuthzPolicyWatcher(const AuthzPolicyWatcher&) = delete;
  AuthzPolicyWatcher& operator=(const AuthzPolicyWatcher&) = delete;

  // Any thread.
  std::shared_ptr<const AuthzPolicy> current() const;
  // How many times a changed file replaced the policy since start. Any thread.
  int64_t reloads() const;
  // How many changed files were refused (unreadable, or not a valid policy). Any thread.
  int64_t refusals() const;
  // The per-call check to set on TLS server credentials; it reads current() on every call.
  std::shared_ptr<grpc::AuthMetadataProcessor> NewProcessor() const;
  // From now on, a refused call to a ledger.v1.Ledger method is counted in `metrics` as
  // ledger_requests_total{method, code="PERMISSION_DENIED"}: it never reaches the service, which
  // counts the others. Call before serving.
  void CountDenialsIn(std::shared_ptr<LedgerMetrics> metrics);

  // The current policy, shared with every processor, which may outlive this watcher inside
  // gRPC's credentials. Defined in the .cc file.
  struct Slot;

 private:
  AuthzPolicyWatcher(std::string path, absl::Duration refresh_interval, std::string content,
                     AuthzPolicy policy);
  void Run();
  void ReloadIfChanged();
  // Logs and counts a changed file that cannot be used, once per distinct content.
  void Refuse(std::string content, absl::string_view why);

  const std::string path_;
  const absl::Duration refresh_interval_;
  // The file's last content that parsed, and the last that did not: each change is acted on
  // (and logged) once. Only the watcher thread touches them.
  std::string content_;
  std::string refused_content_;
  const std::shared_ptr<Slot> slot_;
  SteadyNotification stop_;
  std::thread thread_;
};

}  // namespace ledger

#endif  // LEDGER_SERVER_AUTHZ_POLICY_H_
