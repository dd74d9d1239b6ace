// Test harness: `ReplicaNetwork`, three hosts for a cluster's replicas on one machine, and the
// faults a network makes between them: a replica cut off from another (both ways), and the cut
// healed.
//
//   int main(...) { EnterOwnNetworkNamespace(); ... }  // first, before any thread
//   ReplicaNetwork network;                            // ledger<PID>-r1..3 at 10.77.0.1..3
//   ASSERT_TRUE(network.ok()) << network.error();
//   LedgerdCluster cluster(flags, network.hosts());
//   network.CutOff(leader);                            // from both other replicas
//   network.Heal();
//
// Each replica runs in a network namespace of its own; a bridge in this process's namespace joins
// them, with 10.77.0.100 for this process, so that the test and the clients it starts
// (ledger-loadtest) reach every replica, as clients on their own machines would. This process
// must first move to a network namespace of its own (EnterOwnNetworkNamespace, as root), so that
// no interface, address or rule is added to the machine's, and two tests never share one.
//
// A cut drops every packet between two replicas, silently and in both directions (iptables DROP
// in both namespaces), as a partition does: no reset, no refused connection, only silence. The
// test's own connections to each replica stay up, so a cut-off leader is still asked, and must
// refuse. This kernel has no netem; delay goes through bench/replication's relay
// (ClusterOptions::raft_delay_us in tests/e2e/ledgerd_cluster.h).
//
// A short cut loses nothing a replica sent: TCP sends it again once the cut heals (a follower cut
// off for a few seconds gets every entry late, not a snapshot). A connection is given up only when
// its data goes unacknowledged long enough: 15 minutes with Linux's default, about 3 s here
// (tcp_retries2=3 in the replicas' namespaces, kConnectionsGiveUpAfter), so that a test can cut
// a replica off for longer than its connections last without waiting a quarter of an hour.
#ifndef LEDGER_TESTS_E2E_REPLICA_NETWORK_H_
#define LEDGER_TESTS_E2E_REPLICA_NETWORK_H_

#include <sched.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/e2e/ledgerd_cluster.h"

namespace ledger::testing_util {

// Moves this process to a new, empty network namespace with its loopback up. Call it first in
// main, while the process has one thread: a namespace is a thread's, and the threads created
// later inherit it. False (and `error` says why) when not root.
inline bool EnterOwnNetworkNamespace(std::string* error) {
  if (unshare(CLONE_NEWNET) != 0) {
    *error = absl::StrCat("unshare(CLONE_NEWNET): ", std::strerror(errno),
                          " (the network tests need root)");
    return false;
  }
  if (std::system("/bin/ip link set lo up") != 0) {
    *error = "cannot bring up loopback in the new network namespace";
    return false;
  }
  return true;
}

// Why this process has no network namespace of its own ("" when it has): set by the main() of
// the tests that use ReplicaNetwork (tests/e2e/own_network_main.cc), which skip without one.
std::string& OwnNetworkError();

class ReplicaNetwork {
 public:
  // How long a replica's connection lasts with its data unacknowledged (tcp_retries2=3: the
  // retransmissions at 0.2, 0.4, 0.8 and 1.6 s), with a margin.
  static constexpr std::chrono::seconds kConnectionsGiveUpAfter{5};

