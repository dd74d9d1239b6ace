// ledger-raft-log-bench: what a commit through RaftLog (storage/raft_log.h) costs, three replicas
// in this one process on loopback: libraft's replicated append plus each replica's mirror (a
// LocalLog append and fdatasync). Set beside shape_bench's one-group rows (docs/replication.md,
// section 8), which replicate the same sizes without a mirror, it prices the mirror.
//
// `--in_flight` threads each call Append in a loop (Append is synchronous, so that is how many
// entries are in flight); every entry is `--entry_bytes` long. Output, one line of key=value
// words: commits, seconds, commits_per_s, p50_us, p99_us, max_us, cpu_us_per_commit (user +
// system of the whole process, so of all three replicas, per commit).
//
// Usage: ledger-raft-log-bench --dir DIR [--entry_bytes 2000] [--seconds 5] [--in_flight 1]
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "storage/raft_log.h"

ABSL_FLAG(std::string, dir, "", "a directory for the three replicas' files (made if missing)");
ABSL_FLAG(int64_t, entry_bytes, 2000, "bytes per entry");
ABSL_FLAG(double, seconds, 5, "how long to append");
ABSL_FLAG(int32_t, in_flight, 1, "threads appending at once");

namespace {

using ledger::storage::RaftLog;
using ledger::storage::RaftLogOptions;
using ledger::storage::RaftPeer;

int UnusedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  const bool found = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                     getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  close(fd);
  if (!found) {
    std::cerr << "ledger-raft-log-bench: no free loopback port\n";
    std::exit(1);
  }
  return ntohs(address.sin_port);
}

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("times commits through RaftLog, three replicas in one process");
  absl::ParseCommandLine(argc, argv);
  const std::string dir = absl::GetFlag(FLAGS_dir);
  const int64_t entry_bytes = absl::GetFlag(FLAGS_entry_bytes);
  const int32_t in_flight = absl::GetFlag(FLAGS_in_flight);
  if (dir.empty() || entry_bytes < 0 || in_flight < 1) {
    std::cerr << "ledger-raft-log-bench: --dir is required, --entry_bytes >= 0, --in_flight >= 1\n";
    return 2;
  }
  std::filesystem::create_directories(dir);
  std::vector<RaftPeer> peers;
  for (uint64_t id = 1; id <= 3; ++id) {
    peers.push_back(RaftPeer{id, absl::StrCat("127.0.0.1:", UnusedPort())});
  }
  std::vector<std::unique_ptr<RaftLog>> replicas;
  for (uint64_t id = 1; id <= 3; ++id) {
    RaftLogOptions options;
    options.node_id = id;
    options.peers = peers;
    options.raft_dir = absl::StrCat(dir, "/raft", id);
    options.log_dir = absl::StrCat(dir, "/log", id);
    absl::StatusOr<std::unique_ptr<RaftLog>> log = RaftLog::Open(options);
    if (!log.ok()) {
      std::cerr << "ledger-raft-log-bench: " << log.status() << "\n";
      return 1;
    }
    replicas.push_back(std::move(*log));
  }
  RaftLog* leader = nullptr;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (leader == nullptr && std::chrono::steady_clock::now() < give_up) {
    for (auto& replica : replicas) {
      if (replica->Status().leader) leader = replica.get();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (leader == nullptr) {
    std::cerr << "ledger-raft-log-bench: no leader within 30 s\n";
    return 1;
  }

  const std::string payload(static_cast<size_t>(entry_bytes), 'e');
  std::atomic<bool> stop{false};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::vector<int64_t> latencies_ns;
  const double cpu_before = CpuSeconds();
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> appenders;
  appenders.reserve(static_cast<size_t>(in_flight));
  for (int32_t t = 0; t < in_flight; ++t) {
    appenders.emplace_back([&] {
      std::vector<int64_t> mine;
      while (!stop.load()) {
        const auto begin = std::chrono::steady_clock::now();
        absl::StatusOr<uint64_t> position = leader->Append(payload);
        if (!position.ok()) {
          std::cerr << "ledger-raft-log-bench: " << position.status() << "\n";
          failed = true;
          break;
        }
        mine.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now() - begin)
                           .count());
      }
      std::lock_guard<std::mutex> lock(mu);
      latencies_ns.insert(latencies_ns.end(), mine.begin(), mine.end());
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(absl::GetFlag(FLAGS_seconds)));
  stop = true;
  for (std::thread& appender : appenders) appender.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu = CpuSeconds() - cpu_before;
  if (failed || latencies_ns.empty()) return 1;
  std::sort(latencies_ns.begin(), latencies_ns.end());
  const auto at = [&](double q) {
    return static_cast<double>(latencies_ns[std::min(
               latencies_ns.size() - 1,
               static_cast<size_t>(q * static_cast<double>(latencies_ns.size())))]) /
           1e3;
  };
  const auto n = static_cast<double>(latencies_ns.size());
  std::printf(
      "commits=%zu seconds=%.2f commits_per_s=%.0f p50_us=%.0f p99_us=%.0f max_us=%.0f "
      "cpu_us_per_commit=%.1f\n",
      latencies_ns.size(), seconds, n / seconds, at(0.5), at(0.99),
      static_cast<double>(latencies_ns.back()) / 1e3, cpu / n * 1e6);
  return 0;
}
