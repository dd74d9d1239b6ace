#include "server/authz_policy.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpc/grpc_security_constants.h"

namespace ledger {

absl::StatusOr<std::string> ReadConfigFile(const std::string& path) {
  std::error_code ignored;
  // A directory opens as a stream that reads nothing: say what it is instead.
  if (std::filesystem::is_directory(path, ignored)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", path, ": ", std::strerror(EISDIR)));
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  std::string content;
  char buffer[1 << 14];
  // Reads at most one chunk beyond the bound, whatever the file's size.
  while (file.read(buffer, sizeof(buffer)) || file.gcount() > 0) {
    content.append(buffer, static_cast<size_t>(file.gcount()));
    if (content.size() > kConfigFileBytesMax) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " is larger than ", kConfigFileBytesMax, " bytes"));
    }
  }
  if (file.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  return content;
}

std::string PeerIdentity::Name() const {
  if (!authenticated) return "a client without a certificate";
  if (!uri_sans.empty()) return uri_sans.front();
  if (!dns_sans.empty()) return dns_sans.front();
  return subject;
}

bool AuthzPolicy::Pattern::Matches(absl::string_view value) const {
  switch (kind) {
    case Kind::kAny:
      return true;
    case Kind::kExact:
      return value == text;
    case Kind::kPrefix:
      return absl::StartsWith(value, text);
    case Kind::kSuffix:
      return absl::EndsWith(value, text);
  }
  return false;
}

bool AuthzPolicy::Rule::Matches(absl::string_view path, const PeerIdentity& peer) const {
  if (!paths.empty() &&
      std::none_of(paths.begin(), paths.end(), [&](const Pattern& p) { return p.Matches(path); })) {
    return false;
  }
  if (principals.empty()) return true;
  // A principal names a client by its certificate: without one, none matches.
  if (!peer.authenticated) return false;
  for (const Pattern& principal : principals) {
    for (const std::string& san : peer.uri_sans) {
      if (principal.Matches(san)) return true;
    }
    for (const std::string& san : peer.dns_sans) {
      if (principal.Matches(san)) return true;
    }
    if (!peer.subject.empty() && principal.Matches(peer.subject)) return true;
  }
  return false;
}

bool AuthzPolicy::Rule::NamesCallersAndPaths() const {
  const auto named = [](const std::vector<Pattern>& patterns) {
    return !patterns.empty() &&
           std::none_of(patterns.begin(), patterns.end(),
                        [](const Pattern& p) { return p.kind == Pattern::Kind::kAny; });
  };
  return named(principals) && named(paths);
}

// Turns the JSON (parsed into a google.protobuf.Struct) into an AuthzPolicy, naming the place of
// the first thing that is wrong.
class AuthzPolicyParser {
 public:
  using Value = google::protobuf::Value;
  using Struct = google::protobuf::Struct;

  static absl::StatusOr<AuthzPolicy> Parse(const Struct& root) {
    AuthzPolicy policy;
    if (absl::Status s = OnlyFields(root, "the policy", {"name", "deny_rules", "allow_rules"});
        !s.ok()) {
      return s;
    }
    absl::StatusOr<std::string> name = RequiredString(root, "name", "the policy");
    if (!name.ok()) return name.status();
    policy.name_ = *std::move(name);
    if (!root.fields().contains("allow_rules")) {
      return absl::InvalidArgumentError("the policy has no \"allow_rules\" (a list of rules)");
    }
    for (const char* field : {"deny_rules", "allow_rules"}) {
      if (!root.fields().contains(field)) continue;
      const Value& rules = root.fields().at(field);
      if (!rules.has_list_value()) {
        return absl::InvalidArgumentError(absl::StrCat("\"", field, "\" must be a list of rules"));
      }
      std::vector<AuthzPolicy::Rule>& out =
          std::string_view(field) == "deny_rules" ? policy.deny_rules_ : policy.allow_rules_;
      for (int i = 0; i < rules.list_value().values_size(); ++i) {
        absl::StatusOr<AuthzPolicy::Rule> rule =
            ParseRule(rules.list_value().values(i), absl::StrCat(field, "[", i, "]"));
        if (!rule.ok()) return rule.status();
        out.push_back(*std::move(rule));
      }
    }
    return policy;
  }

