// Serving through file-descriptor exhaustion (issue 30), against the real ledgerd binary: idle
// TCP connections that never send a byte fill its descriptors, and a new client is still served,
// with /metrics saying what ledgerd closed to make room. The open-file limit is lowered on the
// running process (prlimit), so that the test needs a few hundred connections, not thousands.
// (How --max_connections' default follows the limit: tests/server/open_connections_test.cc, and
// the hostile_fd_exhaustion probes, which start ledgerd under `ulimit -n 1024`.)
// Bounded in count and time.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ledger/v1/ledger.grpc.pb.h"
#include "tests/e2e/ledgerd_process.h"
#include "tests/http_get.h"
#include "tests/metrics_text.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing_util::LedgerdProcess;

// ledgerd's open-file limit in these tests, and the silent connections opened against it.
constexpr rlim_t kLedgerdOpenFiles = 256;
constexpr int kSilentConnections = 400;

class SilentConnections {
 public:
  ~SilentConnections() {
    for (int fd : fds_) close(fd);
  }
  // Opens up to `count` TCP connections to 127.0.0.1:`port` that send nothing; how many opened.
  int Open(int count, int port) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < count; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) break;
      if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
        close(fd);
        break;
      }
      fds_.push_back(fd);
    }
    return static_cast<int>(fds_.size());
  }

 private:
  std::vector<int> fds_;
};

// Room in this test process for the connections it opens.
void RaiseOwnOpenFileLimit(rlim_t wanted) {
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_cur >= wanted) return;
  limit.rlim_cur = std::min(wanted, limit.rlim_max);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0) << std::strerror(errno);
}

void LowerOpenFileLimitOf(pid_t pid, rlim_t files) {
  const rlimit limit{.rlim_cur = files, .rlim_max = files};
  ASSERT_EQ(prlimit(pid, RLIMIT_NOFILE, &limit, nullptr), 0) << std::strerror(errno);
}

// Deposits `amount` to `account` on a new connection; the balance after it, or nullopt.
std::optional<int64_t> DepositOnANewConnection(const std::string& target,
                                               const std::string& account, int64_t amount) {
  grpc::ChannelArguments arguments;
  arguments.SetInt("ledger.test.unique", static_cast<int>(amount));  // Its own connection.
  auto stub = v1::Ledger::NewStub(
      grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), arguments));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::DepositRequest request;
  request.set_account_id(account);
  request.set_amount(amount);
  v1::DepositResponse response;
  const grpc::Status status = stub->Deposit(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  if (!status.ok()) return std::nullopt;
  return response.balance();
}

int OpenDescriptors(pid_t pid) {
  std::error_code error;
  int count = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", error);
       !error && it != std::filesystem::directory_iterator(); it.increment(error)) {
    ++count;
  }
  return count;
}

double Metric(int metrics_port, const std::string& series) {
  const std::optional<testing_util::HttpResponse> response =
      testing_util::HttpGet(metrics_port, "/metrics");
  if (!response.has_value() || response->status != 200) return -1;
  return testing_util::SampleValue(response->body, series).value_or(-1);
}

TEST(ConnectionLimitsE2eTest, IdleConnectionsPastMaxConnectionsAreClosedAndANewClientServed) {
  LedgerdProcess ledgerd({"--durability=none", "--max_connections=192"});
  ASSERT_TRUE(ledgerd.Start());
  EXPECT_TRUE(ledgerd.WaitForLog("at most 192 client connections (--max_connections)"))
      << ledgerd.log();
  RaiseOwnOpenFileLimit(kSilentConnections + 256);

  SilentConnections silent;
  ASSERT_EQ(silent.Open(kSilentConnections, ledgerd.grpc_port()), kSilentConnections);
  EXPECT_EQ(DepositOnANewConnection(ledgerd.target(), "fresh", 25), 25);
  const std::string closed = "ledger_connections_closed_total{reason=\"connection_limit\"}";
  EXPECT_TRUE(testing_util::WaitUntil(
      [&] { return Metric(ledgerd.metrics_port(), closed) >= kSilentConnections + 1 - 192; },
      "ledgerd has closed the connections past --max_connections"));
  EXPECT_EQ(Metric(ledgerd.metrics_port(), "ledger_connections_max"), 192);
  EXPECT_EQ(Metric(ledgerd.metrics_port(), "ledger_out_of_descriptors_total"), 0);
  EXPECT_EQ(ledgerd.Stop(), 0) << ledgerd.log();
  EXPECT_THAT(ledgerd.log(), Not(HasSubstr("stopped accepting")));
}

TEST(ConnectionLimitsE2eTest, OutOfDescriptorsLedgerdUsesItsReserveAndKeepsServing) {
  // --max_connections far above the limit: only the reserve descriptor and the closing of the
  // idlest stand between the connections and a listener that no longer accepts.
  LedgerdProcess ledgerd({"--durability=none", "--max_connections=100000"});
  ASSERT_TRUE(ledgerd.Start());
  LowerOpenFileLimitOf(ledgerd.pid(), kLedgerdOpenFiles);
  RaiseOwnOpenFileLimit(kSilentConnections + 256);

  SilentConnections silent;
  ASSERT_EQ(silent.Open(kSilentConnections, ledgerd.grpc_port()), kSilentConnections);
  EXPECT_EQ(DepositOnANewConnection(ledgerd.target(), "fresh", 40), 40);
  // With no client left waiting, ledgerd still frees descriptors until its reserve is back: the
  // storage and /metrics need some too.
  EXPECT_TRUE(testing_util::WaitUntil(
      [&] { return OpenDescriptors(ledgerd.pid()) < static_cast<int>(kLedgerdOpenFiles) - 1; },
      "ledgerd has a descriptor free beside its reserve"));
  EXPECT_GT(Metric(ledgerd.metrics_port(), "ledger_out_of_descriptors_total"), 0);
  EXPECT_GT(Metric(ledgerd.metrics_port(),
                   "ledger_connections_closed_total{reason=\"out_of_descriptors\"}"),
            0);
  // Once more after the flood: the reserve is taken back, and the next one is served too.
  EXPECT_EQ(DepositOnANewConnection(ledgerd.target(), "fresh", 2), 42);
  EXPECT_TRUE(ledgerd.WaitForLog("Too many open files")) << ledgerd.log();
  EXPECT_EQ(ledgerd.Stop(), 0) << ledgerd.log();
  EXPECT_THAT(ledgerd.log(), Not(HasSubstr("stopped accepting")));
}

}  // namespace
}  // namespace ledger
