// ledgerd's gRPC port over TLS and mutual TLS, with an authorization policy, in-process over real
// gRPC on loopback. Certificates are made at test time (tests/test_pki.h); the clients use the
// same channel function as ledgerctl and ledger-loadtest.
#include "server/transport_security.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/channel_credentials.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/authz_policy.h"
#include "tests/server/test_server.h"
#include "tests/test_pki.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;
using testing_util::ContextWithDeadline;
using testing_util::TestPki;
using testing_util::TestServer;

// Reporting reads, payments reads and writes, both may check health and use reflection.
constexpr char kServerPolicy[] = R"json({
  "name": "ledger",
  "allow_rules": [
    {"name": "health-and-reflection", "source": {"principals": ["*"]},
     "request": {"paths": ["/grpc.health.v1.Health/*", "/grpc.reflection.*"]}},
    {"name": "reporting-reads", "source": {"principals": ["reporting"]},
     "request": {"paths": ["/ledger.v1.Ledger/Balance", "/ledger.v1.Ledger/History"]}},
    {"name": "payments", "source": {"principals": ["payments"]},
     "request": {"paths": ["/ledger.v1.Ledger/*"]}}
  ]
})json";

// How long a test waits for a changed file to be picked up: many refresh intervals of 1 s.
constexpr auto kReloadWaitMax = std::chrono::seconds(15);

class TransportSecurityTest : public testing::Test {
 protected:
  void SetUp() override {
    pki_.MakeCa("ca");
    pki_.MakeServerCert("server", "ca", /*serial=*/1001);
    pki_.MakeClientCert("reporting", "ca");
    pki_.MakeClientCert("payments", "ca");
    pki_.MakeCa("other-ca");
    pki_.MakeClientCert("stranger", "other-ca");
  }

  TransportSecurityOptions Tls() const {
    TransportSecurityOptions tls;
    tls.cert_file = pki_.Cert("server");
    tls.key_file = pki_.Key("server");
    tls.refresh_interval = absl::Seconds(1);
    return tls;
  }
  TransportSecurityOptions MutualTls() const {
    TransportSecurityOptions tls = Tls();
    tls.client_ca_file = pki_.Cert("ca");
    return tls;
  }
  TransportSecurityOptions WithPolicy(const std::string& json) {
    std::ofstream(pki_.Path("policy.json")) << json;
    TransportSecurityOptions tls = MutualTls();
    tls.authz_policy_file = pki_.Path("policy.json");
    return tls;
  }

  void StartServer(const TransportSecurityOptions& tls) {
    ServerOptions options = testing_util::LoopbackOptions();
    options.transport_security = tls;
    server_ = std::make_unique<TestServer>(options);
  }

  // A new connection (never shared with an earlier channel) trusting `ca`, presenting the
  // client certificate `client` when it is not empty.
  std::shared_ptr<grpc::Channel> Channel(const std::string& ca, const std::string& client = "") {
    ClientTlsOptions tls;
    tls.ca_file = pki_.Cert(ca);
    if (!client.empty()) {
      tls.cert_file = pki_.Cert(client);
      tls.key_file = pki_.Key(client);
    }
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        NewChannelCredentials(tls);
    EXPECT_TRUE(credentials.ok()) << credentials.status();
    grpc::ChannelArguments arguments;
    arguments.SetInt("ledger.test.channel_id", next_channel_id_++);
    return NewLedgerChannel(server_->target(), tls, *credentials, arguments);
  }
  std::unique_ptr<v1::Ledger::Stub> Stub(const std::string& ca, const std::string& client = "") {
    return v1::Ledger::NewStub(Channel(ca, client));
  }

  // The certificate the server presented on a call over `channel` (empty if the call failed).
  static std::string ServedCertificate(const std::shared_ptr<grpc::Channel>& channel) {
    auto stub = grpc::health::v1::Health::NewStub(channel);
    auto context = ContextWithDeadline(std::chrono::seconds(2));
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    if (!stub->Check(context.get(), request, &response).ok()) return "";
    std::vector<grpc::string_ref> pem =
        context->auth_context()->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME);
    return pem.empty() ? "" : std::string(pem.front().data(), pem.front().size());
  }

  TestPki pki_;
  std::unique_ptr<TestServer> server_;
  int next_channel_id_ = 0;
};

