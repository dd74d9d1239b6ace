// Three replicas whose gRPC ports take mutual TLS only, with an authorization policy: a replica
// reaches the others as their clients do (server/peer_credentials.h). A follower behind the
// leader's snapshot fetches the leader's state over TLS, presenting its own certificate; a
// policy that does not admit that certificate to the backup leaves it behind, saying what to
// add; and a replica of another ledger is refused before it joins, the members asked over TLS.
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/e2e/ledgerd_cluster.h"
#include "tests/test_pki.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing_util::LedgerdCluster;
using testing_util::TestPki;
using testing_util::WaitUntil;

// The policy's rule for the replicas, by which they fetch each other's state and ask each
// other's ledger id; the tests' client "tester" may call the ledger and check health.
constexpr char kReplicasRule[] = R"({
      "name": "replicas-fetch-state-and-check-the-ledger-id",
      "source": {"principals": ["replica"]},
      "request": {"paths": ["/ledger.v1.LedgerAdmin/Backup", "/ledger.v1.LedgerCluster/Status"]}
    },)";

// Certificates made before the cluster: one CA; the three replicas serve the certificate
// "replica" (CN and DNS name replica, IP 127.0.0.1, where they listen) and present it to each
// other; the test is the client "tester".
class ClusterPki {
 protected:
  explicit ClusterPki(bool replicas_may_fetch) {
    pki_.MakeCa("ca");
    pki_.MakeCert("replica", "ca", "replica", "DNS:replica,IP:127.0.0.1");
    pki_.MakeClientCert("tester", "ca");
    std::ofstream(pki_.Path("policy.json")) << R"({"name": "cluster", "allow_rules": [)"
                                            << (replicas_may_fetch ? kReplicasRule : "") << R"(
    {"name": "tester", "source": {"principals": ["tester"]},
     "request": {"paths": ["/ledger.v1.Ledger/*", "/grpc.health.v1.Health/*"]}}]})";
  }

  std::vector<std::string> TlsFlags() const {
    return {"--tls_cert_file=" + pki_.Cert("replica"), "--tls_key_file=" + pki_.Key("replica"),
            "--tls_client_ca_file=" + pki_.Cert("ca"),
            "--authz_policy_file=" + pki_.Path("policy.json")};
  }

  std::shared_ptr<grpc::ChannelCredentials> TesterCredentials() const {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = TestPki::Read(pki_.Cert("ca"));
    ssl.pem_cert_chain = TestPki::Read(pki_.Cert("tester"));
    ssl.pem_private_key = TestPki::Read(pki_.Key("tester"));
    return grpc::SslCredentials(ssl);
  }

  TestPki pki_;
};

std::vector<std::string> With(std::vector<std::string> flags, const std::string& flag) {
  flags.push_back(flag);
  return flags;
}

// Snapshots every 16 entries (libraft keeps 128 behind one), so that a replica stopped for 200
// deposits is behind the leader's log and must fetch its state.
class ClusterTlsTest : public ::testing::Test, protected ClusterPki, protected LedgerdCluster {
 protected:
  explicit ClusterTlsTest(bool replicas_may_fetch = true)
      : ClusterPki(replicas_may_fetch),
        LedgerdCluster({.flags = With(TlsFlags(), "--raft_snapshot_entries=16"),
                        .credentials = TesterCredentials()}) {}

  // Stops a follower, commits 200 deposits without it, and starts it again: it is behind the
  // leader's snapshot. Returns it.
  int FollowerBehindTheSnapshot() {
    EXPECT_EQ(DepositOnLeader("tess", 1, "t-0"), 1);
    const int leader = WaitForServing();
    const int behind = (leader + 1) % 3;
    EXPECT_EQ(node(behind).Stop(), 0) << node(behind).log();
    for (int n = 1; n <= 200; ++n) DepositOnLeader("tess", 1, absl::StrCat("t-", n));
    EXPECT_TRUE(node(behind).Restart());
    return behind;
  }
};

TEST_F(ClusterTlsTest, AFollowerBehindTheSnapshotFetchesTheLeadersStateOverMutualTls) {
  ASSERT_NO_FATAL_FAILURE(StartAll());
  const int behind = FollowerBehindTheSnapshot();
  ASSERT_TRUE(node(behind).WaitForLog("the leader's state is now")) << node(behind).log();
  EXPECT_THAT(node(behind).log(), Not(HasSubstr("could not fetch")));
  // Started again on it, it follows: it holds the leader's newest entry.
  EXPECT_EQ(DepositOnLeader("tess", 1, "t-after"), 202);
  const int leader = WaitForServing();
  ASSERT_GE(leader, 0);
  EXPECT_TRUE(WaitUntil(
      [&] {
        const std::optional<double> theirs = LogPosition(leader);
        return theirs.has_value() && LogPosition(behind) == theirs;
      },
      "the replica that was behind holds the newest entry"));
}

class ClusterTlsPolicyWithoutReplicasTest : public ClusterTlsTest {
 protected:
  ClusterTlsPolicyWithoutReplicasTest() : ClusterTlsTest(/*replicas_may_fetch=*/false) {}
};

// The members' policy does not admit the replicas' certificate to the backup: the replica
// behind cannot catch up, and its log says why and what to add; the other two go on.
TEST_F(ClusterTlsPolicyWithoutReplicasTest, AFollowerRefusedTheBackupSaysWhatThePolicyLacks) {
  ASSERT_NO_FATAL_FAILURE(StartAll());
  const int behind = FollowerBehindTheSnapshot();
  ASSERT_TRUE(node(behind).WaitForLog("could not fetch")) << node(behind).log();
  EXPECT_THAT(node(behind).log(), HasSubstr("PERMISSION_DENIED"));
  EXPECT_THAT(node(behind).log(),
              HasSubstr("--authz_policy_file must allow this replica's certificate "
                        "/ledger.v1.LedgerAdmin/Backup"));
  EXPECT_THAT(node(behind).log(), Not(HasSubstr("the leader's state is now")));
  EXPECT_EQ(DepositOnLeader("tess", 1, "t-after"), 202);
}

// As ClusterTest.AReplicaOfAnotherLedgerIsRefusedBeforeItJoins, with members that answer over
// mutual TLS only: the replica asks them with its own certificate.
TEST_F(ClusterTlsTest, AReplicaOfAnotherLedgerIsRefusedBeforeItJoins) {
  ASSERT_NO_FATAL_FAILURE(StartAll());
  EXPECT_EQ(DepositOnLeader("tess", 3, "o-1"), 3);
  const int leader = WaitForServing();
  ASSERT_GE(leader, 0);
  const int other = (leader + 1) % 3;
  ASSERT_NO_FATAL_FAILURE(MakeAnotherLedgersReplica(other));

  EXPECT_FALSE(node(other).Restart());
  EXPECT_NE(node(other).WaitForExit(), std::optional<int>(0));
  EXPECT_THAT(node(other).log(), HasSubstr("is not a replica of this cluster"));
  EXPECT_EQ(DepositOnLeader("tess", 4, "o-2"), 7);
}

}  // namespace
}  // namespace ledger
