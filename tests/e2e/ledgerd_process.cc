#include "tests/e2e/ledgerd_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string_view>
#include <thread>

#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/e2e/ledger_dir.h"
#include "tests/test_paths.h"

extern char** environ;

namespace ledger::testing_util {
namespace {

// How often the harness looks for the ports file, an exit or a log line: cheap checks.
constexpr std::chrono::milliseconds kPollInterval{5};
// The deadline of one health check; Start makes as many as its own deadline allows.
constexpr std::chrono::seconds kHealthCheckDeadline{2};
// A port freed by a killed ledgerd can take a moment to be bindable again: Restart tries this
// many times, kRestartPause apart, while the refusal is "cannot listen".
constexpr int kRestartAttemptsMax = 50;
constexpr std::chrono::milliseconds kRestartPause{100};
// How much of the log a failure message quotes (its end, where the reason is).
constexpr size_t kLogQuoteBytesMax = 16 * 1024;

bool HasFlag(const std::vector<std::string>& flags, std::string_view name) {
  for (const std::string& flag : flags) {
    if (flag.rfind(name, 0) == 0) return true;
  }
  return false;
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream file(path);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

// The string value of `"key":"..."` in a flat JSON object; nullopt when absent or not a string.
std::optional<std::string> JsonString(const std::string& json, const std::string& key) {
  const std::string opening = "\"" + key + "\":\"";
  const size_t at = json.find(opening);
  if (at == std::string::npos) return std::nullopt;
  const size_t begin = at + opening.size();
  const size_t end = json.find('"', begin);
  if (end == std::string::npos) return std::nullopt;
  return json.substr(begin, end - begin);
}

// The port of "HOST:PORT" (0 when there is none).
int PortOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? 0 : std::atoi(address.c_str() + colon + 1);
}

std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

}  // namespace

LedgerdProcess::LedgerdProcess(std::vector<std::string> flags)
    : LedgerdProcess(std::move(flags), Options{}) {}

LedgerdProcess::LedgerdProcess(std::vector<std::string> flags, Options options)
    : options_(std::move(options)) {
  if (options_.credentials == nullptr) options_.credentials = grpc::InsecureChannelCredentials();
  if (!options_.netns.empty()) argv_ = {"/bin/ip", "netns", "exec", options_.netns};
  argv_.push_back(LedgerdPath());
  if (!HasFlag(flags, "--listen=")) argv_.push_back("--listen=127.0.0.1:0");
  if (!HasFlag(flags, "--metrics_listen=")) argv_.push_back("--metrics_listen=127.0.0.1:0");
  for (const std::string& flag : flags) {
    if (flag.rfind("--data_dir=", 0) == 0)
      data_dir_ = flag.substr(std::string("--data_dir=").size());
  }
  const bool in_memory = HasFlag(flags, "--durability=none");
  if (data_dir_.empty() && !in_memory) {
    data_dir_ = scratch_.Sub("data");
    InitLedgerDir(data_dir_, options_.ledger_id);
    argv_.push_back("--data_dir=" + data_dir_);
  }
  argv_.insert(argv_.end(), flags.begin(), flags.end());
  argv_.push_back("--ports_file=" + ports_file());
}

LedgerdProcess::~LedgerdProcess() {
  if (running()) Stop();
}

::testing::AssertionResult LedgerdProcess::Start() { return Spawn({}); }

::testing::AssertionResult LedgerdProcess::Restart() {
  if (grpc_port_ == 0) return ::testing::AssertionFailure() << "Restart before a Start";
  // The last value of a flag wins.
  const std::string listen = "--listen=" + grpc_host_ + ":" + std::to_string(grpc_port_);
  ::testing::AssertionResult started = ::testing::AssertionFailure();
  for (int attempt = 0; attempt < kRestartAttemptsMax; ++attempt) {
    started = Spawn({listen});
    if (started || running() || log().find("cannot listen") == std::string::npos) break;
    std::this_thread::sleep_for(kRestartPause);
  }
  return started;
}

::testing::AssertionResult LedgerdProcess::Spawn(const std::vector<std::string>& extra_flags) {
  if (running()) return ::testing::AssertionFailure() << "ledgerd " << pid_ << " still runs";
  // A killed ledgerd leaves its ports file: it must not pass for this run's.
  std::filesystem::remove(ports_file());
  ++starts_;
  exit_status_.reset();
  grpc_port_ = metrics_port_ = 0;
  std::vector<std::string> argv = argv_;
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  std::vector<char*> args;
  for (std::string& arg : argv) args.push_back(arg.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string log_path = LogPath();
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  // Options::environment first: the first of two same-named variables is the one read.
  std::vector<std::string> variables = options_.environment;
  for (char** each = environ; *each != nullptr; ++each) variables.emplace_back(*each);
  std::vector<char*> envp;
  for (std::string& variable : variables) envp.push_back(variable.data());
  envp.push_back(nullptr);
  const int error = posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    pid_ = -1;
    return ::testing::AssertionFailure() << "cannot start " << argv[0] << ": " << strerror(error);
  }
  const auto deadline = std::chrono::steady_clock::now() + options_.start_timeout;
  ::testing::AssertionResult bound = WaitForPortsFile(deadline);
  if (!bound) return bound;
  return WaitForServing(deadline);
}

::testing::AssertionResult LedgerdProcess::WaitForPortsFile(
    std::chrono::steady_clock::time_point deadline) {
  while (!std::filesystem::exists(ports_file())) {
    if (WaitForExit(std::chrono::milliseconds(0)).has_value() || !running()) {
      return Failure("ledgerd exited before it wrote its ports file");
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return Failure("ledgerd wrote no ports file within " +
                     std::to_string(options_.start_timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  // Renamed into place whole: what is there is complete.
  const std::string json = ReadPortsFile();
  const std::optional<std::string> grpc = JsonString(json, "grpc");
  const std::optional<std::string> metrics = JsonString(json, "metrics");
  if (!grpc.has_value() ||
      json.find("\"pid\":" + std::to_string(pid_) + ",") == std::string::npos) {
    return Failure("the ports file does not name this ledgerd's pid and gRPC address: " + json);
  }
  grpc_host_ = HostOf(*grpc);
  grpc_port_ = PortOf(*grpc);
  metrics_port_ = metrics.has_value() ? PortOf(*metrics) : 0;
  metrics_host_ = metrics.has_value() ? HostOf(*metrics) : "";
  if (metrics_host_ == "0.0.0.0" || metrics_host_.empty()) metrics_host_ = "127.0.0.1";
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult LedgerdProcess::WaitForServing(
    std::chrono::steady_clock::time_point deadline) {
  grpc::ChannelArguments arguments;
  if (!options_.tls_server_name.empty()) {
    arguments.SetSslTargetNameOverride(options_.tls_server_name);
  }
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateCustomChannel(target(), options_.credentials, arguments));
  grpc::Status status;
  grpc::health::v1::HealthCheckResponse response;
  while (true) {
    grpc::health::v1::HealthCheckRequest request;
    grpc::ClientContext context;
    context.set_deadline(
        std::min(std::chrono::system_clock::now() + kHealthCheckDeadline,
                 std::chrono::system_clock::now() + (deadline - std::chrono::steady_clock::now())));
    response.Clear();
    status = health->Check(&context, request, &response);
    if (status.ok() && response.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
      return ::testing::AssertionSuccess();
    }
    if (!running() || WaitForExit(std::chrono::milliseconds(0)).has_value()) {
      return Failure("ledgerd exited before it answered SERVING");
    }
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(kPollInterval);
  }
  return Failure("ledgerd at " + target() + " did not answer SERVING within " +
                 std::to_string(options_.start_timeout.count()) + " ms (last health check: " +
                 (status.ok()
                      ? grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status())
                      : std::to_string(status.error_code()) + " " + status.error_message()) +
                 ")");
}

::testing::AssertionResult LedgerdProcess::Failure(const std::string& why) const {
  std::string quoted = log();
  if (quoted.size() > kLogQuoteBytesMax) {
    quoted = "[...]" + quoted.substr(quoted.size() - kLogQuoteBytesMax);
  }
  ::testing::AssertionResult failure = ::testing::AssertionFailure();
  failure << why;
  if (exit_status_.has_value()) {
    if (WIFEXITED(*exit_status_)) failure << " (exit status " << WEXITSTATUS(*exit_status_) << ")";
    if (WIFSIGNALED(*exit_status_))
      failure << " (killed by signal " << WTERMSIG(*exit_status_) << ")";
  }
  return failure << "; its log:\n" << quoted;
}

std::optional<int> LedgerdProcess::Stop(std::chrono::milliseconds timeout) {
  if (running()) {
    Signal(SIGTERM);
    Signal(SIGCONT);
    if (!WaitForExit(timeout).has_value() && running()) {
      ADD_FAILURE() << "ledgerd " << pid_ << " did not exit within " << timeout.count()
                    << " ms of SIGTERM; killing it. Its log:\n"
                    << log();
      Kill();
    }
  }
  return WaitForExit(std::chrono::milliseconds(0));
}

void LedgerdProcess::Kill() {
  if (!running()) return;
  kill(pid_, SIGKILL);
  int status = 0;
  if (waitpid(pid_, &status, 0) == pid_) exit_status_ = status;
}

void LedgerdProcess::Signal(int signal_number) const {
  if (running()) kill(pid_, signal_number);
}

std::optional<int> LedgerdProcess::WaitForExit(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (running()) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_status_ = status;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(kPollInterval);
  }
  if (!exit_status_.has_value() || !WIFEXITED(*exit_status_)) return std::nullopt;
  return WEXITSTATUS(*exit_status_);
}

std::string LedgerdProcess::log() const { return starts_ == 0 ? "" : ReadWholeFile(LogPath()); }

bool LedgerdProcess::WaitForLog(const std::string& needle,
                                std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (log().find(needle) == std::string::npos) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(kPollInterval);
  }
  return true;
}

std::string LedgerdProcess::ReadPortsFile() const { return ReadWholeFile(ports_file()); }

std::string LedgerdProcess::target() const {
  std::string host = grpc_host_;
  if (host == "0.0.0.0" || host.empty()) host = "127.0.0.1";
  if (host == "[::]") host = "[::1]";
  return host + ":" + std::to_string(grpc_port_);
}

}  // namespace ledger::testing_util