TEST_F(TransportSecurityTest, TlsServesAClientThatTrustsItsCa) {
  StartServer(Tls());
  auto stub = Stub("ca");
  EXPECT_EQ(testing_util::Deposit(*stub, "alice", 250).balance, 250);
  const testing_util::CallResult balance = testing_util::Balance(*stub, "alice");
  EXPECT_TRUE(balance.status.ok()) << balance.status.error_message();
  EXPECT_EQ(balance.balance, 250);
  EXPECT_EQ(ServedCertificate(Channel("ca")), TestPki::Read(pki_.Cert("server")));
}

TEST_F(TransportSecurityTest, TlsIsRefusedByAClientThatTrustsAnotherCa) {
  StartServer(Tls());
  auto stub = Stub("other-ca");
  EXPECT_EQ(testing_util::Deposit(*stub, "alice", 250).status.error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(testing_util::Balance(*Stub("ca"), "alice").status.error_code(),
            grpc::StatusCode::NOT_FOUND);  // Nothing was applied.
}

TEST_F(TransportSecurityTest, TlsRefusesAPlaintextClient) {
  StartServer(Tls());
  auto stub = server_->NewStub();  // Insecure credentials.
  EXPECT_EQ(testing_util::Balance(*stub, "alice").status.error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TransportSecurityTest, MutualTlsRefusesAClientWithoutACertificate) {
  StartServer(MutualTls());
  EXPECT_EQ(testing_util::Deposit(*Stub("ca"), "alice", 1).status.error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(testing_util::Deposit(*Stub("ca", "reporting"), "alice", 7).balance, 7);
}

TEST_F(TransportSecurityTest, MutualTlsRefusesACertificateFromAnotherCa) {
  StartServer(MutualTls());
  EXPECT_EQ(testing_util::Deposit(*Stub("ca", "stranger"), "alice", 1).status.error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TransportSecurityTest, PolicyLetsReportingReadButNotWrite) {
  StartServer(WithPolicy(kServerPolicy));
  auto payments = Stub("ca", "payments");
  auto reporting = Stub("ca", "reporting");
  EXPECT_EQ(testing_util::Deposit(*payments, "alice", 300).balance, 300);
  EXPECT_EQ(testing_util::Withdraw(*payments, "alice", 100).balance, 200);

  const testing_util::CallResult balance = testing_util::Balance(*reporting, "alice");
  EXPECT_TRUE(balance.status.ok()) << balance.status.error_message();
  EXPECT_EQ(balance.balance, 200);
  // Allowed, so it reached the service, which keeps no history in memory-only mode.
  EXPECT_EQ(testing_util::History(*reporting, "alice").status.error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);

  const testing_util::CallResult deposit = testing_util::Deposit(*reporting, "alice", 5);
  EXPECT_EQ(deposit.status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(deposit.status.error_message(),
            "authorization policy \"ledger\" does not allow reporting to call "
            "/ledger.v1.Ledger/Deposit (no allow rule matches)");
  // gRPC's authorization hook (AuthMetadataProcessor) passes on a code and a message only: this
  // refusal has no reason in its details, and PERMISSION_DENIED alone says nothing was applied
  // (docs/api.md, "Statuses without a reason").
  EXPECT_EQ(deposit.status.error_details(), "");
  EXPECT_EQ(testing_util::Withdraw(*reporting, "alice", 5).status.error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(testing_util::Balance(*payments, "alice").balance, 200);  // Nothing applied.

  // Refused before the service, and still counted where operators look for refusals.
  const LedgerMetrics& metrics = server_->server().metrics();
  constexpr int kDenied = static_cast<int>(grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(metrics.requests(RpcMethod::kDeposit, kDenied), 1);
  EXPECT_EQ(metrics.requests(RpcMethod::kWithdraw, kDenied), 1);
  EXPECT_EQ(metrics.requests(RpcMethod::kDeposit, 0), 1);
  EXPECT_EQ(metrics.requests(RpcMethod::kBalance, kDenied), 0);
}

TEST_F(TransportSecurityTest, PolicyKeepsHealthAndReflectionForAllowedClients) {
  StartServer(WithPolicy(kServerPolicy));
  auto health = grpc::health::v1::Health::NewStub(Channel("ca", "reporting"));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("ledger.v1.Ledger");
  grpc::health::v1::HealthCheckResponse response;
  ASSERT_TRUE(health->Check(ContextWithDeadline().get(), request, &response).ok());
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);

  auto reflection =
      grpc::reflection::v1alpha::ServerReflection::NewStub(Channel("ca", "reporting"));
  auto context = ContextWithDeadline();
  auto stream = reflection->ServerReflectionInfo(context.get());
  grpc::reflection::v1alpha::ServerReflectionRequest list;
  list.set_list_services("");
  ASSERT_TRUE(stream->Write(list));
  grpc::reflection::v1alpha::ServerReflectionResponse listed;
  ASSERT_TRUE(stream->Read(&listed));
  EXPECT_GE(listed.list_services_response().service_size(), 3);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(TransportSecurityTest, PolicyChangedOnDiskTakesEffectWithoutARestart) {
  StartServer(WithPolicy(kServerPolicy));
  auto reporting = Stub("ca", "reporting");
  ASSERT_EQ(testing_util::Deposit(*reporting, "bob", 5).status.error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  std::string everyone_writes = kServerPolicy;
  everyone_writes.replace(everyone_writes.find("[\"payments\"]"), 12,
                          "[\"payments\", \"reporting\"]");
  std::ofstream(pki_.Path("policy.json.new")) << everyone_writes;
  std::filesystem::rename(pki_.Path("policy.json.new"), pki_.Path("policy.json"));

  const auto deadline = std::chrono::steady_clock::now() + kReloadWaitMax;
  testing_util::CallResult deposit;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    deposit = testing_util::Deposit(*reporting, "bob", 5);
  } while (!deposit.status.ok() && std::chrono::steady_clock::now() < deadline);
  EXPECT_TRUE(deposit.status.ok()) << deposit.status.error_message();
  EXPECT_EQ(deposit.balance, 5);  // Only the call after the reload was applied.
  EXPECT_EQ(server_->server().transport_security().policy_watcher()->reloads(), 1);
}

TEST_F(TransportSecurityTest, PolicyThatStopsParsingKeepsThePreviousOne) {
  StartServer(WithPolicy(kServerPolicy));
  const AuthzPolicyWatcher& watcher = *server_->server().transport_security().policy_watcher();
  std::ofstream(pki_.Path("policy.json")) << "{\"name\": \"broken\", \"allow_rules\": [";
  const auto deadline = std::chrono::steady_clock::now() + kReloadWaitMax;
  while (watcher.refusals() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(watcher.refusals(), 1);
  EXPECT_EQ(watcher.reloads(), 0);
  EXPECT_EQ(watcher.current()->name(), "ledger");
  EXPECT_EQ(testing_util::Deposit(*Stub("ca", "payments"), "carol", 9).balance, 9);
  EXPECT_EQ(testing_util::Deposit(*Stub("ca", "reporting"), "carol", 9).status.error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(TransportSecurityTest, RotatedCertificateIsServedWithoutARestart) {
  StartServer(Tls());
  ASSERT_EQ(ServedCertificate(Channel("ca")), TestPki::Read(pki_.Cert("server")));
  pki_.MakeCa("next-ca");
  pki_.MakeServerCert("next-server", "next-ca", /*serial=*/2002);
  const std::string next = TestPki::Read(pki_.Cert("next-server"));
  ASSERT_FALSE(next.empty());
  // A client that trusts only the new CA cannot connect until the new certificate is served.
  EXPECT_EQ(ServedCertificate(Channel("next-ca")), "");
  pki_.Install("next-server", "server");

  const auto deadline = std::chrono::steady_clock::now() + kReloadWaitMax;
  std::string served;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    served = ServedCertificate(Channel("next-ca"));
  } while (served != next && std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(served, next);
  EXPECT_EQ(ServedCertificate(Channel("ca")), "");  // The old CA no longer verifies it.
}

TEST_F(TransportSecurityTest, RotatedClientCaIsTrustedWithoutARestart) {
  StartServer(MutualTls());
  ASSERT_EQ(testing_util::Deposit(*Stub("ca", "stranger"), "dave", 1).status.error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // The operator adds other-ca to the bundle of client CAs.
  std::ofstream(pki_.Path("bundle.pem"))
      << TestPki::Read(pki_.Cert("ca")) << TestPki::Read(pki_.Cert("other-ca"));
  std::filesystem::rename(pki_.Path("bundle.pem"), pki_.Cert("ca"));

  const auto deadline = std::chrono::steady_clock::now() + kReloadWaitMax;
  testing_util::CallResult deposit;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    deposit = testing_util::Deposit(*Stub("ca", "stranger"), "dave", 1);
  } while (!deposit.status.ok() && std::chrono::steady_clock::now() < deadline);
  EXPECT_TRUE(deposit.status.ok()) << deposit.status.error_message();
  EXPECT_EQ(deposit.balance, 1);
}

struct BadOptions {
  const char* description;
  TransportSecurityOptions options;
  const char* error;
};

TEST_F(TransportSecurityTest, StartRefusesOptionsThatCannotWorkAndSaysWhy) {
  std::ofstream(pki_.Path("bad-policy.json")) << "{\"name\": \"p\"}";
  std::ofstream(pki_.Path("not-pem.pem")) << "hello";
  auto with = [&](auto change) {
    TransportSecurityOptions options = MutualTls();
    change(options);
    return options;
  };
  const BadOptions cases[] = {
      {"key without cert", with([](auto& o) { o.cert_file.clear(); }),
       "--tls_key_file needs --tls_cert_file"},
      {"cert without key", with([](auto& o) { o.key_file.clear(); }),
       "--tls_cert_file needs --tls_key_file"},
      {"client CA without cert", TransportSecurityOptions{"", "", pki_.Cert("ca"), "", {}, ""},
       "--tls_client_ca_file (mutual TLS) needs --tls_cert_file and --tls_key_file"},
      {"policy without mutual TLS", with([&](auto& o) {
         o.client_ca_file.clear();
         o.authz_policy_file = pki_.Path("bad-policy.json");
       }),
       "--authz_policy_file needs mutual TLS (--tls_client_ca_file)"},
      {"missing cert", with([&](auto& o) { o.cert_file = pki_.Path("nope.pem"); }),
       "--tls_cert_file: cannot read "},
      {"a key given as the certificate", with([&](auto& o) { o.cert_file = pki_.Key("server"); }),
       "holds no PEM CERTIFICATE"},
      {"not PEM", with([&](auto& o) { o.client_ca_file = pki_.Path("not-pem.pem"); }),
       "--tls_client_ca_file: "},
      {"unparsable policy",
       with([&](auto& o) { o.authz_policy_file = pki_.Path("bad-policy.json"); }),
       "--authz_policy_file: authorization policy "},
      {"missing policy", with([&](auto& o) { o.authz_policy_file = pki_.Path("nope.json"); }),
       "No such file or directory"},
      {"peer CA without TLS", TransportSecurityOptions{"", "", "", "", {}, pki_.Cert("ca")},
       "--peer_tls_ca_file needs --tls_cert_file and --tls_key_file: a replica reaches the "
       "other members over TLS only when it serves TLS itself"},
      {"peer CA not PEM", with([&](auto& o) { o.peer_ca_file = pki_.Path("not-pem.pem"); }),
       "--peer_tls_ca_file: "},
      {"refresh too short", with([](auto& o) { o.refresh_interval = absl::Milliseconds(10); }),
       "--tls_refresh_interval must be 1s to 24h; got 10ms"},
  };
  for (const BadOptions& c : cases) {
    absl::StatusOr<std::unique_ptr<ServerTransportSecurity>> security =
        ServerTransportSecurity::Create(c.options);
    ASSERT_FALSE(security.ok()) << c.description;
    EXPECT_EQ(security.status().code(), absl::StatusCode::kInvalidArgument) << c.description;
    EXPECT_THAT(security.status().message(), HasSubstr(c.error)) << c.description;
  }
  // And LedgerServer::Start passes the refusal on.
  ServerOptions options = testing_util::LoopbackOptions();
  options.transport_security = cases[4].options;
  EXPECT_THAT(LedgerServer::Start(options).status().message(),
              HasSubstr("--tls_cert_file: cannot read " + pki_.Path("nope.pem") +
                        ": No such file or directory"));
}

TEST_F(TransportSecurityTest, DescriptionSaysWhatIsOn) {
  auto describe = [](const TransportSecurityOptions& options) {
    absl::StatusOr<std::unique_ptr<ServerTransportSecurity>> security =
        ServerTransportSecurity::Create(options);
    return security.ok() ? (*security)->description() : std::string(security.status().message());
  };
  EXPECT_EQ(describe({}), "plaintext (no TLS)");
  EXPECT_EQ(describe(Tls()), "TLS, no authorization policy (files re-read every 1s)");
  EXPECT_EQ(describe(MutualTls()), "mutual TLS, no authorization policy (files re-read every 1s)");
  EXPECT_EQ(describe(WithPolicy(kServerPolicy)),
            "mutual TLS, authorization policy \"ledger\" (files re-read every 1s)");
}

}  // namespace
}  // namespace ledger
