// AuthzPolicy on its own: what it accepts, what it refuses and why, and each decision.
#include "server/authz_policy.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/scratch_dir.h"
#include "tests/test_paths.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;

constexpr char kPolicy[] = R"json({
  "name": "ledger",
  "deny_rules": [
    {"name": "no-one-withdraws-as-ops", "source": {"principals": ["ops.*"]},
     "request": {"paths": ["/ledger.v1.Ledger/Withdraw"]}}
  ],
  "allow_rules": [
    {"name": "health", "request": {"paths": ["/grpc.health.v1.Health/*"]}},
    {"name": "reporting-reads", "source": {"principals": ["reporting"]},
     "request": {"paths": ["/ledger.v1.Ledger/Balance", "/ledger.v1.Ledger/History"]}},
    {"name": "payments", "source": {"principals": ["payments", "spiffe://example.org/*"]},
     "request": {"paths": ["/ledger.v1.Ledger/*"]}},
    {"name": "ops", "source": {"principals": ["*.ops", "CN=ops.example,O=Example"]}}
  ]
})json";

PeerIdentity Dns(const std::string& name) {
  PeerIdentity peer;
  peer.authenticated = true;
  peer.dns_sans = {name};
  peer.subject = "CN=" + name;
  return peer;
}

AuthzPolicy Policy() {
  absl::StatusOr<AuthzPolicy> policy = AuthzPolicy::Parse(kPolicy);
  EXPECT_TRUE(policy.ok()) << policy.status();
  return *policy;
}

struct Case {
  const char* description;
  PeerIdentity peer;
  const char* path;
  bool allowed;
};

TEST(AuthzPolicyTest, DecidesEachCallAsGrpcsEngineDoes) {
  PeerIdentity spiffe;
  spiffe.authenticated = true;
  spiffe.uri_sans = {"spiffe://example.org/payments"};
  PeerIdentity by_subject;
  by_subject.authenticated = true;
  by_subject.subject = "CN=ops.example,O=Example";
  PeerIdentity no_certificate;
  const Case cases[] = {
      {"reporting may read", Dns("reporting"), "/ledger.v1.Ledger/Balance", true},
      {"reporting may read history", Dns("reporting"), "/ledger.v1.Ledger/History", true},
      {"reporting may not deposit", Dns("reporting"), "/ledger.v1.Ledger/Deposit", false},
      {"payments may deposit", Dns("payments"), "/ledger.v1.Ledger/Deposit", true},
      {"a prefix is not a method", Dns("payments"), "/ledger.v1.LedgerX/Deposit", false},
      {"a URI SAN matches a prefix pattern", spiffe, "/ledger.v1.Ledger/Withdraw", true},
      {"an unknown client is refused", Dns("reports"), "/ledger.v1.Ledger/Balance", false},
      {"a rule without a source admits anyone", no_certificate, "/grpc.health.v1.Health/Check",
       true},
      {"a rule with principals needs a certificate", no_certificate, "/ledger.v1.Ledger/Balance",
       false},
      {"a suffix pattern matches a DNS SAN", Dns("db.ops"), "/anything/At", true},
      {"the subject matches when no SAN does", by_subject, "/ledger.v1.Ledger/Deposit", true},
      {"a deny rule wins over an allow rule", Dns("ops.db.ops"), "/ledger.v1.Ledger/Withdraw",
       false},
      {"the deny rule is only for its path", Dns("ops.db.ops"), "/ledger.v1.Ledger/Deposit", true},
  };
  const AuthzPolicy policy = Policy();
  for (const Case& c : cases) {
    const absl::Status status = policy.Check(c.path, c.peer);
    EXPECT_EQ(status.ok(), c.allowed) << c.description << ": " << status;
    if (!c.allowed) {
      EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << c.description;
    }
  }
}

