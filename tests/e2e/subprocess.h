// Test helper: runs a program as a child process with its stdout and stderr captured in one pipe,
// and stops it by PID. A ledgerd that is to serve is started with LedgerdProcess
// (tests/e2e/ledgerd_process.h) instead; this runs the clients, and a ledgerd that is to exit.
#ifndef LEDGER_TESTS_E2E_SUBPROCESS_H_
#define LEDGER_TESTS_E2E_SUBPROCESS_H_

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

extern char** environ;

namespace ledger::testing_util {

// Not thread-safe.
class Subprocess {
 public:
  explicit Subprocess(std::vector<std::string> argv) {
    int fds[2];
    if (pipe(fds) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    std::vector<char*> args;
    for (std::string& arg : argv) args.push_back(arg.data());
    args.push_back(nullptr);
    if (posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    output_fd_ = fds[0];
  }

  ~Subprocess() {
    if (pid_ > 0 && !exit_status_.has_value()) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (output_fd_ >= 0) close(output_fd_);
  }

  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  void Signal(int signal_number) const { kill(pid_, signal_number); }

  // Reads output until `needle` appears or `timeout` passes; true when it appeared.
  bool WaitForOutput(const std::string& needle,
                     std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (output_.find(needle) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !ReadSome(static_cast<int>(left.count()))) return false;
    }
    return true;
  }

  // Waits for the process to exit (at most `timeout`) and returns its exit code, or nullopt if it
  // is still running or died by a signal. Reads the rest of its output.
  std::optional<int> WaitForExit(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!exit_status_.has_value() && std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exit_status_ = status;
        break;
      }
      ReadSome(10);
    }
    while (ReadSome(0)) {
    }
    if (!exit_status_.has_value() || !WIFEXITED(*exit_status_)) return std::nullopt;
    return WEXITSTATUS(*exit_status_);
  }

  const std::string& output() const { return output_; }

  // True until the process has exited; never waits.
  bool running() {
    int status = 0;
    if (!exit_status_.has_value() && waitpid(pid_, &status, WNOHANG) == pid_) exit_status_ = status;
    return !exit_status_.has_value();
  }

 private:
  // Appends what is available within `timeout_ms` to output_; false at end of file or timeout.
  bool ReadSome(int timeout_ms) {
    pollfd fd{output_fd_, POLLIN, 0};
    if (poll(&fd, 1, timeout_ms) <= 0) return false;
    char buffer[4096];
    const ssize_t n = read(output_fd_, buffer, sizeof(buffer));
    if (n <= 0) return false;
    output_.append(buffer, static_cast<size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int output_fd_ = -1;
  std::string output_;
  std::optional<int> exit_status_;
};

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_E2E_SUBPROCESS_H_