  ReplicaNetwork() {
    // Never on the machine's own network.
    if (!OwnNetworkError().empty()) {
      error_ = OwnNetworkError();
      return;
    }
    Run("/bin/ip link add br0 type bridge && /bin/ip link set br0 up && "
        "/bin/ip addr add 10.77.0.100/24 dev br0");
    for (int i = 0; i < 3; ++i) {
      hosts_.address[i] = absl::StrCat("10.77.0.", i + 1);
      hosts_.netns[i] = absl::StrCat("ledger", getpid(), "-r", i + 1);
      const std::string& ns = hosts_.netns[i];
      // The veth's host end joins the bridge here; the other end becomes the replica's eth0.
      Run(absl::StrCat("/bin/ip netns add ", ns, " && /bin/ip link add r", i + 1,
                       " type veth peer name eth0 netns ", ns, " && /bin/ip link set r", i + 1,
                       " master br0 up && /bin/ip -n ", ns, " addr add ", hosts_.address[i],
                       "/24 dev eth0 && /bin/ip -n ", ns, " link set eth0 up && /bin/ip -n ", ns,
                       " link set lo up && /bin/ip netns exec ", ns,
                       " sh -c 'echo 3 > /proc/sys/net/ipv4/tcp_retries2'"));
    }
  }
  // Removes the veths, the namespaces and the bridge, so that the next test in this process makes
  // them anew. (A namespace's own links go only once the kernel has freed it, later: the veths
  // are deleted here first.)
  ~ReplicaNetwork() {
    if (!OwnNetworkError().empty()) return;
    for (int i = 0; i < 3; ++i) {
      if (hosts_.netns[i].empty()) continue;
      Run(absl::StrCat("/bin/ip link del r", i + 1));
      Run("/bin/ip netns del " + hosts_.netns[i]);
    }
    Run("/bin/ip link del br0");
  }
  ReplicaNetwork(const ReplicaNetwork&) = delete;
  ReplicaNetwork& operator=(const ReplicaNetwork&) = delete;

  // Whether every command so far worked; `error` names the first that did not, with its output.
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const ReplicaHosts& hosts() const { return hosts_; }

  // Drops every packet between replicas i and j (0-based), both ways.
  void Cut(int i, int j) {
    Drop(i, j);
    Drop(j, i);
  }
  // Replica i cut off from both others, which still reach each other.
  void CutOff(int i) {
    for (int j = 0; j < 3; ++j) {
      if (j != i) Cut(i, j);
    }
  }
  // Every cut mended.
  void Heal() {
    for (const std::string& ns : hosts_.netns) {
      Run(absl::StrCat("/bin/ip netns exec ", ns, " iptables -w -F INPUT && /bin/ip netns exec ",
                       ns, " iptables -w -F OUTPUT"));
    }
  }

 private:
  // In replica i's namespace, whatever comes from or goes to replica j is dropped.
  void Drop(int i, int j) {
    const std::string in = absl::StrCat("/bin/ip netns exec ", hosts_.netns[i], " iptables -w ");
    Run(absl::StrCat(in, "-A INPUT -s ", hosts_.address[j], " -j DROP && ", in, "-A OUTPUT -d ",
                     hosts_.address[j], " -j DROP"));
  }

  // Runs `command` with sh; a failure is kept in error_ with what it printed.
  void Run(const std::string& command) {
    FILE* pipe = popen(("(" + command + ") 2>&1").c_str(), "r");
    if (pipe == nullptr) {
      if (error_.empty()) error_ = absl::StrCat("cannot run ", command, ": ", std::strerror(errno));
      return;
    }
    std::string output;
    std::array<char, 512> buffer{};
    while (fgets(buffer.data(), buffer.size(), pipe) != nullptr) output += buffer.data();
    const int status = pclose(pipe);
    if ((!WIFEXITED(status) || WEXITSTATUS(status) != 0) && error_.empty()) {
      error_ = absl::StrCat(command, " failed: ", output);
    }
  }

  ReplicaHosts hosts_;
  std::string error_;
};

// For a fixture that is a LedgerdCluster on a ReplicaNetwork: listed before LedgerdCluster among
// its bases, the network is made before the cluster and removed after it.
//
//   class MyTest : public ::testing::Test, protected OnReplicaNetwork, protected LedgerdCluster {
//     MyTest() : LedgerdCluster({.flags = flags, .hosts = network.hosts()}) {}
//     void SetUp() override { ASSERT_NO_FATAL_FAILURE(NeedReplicaNetwork()); }
struct OnReplicaNetwork {
  // Skips the test without a network namespace of its own (not root); fails when the network
  // could not be made.
  void NeedReplicaNetwork() const {
    if (!OwnNetworkError().empty()) GTEST_SKIP() << OwnNetworkError();
    ASSERT_TRUE(network.ok()) << network.error();
  }
  ReplicaNetwork network;
};

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_E2E_REPLICA_NETWORK_H_