TEST(AuthzPolicyTest, RefusalsSayWhoMayNotCallWhatAndWhichRuleDecided) {
  const AuthzPolicy policy = Policy();
  EXPECT_EQ(policy.Check("/ledger.v1.Ledger/Deposit", Dns("reporting")).message(),
            "authorization policy \"ledger\" does not allow reporting to call "
            "/ledger.v1.Ledger/Deposit (no allow rule matches)");
  EXPECT_EQ(policy.Check("/ledger.v1.Ledger/Withdraw", Dns("ops.db.ops")).message(),
            "authorization policy \"ledger\" denies ops.db.ops the call /ledger.v1.Ledger/Withdraw "
            "(deny rule \"no-one-withdraws-as-ops\")");
  EXPECT_THAT(policy.Check("/ledger.v1.Ledger/Balance", PeerIdentity()).message(),
              HasSubstr("does not allow a client without a certificate to call"));
}

TEST(AuthzPolicyTest, TheExampleInDeployParses) {
  absl::StatusOr<std::string> example =
      ReadConfigFile(testing_util::SourceDir() + "/deploy/authz/policy.example.json");
  ASSERT_TRUE(example.ok()) << example.status();
  absl::StatusOr<AuthzPolicy> policy = AuthzPolicy::Parse(*example);
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_TRUE(policy->Check("/ledger.v1.Ledger/Balance", Dns("reporting")).ok());
  EXPECT_FALSE(policy->Check("/ledger.v1.Ledger/Withdraw", Dns("reporting")).ok());
  EXPECT_TRUE(policy->Check("/ledger.v1.Ledger/Withdraw", Dns("payments")).ok());
  EXPECT_TRUE(policy->Check("/grpc.health.v1.Health/Check", Dns("reporting")).ok());
  EXPECT_TRUE(policy
                  ->Check("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                          Dns("reporting"))
                  .ok());
  EXPECT_FALSE(policy->Check("/grpc.health.v1.Health/Check", PeerIdentity()).ok());
  EXPECT_TRUE(policy->Check("/ledger.v1.LedgerAdmin/Backup", Dns("ops")).ok());
  EXPECT_FALSE(policy->Check("/ledger.v1.LedgerAdmin/Backup", Dns("payments")).ok());
}

// An admin method is the whole ledger: a rule admits it only when it names both the caller and
// the method. "*" in either, or a part left out, admits every other method as gRPC would, but
// never an admin one; a deny rule still refuses.
TEST(AuthzPolicyTest, OnlyARuleThatNamesTheCallerAndTheMethodAdmitsAnAdminMethod) {
  const auto check = [](const std::string& rule, const std::string& path) {
    absl::StatusOr<AuthzPolicy> policy =
        AuthzPolicy::Parse(R"({"name": "p", "allow_rules": [)" + rule + "]}");
    EXPECT_TRUE(policy.ok()) << policy.status();
    return policy->Check(path, Dns("ops"));
  };
  const std::string backup = "/ledger.v1.LedgerAdmin/Backup";
  EXPECT_TRUE(check(R"({"name": "r", "source": {"principals": ["ops"]},
                        "request": {"paths": ["/ledger.v1.LedgerAdmin/Backup"]}})",
                    backup)
                  .ok());
  EXPECT_TRUE(check(R"({"name": "r", "source": {"principals": ["op*"]},
                        "request": {"paths": ["/ledger.v1.LedgerAdmin/*"]}})",
                    backup)
                  .ok());
  struct TooBroad {
    const char* rule;
    bool admits_balance;  // What gRPC's engine makes of it for a ledger method.
  };
  const TooBroad too_broad[] = {
      {R"({"name": "r", "source": {"principals": ["*"]},
           "request": {"paths": ["/ledger.v1.LedgerAdmin/Backup"]}})",
       false},
      {R"({"name": "r", "source": {"principals": ["ops"]}, "request": {"paths": ["*"]}})", true},
      {R"({"name": "r", "source": {"principals": ["ops"]}})", true},
      {R"({"name": "r", "request": {"paths": ["/ledger.v1.LedgerAdmin/Backup"]}})", false},
      {R"({"name": "r"})", true}};
  for (const TooBroad& rule : too_broad) {
    const absl::Status status = check(rule.rule, backup);
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << rule.rule;
    EXPECT_THAT(status.message(), HasSubstr("an admin method needs an allow rule that names both "
                                            "the caller and the method"))
        << rule.rule;
    EXPECT_EQ(check(rule.rule, "/ledger.v1.Ledger/Balance").ok(), rule.admits_balance) << rule.rule;
  }
}