 private:
  static absl::Status OnlyFields(const Struct& object, const std::string& where,
                                 std::initializer_list<absl::string_view> allowed) {
    for (const auto& [key, value] : object.fields()) {
      if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          where, " has \"", key,
          "\", which ledgerd does not support (allowed: ", absl::StrJoin(allowed, ", "), ")"));
    }
    return absl::OkStatus();
  }

  static absl::StatusOr<std::string> RequiredString(const Struct& object, const std::string& key,
                                                    const std::string& where) {
    const auto it = object.fields().find(key);
    if (it == object.fields().end() || !it->second.has_string_value() ||
        it->second.string_value().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " needs \"", key, "\" (a non-empty string)"));
    }
    return it->second.string_value();
  }

  static absl::StatusOr<AuthzPolicy::Rule> ParseRule(const Value& value, const std::string& where) {
    if (!value.has_struct_value()) {
      return absl::InvalidArgumentError(absl::StrCat(where, " must be an object"));
    }
    const Struct& rule_json = value.struct_value();
    if (absl::Status s = OnlyFields(rule_json, where, {"name", "source", "request"}); !s.ok()) {
      return s;
    }
    AuthzPolicy::Rule rule;
    absl::StatusOr<std::string> name = RequiredString(rule_json, "name", where);
    if (!name.ok()) return name.status();
    rule.name = *std::move(name);
    absl::Status parsed =
        ParsePart(rule_json, "source", "principals", where + ".source", &rule.principals);
    if (parsed.ok()) {
      parsed = ParsePart(rule_json, "request", "paths", where + ".request", &rule.paths);
    }
    if (!parsed.ok()) return parsed;
    return rule;
  }

  // Reads rule[part][list] ("source"/"principals" or "request"/"paths") into `patterns`.
  static absl::Status ParsePart(const Struct& rule, const std::string& part,
                                const std::string& list, const std::string& where,
                                std::vector<AuthzPolicy::Pattern>* patterns) {
    const auto it = rule.fields().find(part);
    if (it == rule.fields().end()) return absl::OkStatus();
    if (!it->second.has_struct_value()) {
      return absl::InvalidArgumentError(absl::StrCat(where, " must be an object"));
    }
    const Struct& object = it->second.struct_value();
    if (absl::Status s = OnlyFields(object, where, {list}); !s.ok()) return s;
    const auto values = object.fields().find(list);
    if (values == object.fields().end()) return absl::OkStatus();
    if (!values->second.has_list_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".", list, " must be a list of strings"));
    }
    const auto& items = values->second.list_value().values();
    for (int i = 0; i < items.size(); ++i) {
      const std::string at = absl::StrCat(where, ".", list, "[", i, "]");
      if (!items[i].has_string_value()) {
        return absl::InvalidArgumentError(absl::StrCat(at, " must be a string"));
      }
      absl::StatusOr<AuthzPolicy::Pattern> pattern = ParsePattern(items[i].string_value(), at);
      if (!pattern.ok()) return pattern.status();
      patterns->push_back(*std::move(pattern));
    }
    return absl::OkStatus();
  }

  static absl::StatusOr<AuthzPolicy::Pattern> ParsePattern(const std::string& text,
                                                           const std::string& where) {
    using Kind = AuthzPolicy::Pattern::Kind;
    if (text == "*") return AuthzPolicy::Pattern{Kind::kAny, ""};
    const size_t stars = std::count(text.begin(), text.end(), '*');
    if (stars == 0) return AuthzPolicy::Pattern{Kind::kExact, text};
    if (stars == 1 && text.back() == '*') {
      return AuthzPolicy::Pattern{Kind::kPrefix, text.substr(0, text.size() - 1)};
    }
    if (stars == 1 && text.front() == '*')
      return AuthzPolicy::Pattern{Kind::kSuffix, text.substr(1)};
    return absl::InvalidArgumentError(absl::StrCat(
        where, " is \"", text,
        "\": a pattern is exact, \"*\", \"prefix*\" or \"*suffix\" (one * at an end)"));
  }
};

absl::StatusOr<AuthzPolicy> AuthzPolicy::Parse(absl::string_view json) {
  google::protobuf::Struct root;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &root);
  if (!parsed.ok()) {
    // Protobuf's message goes on with the text and a caret on further lines: keep the first.
    const std::string message(parsed.message());
    return absl::InvalidArgumentError(
        absl::StrCat("not a JSON object: ", message.substr(0, message.find('\n'))));
  }
  return AuthzPolicyParser::Parse(root);
}

