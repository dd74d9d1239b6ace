// Test harness: `LedgerdProcess`, the one way the process tests start the ledgerd binary, learn
// its ports, wait until it serves, and stop, kill or restart it.
//
//   LedgerdProcess ledgerd({"--shards=2"});  // A fresh ledger, ports picked by the kernel.
//   ASSERT_TRUE(ledgerd.Start());             // Listed in its --ports_file, and SERVING.
//   auto stub = v1::Ledger::NewStub(grpc::CreateChannel(ledgerd.target(), ...));
//   EXPECT_EQ(ledgerd.Stop(), 0) << ledgerd.log();
//
// Start learns the ports from the JSON file ledgerd writes with --ports_file (never from the
// start-up line, which is prose for people), then polls grpc.health.v1.Health/Check until it
// answers SERVING, within a bounded deadline; a failure carries the server's log. Stop and the
// destructor stop the process by its PID: SIGTERM, a bounded wait, then SIGKILL. Several may run
// at once: each has its own scratch directory (ports file, logs, and its data directory unless
// the flags name one).
#ifndef LEDGER_TESTS_E2E_LEDGERD_PROCESS_H_
#define LEDGER_TESTS_E2E_LEDGERD_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/scratch_dir.h"
#include "tests/wait_until.h"

namespace ledger::testing_util {

// Not thread-safe: one test thread starts, signals and stops it (log() may be read by any).
class LedgerdProcess {
 public:
  struct Options {
    // What the health check dials with; plaintext when null. Mutual TLS needs a client
    // certificate that the server's authorization policy lets call grpc.health.v1.Health.
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    // With TLS: the name the server's certificate is checked against, when it is not the
    // target's host (grpc.ssl_target_name_override).
    std::string tls_server_name;
    // How long Start waits for the ports file and then for SERVING.
    std::chrono::milliseconds start_timeout = kEventTimeout;
    // The named network namespace ledgerd runs in (`ip netns exec`, which keeps the PID); the
    // caller's when empty. Its --listen and --metrics_listen must then name an address that
    // this process reaches.
    std::string netns;
    // NAME=VALUE variables ledgerd gets besides (or instead of) this process's.
    std::vector<std::string> environment;
    // The id `ledgerd init` gives the new ledger it makes (a random one when empty): a
    // cluster's replicas share one.
    std::string ledger_id;
  };

  // ledgerd with `flags`, and these unless `flags` set them: --listen=127.0.0.1:0,
  // --metrics_listen=127.0.0.1:0, and (unless --durability=none) --data_dir naming a new ledger
  // made by `ledgerd init` in the scratch directory. --ports_file is always the harness's.
  explicit LedgerdProcess(std::vector<std::string> flags);
  LedgerdProcess(std::vector<std::string> flags, Options options);
  // Stops a ledgerd still running (Stop), then removes the scratch directory.
  ~LedgerdProcess();
  LedgerdProcess(const LedgerdProcess&) = delete;
  LedgerdProcess& operator=(const LedgerdProcess&) = delete;

  // Starts ledgerd and waits until it serves; a failure says why and holds its log. Also after
  // an exit: the same flags and data directory, with a new log.
  ::testing::AssertionResult Start();
  // Start again after an exit (a Stop, a Kill or a crash) on the same data directory and the
  // same gRPC port, so that a client's target stays valid; a port not yet free is retried.
  ::testing::AssertionResult Restart();

  // SIGTERM (and SIGCONT, for a stopped process), then at most `timeout` for the exit, then
  // SIGKILL. Returns the exit code; nullopt when it had to be killed or died by a signal.
  std::optional<int> Stop(std::chrono::milliseconds timeout = kEventTimeout);
  // SIGKILL, as a crash, and waits for the exit.
  void Kill();
  void Signal(int signal_number) const;
  // Waits at most `timeout` for the exit; its exit code, or nullopt while it runs or when it died
  // by a signal.
  std::optional<int> WaitForExit(std::chrono::milliseconds timeout = kEventTimeout);
  bool running() const { return pid_ > 0 && !exit_status_.has_value(); }

  // What this run of ledgerd wrote to stdout and stderr so far, in order.
  std::string log() const;
  // True once `needle` is in log(), false when `timeout` passed without it.
  bool WaitForLog(const std::string& needle,
                  std::chrono::milliseconds timeout = kEventTimeout) const;

  pid_t pid() const { return pid_; }
  // From the ports file of the last Start: the bound ports (metrics 0 when none), and
  // "HOST:PORT" a client on this machine dials for gRPC (a wildcard host becomes loopback).
  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }
  // The host /metrics is bound to ("127.0.0.1" for a wildcard).
  const std::string& metrics_host() const { return metrics_host_; }
  std::string target() const;
  // The data directory (empty with --durability=none) and the ports file.
  const std::string& data_dir() const { return data_dir_; }
  std::string ports_file() const { return scratch_.Sub("ports.json"); }
  // What the ports file holds now ("" when there is none).
  std::string ReadPortsFile() const;

 private:
  ::testing::AssertionResult Spawn(const std::vector<std::string>& extra_flags);
  ::testing::AssertionResult WaitForPortsFile(std::chrono::steady_clock::time_point deadline);
  ::testing::AssertionResult WaitForServing(std::chrono::steady_clock::time_point deadline);
  ::testing::AssertionResult Failure(const std::string& why) const;
  std::string LogPath() const {
    return scratch_.Sub("ledgerd-" + std::to_string(starts_) + ".log");
  }

  ScratchDir scratch_;
  std::vector<std::string> argv_;
  Options options_;
  std::string data_dir_;
  std::string grpc_host_;
  pid_t pid_ = -1;
  int starts_ = 0;
  std::optional<int> exit_status_;  // waitpid's status once it exited.
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  std::string metrics_host_;
};

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_E2E_LEDGERD_PROCESS_H_