struct BadPolicy {
  const char* json;
  const char* error;
};

TEST(AuthzPolicyTest, RefusesWhatItDoesNotUnderstandAndSaysWhere) {
  const BadPolicy cases[] = {
      {"", "not a JSON object"},
      {"[1]", "not a JSON object"},
      {R"({"allow_rules": []})", "the policy needs \"name\" (a non-empty string)"},
      {R"({"name": "p"})", "the policy has no \"allow_rules\" (a list of rules)"},
      {R"({"name": "p", "allow_rules": {}})", "\"allow_rules\" must be a list of rules"},
      {R"({"name": "p", "allow_rules": [], "extra": 1})",
       "the policy has \"extra\", which ledgerd does not support"},
      {R"({"name": "p", "allow_rules": [{"source": {}}]})",
       "allow_rules[0] needs \"name\" (a non-empty string)"},
      {R"({"name": "p", "allow_rules": [{"name": "r", "request": {"headers": []}}]})",
       "allow_rules[0].request has \"headers\", which ledgerd does not support (allowed: paths)"},
      {R"({"name": "p", "deny_rules": [{"name": "r", "source": {"principals": "a"}}],
           "allow_rules": []})",
       "deny_rules[0].source.principals must be a list of strings"},
      {R"({"name": "p", "allow_rules": [{"name": "r", "request": {"paths": [1]}}]})",
       "allow_rules[0].request.paths[0] must be a string"},
      {R"({"name": "p", "allow_rules": [{"name": "r", "request": {"paths": ["/a/*b"]}}]})",
       "allow_rules[0].request.paths[0] is \"/a/*b\": a pattern is exact, \"*\", \"prefix*\" or "
       "\"*suffix\""},
      {R"({"name": "p", "allow_rules": [{"name": "r", "request": {"paths": ["**"]}}]})",
       "allow_rules[0].request.paths[0] is \"**\""},
  };
  for (const BadPolicy& c : cases) {
    absl::StatusOr<AuthzPolicy> policy = AuthzPolicy::Parse(c.json);
    ASSERT_FALSE(policy.ok()) << c.json;
    EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(policy.status().message(), HasSubstr(c.error)) << c.json;
  }
}

TEST(AuthzPolicyTest, AnEmptyAllowListRefusesEveryCall) {
  absl::StatusOr<AuthzPolicy> policy = AuthzPolicy::Parse(R"({"name": "p", "allow_rules": []})");
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->Check("/grpc.health.v1.Health/Check", Dns("payments")).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(ReadConfigFileTest, ReadsUpToTheBoundAndRefusesOneByteMore) {
  testing_util::ScratchDir dir;
  std::ofstream(dir.Sub("limit")) << std::string(kConfigFileBytesMax, 'x');
  std::ofstream(dir.Sub("limit+1")) << std::string(kConfigFileBytesMax + 1, 'x');
  absl::StatusOr<std::string> at_limit = ReadConfigFile(dir.Sub("limit"));
  ASSERT_TRUE(at_limit.ok()) << at_limit.status();
  EXPECT_EQ(at_limit->size(), kConfigFileBytesMax);
  EXPECT_EQ(ReadConfigFile(dir.Sub("limit+1")).status().message(),
            dir.Sub("limit+1") + " is larger than 1048576 bytes");
}

TEST(ReadConfigFileTest, SaysWhyAFileCannotBeRead) {
  testing_util::ScratchDir dir;
  EXPECT_EQ(ReadConfigFile(dir.Sub("missing")).status().message(),
            "cannot read " + dir.Sub("missing") + ": No such file or directory");
  EXPECT_EQ(ReadConfigFile(dir.path()).status().message(),
            "cannot read " + dir.path() + ": Is a directory");
}

}  // namespace
}  // namespace ledger