absl::Status AuthzPolicy::Check(absl::string_view path, const PeerIdentity& peer) const {
  for (const Rule& rule : deny_rules_) {
    if (rule.Matches(path, peer)) {
      return absl::PermissionDeniedError(absl::StrCat("authorization policy \"", name_,
                                                      "\" denies ", peer.Name(), " the call ", path,
                                                      " (deny rule \"", rule.name, "\")"));
    }
  }
  const bool admin = absl::StartsWith(path, kAdminServicePrefix);
  for (const Rule& rule : allow_rules_) {
    if (admin && !rule.NamesCallersAndPaths()) continue;
    if (rule.Matches(path, peer)) return absl::OkStatus();
  }
  if (admin) {
    return absl::PermissionDeniedError(absl::StrCat(
        "authorization policy \"", name_, "\" does not allow ", peer.Name(), " to call ", path,
        " (an admin method needs an allow rule that names both the caller and the method; "
        "\"*\" names no one)"));
  }
  return absl::PermissionDeniedError(absl::StrCat("authorization policy \"", name_,
                                                  "\" does not allow ", peer.Name(), " to call ",
                                                  path, " (no allow rule matches)"));
}

struct AuthzPolicyWatcher::Slot {
  absl::Mutex mutex;
  std::shared_ptr<const AuthzPolicy> policy ABSL_GUARDED_BY(mutex);
  int64_t reloads ABSL_GUARDED_BY(mutex) = 0;
  int64_t refusals ABSL_GUARDED_BY(mutex) = 0;
  std::shared_ptr<LedgerMetrics> metrics ABSL_GUARDED_BY(mutex);

  std::shared_ptr<const AuthzPolicy> Current() {
    absl::MutexLock lock(&mutex);
    return policy;
  }
  std::shared_ptr<LedgerMetrics> Metrics() {
    absl::MutexLock lock(&mutex);
    return metrics;
  }
};

namespace {

std::vector<std::string> Properties(const grpc::AuthContext& context, const char* name) {
  std::vector<std::string> values;
  for (const grpc::string_ref& value : context.FindPropertyValues(name)) {
    values.emplace_back(value.data(), value.size());
  }
  return values;
}

PeerIdentity IdentityOf(const grpc::AuthContext& context) {
  PeerIdentity peer;
  // With --tls_client_ca_file gRPC asks for a certificate and refuses the handshake unless the CA
  // verifies it, so a certificate here is a verified one.
  peer.authenticated = !context.FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME).empty();
  if (!peer.authenticated) return peer;
  peer.uri_sans = Properties(context, GRPC_PEER_URI_PROPERTY_NAME);
  peer.dns_sans = Properties(context, GRPC_PEER_DNS_PROPERTY_NAME);
  const std::vector<std::string> subject = Properties(context, GRPC_X509_SUBJECT_PROPERTY_NAME);
  if (!subject.empty()) peer.subject = subject.front();
  return peer;
}

// Counts a refused call to a ledger method as ledger_requests_total{method, PERMISSION_DENIED}.
// Other paths (health, reflection, or any path a client makes up) are not counted: a label per
// made-up path would let a client grow the series without bound.
void CountDenial(absl::string_view path, LedgerMetrics* metrics) {
  static constexpr std::pair<absl::string_view, RpcMethod> kLedgerMethods[] = {
      {"/ledger.v1.Ledger/Deposit", RpcMethod::kDeposit},
      {"/ledger.v1.Ledger/Withdraw", RpcMethod::kWithdraw},
      {"/ledger.v1.Ledger/Balance", RpcMethod::kBalance},
      {"/ledger.v1.Ledger/History", RpcMethod::kHistory},
      {"/ledger.v1.Ledger/Transfer", RpcMethod::kTransfer},
      {"/ledger.v1.Ledger/GetTransfer", RpcMethod::kGetTransfer},
      {"/ledger.v1.Ledger/Apply", RpcMethod::kApply},
      {"/ledger.v1.Ledger/Watch", RpcMethod::kWatch},
  };
  if (metrics == nullptr) return;
  for (const auto& [method_path, method] : kLedgerMethods) {
    if (path == method_path) {
      metrics->RecordRequest(method, static_cast<int>(grpc::StatusCode::PERMISSION_DENIED));
      return;
    }
  }
}

// Runs inline on the gRPC thread that received the call (IsBlocking is false): it only reads
// memory. Thread-safe.
class PolicyProcessor final : public grpc::AuthMetadataProcessor {
 public:
  explicit PolicyProcessor(std::shared_ptr<AuthzPolicyWatcher::Slot> slot)
      : slot_(std::move(slot)) {}

  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext* context,
                       OutputMetadata* /*consumed*/, OutputMetadata* /*response*/) override {
    const auto path = metadata.find(":path");
    if (path == metadata.end()) {
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "a call without a method path");
    }
    const absl::string_view method(path->second.data(), path->second.size());
    const absl::Status decision = slot_->Current()->Check(method, IdentityOf(*context));
    if (decision.ok()) return grpc::Status::OK;
    CountDenial(method, slot_->Metrics().get());
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, std::string(decision.message()));
  }

 private:
  const std::shared_ptr<AuthzPolicyWatcher::Slot> slot_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<AuthzPolicyWatcher>> AuthzPolicyWatcher::Start(
    const std::string& path, absl::Duration refresh_interval) {
  absl::StatusOr<std::string> content = ReadConfigFile(path);
  if (!content.ok()) return content.status();
  absl::StatusOr<AuthzPolicy> policy = AuthzPolicy::Parse(*content);
  if (!policy.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("authorization policy ", path, ": ", policy.status().message()));
  }
  std::unique_ptr<AuthzPolicyWatcher> watcher(
      new AuthzPolicyWatcher(path, refresh_interval, *std::move(content), *std::move(policy)));
  watcher->thread_ = std::thread([w = watcher.get()] { w->Run(); });
  return watcher;
}

AuthzPolicyWatcher::AuthzPolicyWatcher(std::string path, absl::Duration refresh_interval,
                                       std::string content, AuthzPolicy policy)
    : path_(std::move(path)),
      refresh_interval_(refresh_interval),
      content_(std::move(content)),
      slot_(std::make_shared<Slot>()) {
  absl::MutexLock lock(&slot_->mutex);
  slot_->policy = std::make_shared<const AuthzPolicy>(std::move(policy));
}

AuthzPolicyWatcher::~AuthzPolicyWatcher() {
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<const AuthzPolicy> AuthzPolicyWatcher::current() const { return slot_->Current(); }

int64_t AuthzPolicyWatcher::reloads() const {
  absl::MutexLock lock(&slot_->mutex);
  return slot_->reloads;
}

int64_t AuthzPolicyWatcher::refusals() const {
  absl::MutexLock lock(&slot_->mutex);
  return slot_->refusals;
}

void AuthzPolicyWatcher::CountDenialsIn(std::shared_ptr<LedgerMetrics> metrics) {
  absl::MutexLock lock(&slot_->mutex);
  slot_->metrics = std::move(metrics);
}

std::shared_ptr<grpc::AuthMetadataProcessor> AuthzPolicyWatcher::NewProcessor() const {
  return std::make_shared<PolicyProcessor>(slot_);
}

void AuthzPolicyWatcher::Run() {
  while (!stop_.WaitForNotificationWithTimeout(refresh_interval_)) ReloadIfChanged();
}

void AuthzPolicyWatcher::Refuse(std::string content, absl::string_view why) {
  if (content == refused_content_) return;  // Logged and counted already.
  refused_content_ = std::move(content);
  std::cerr << "ledgerd: authorization policy " << path_
            << " not reloaded, keeping the previous one: " << why << "\n";
  absl::MutexLock lock(&slot_->mutex);
  ++slot_->refusals;
}

void AuthzPolicyWatcher::ReloadIfChanged() {
  absl::StatusOr<std::string> content = ReadConfigFile(path_);
  if (!content.ok()) {
    // An unreadable file (e.g. between an editor's delete and write) is remembered by its error.
    Refuse(std::string(content.status().message()), content.status().message());
    return;
  }
  if (*content == content_ || *content == refused_content_) return;
  absl::StatusOr<AuthzPolicy> policy = AuthzPolicy::Parse(*content);
  if (!policy.ok()) {
    Refuse(*std::move(content), policy.status().message());
    return;
  }
  content_ = *std::move(content);
  refused_content_.clear();
  std::cerr << "ledgerd: authorization policy \"" << policy->name() << "\" reloaded from " << path_
            << "\n";
  auto replacement = std::make_shared<const AuthzPolicy>(*std::move(policy));
  absl::MutexLock lock(&slot_->mutex);
  slot_->policy = std::move(replacement);
  ++slot_->reloads;
}

}  // namespace ledger
