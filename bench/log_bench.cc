// ledger-log-bench: what one group commit costs when the journal is a log file ledgerd writes
// itself (issue 31, item 4: "measure the candidates side by side"). It is the first candidate; the
// second, libraft with a single voter, is bench/replication/raft_spike with one peer, on the same
// entries (--entry_ops deposits of 48 bytes, one entry per group commit, one in flight); the
// third is today's journal, ledger-journal-bench. bench/log_candidates.sh runs all three.
//
// The log: segments of --segment_mb, zero-filled and synced when created (as PostgreSQL fills
// its WAL segments), so that appending never changes the file's size or extents and a sync has
// only the data to write; entries are [u32 length][u32 crc32 of what follows][u64 position]
// [payload], written with one pwrite and made durable with one fdatasync (--sync=fdatasync) or
// written through O_DSYNC (--sync=odsync). A new segment is created when the current one is full,
// on the writer's path (counted in the figures).
//
// Output, one line: key=value words: entries, ops, seconds, entries_per_s, ops_per_s, p50_us,
// p99_us, max_us, cpu_us_per_op (user + system of this process per operation), and, after the
// run, recover_ms: opening every segment and checking every entry's checksum and position, as
// recovery would, with the page cache dropped when --drop_caches is given (root).
//
// Usage: ledger-log-bench --dir DIR [--entry_ops 64] [--seconds 5] [--sync fdatasync|odsync]
//                         [--segment_mb 64] [--drop_caches]
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr size_t kOperationBytes = 48;  // One deposit, as in raft_spike and ledger-journal-bench.
constexpr size_t kHeaderBytes = 4 + 4 + 8;

struct Options {
  std::string dir;
  size_t entry_ops = 64;
  double seconds = 5;
  bool odsync = false;
  size_t segment_bytes = size_t{64} << 20;
  bool drop_caches = false;
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "ledger-log-bench: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

Options Parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "ledger-log-bench: %s needs a value\n", argv[i]);
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--dir") {
      options.dir = value();
    } else if (arg == "--entry_ops") {
      options.entry_ops = std::stoul(value());
    } else if (arg == "--seconds") {
      options.seconds = std::stod(value());
    } else if (arg == "--sync") {
      const std::string sync = value();
      if (sync != "fdatasync" && sync != "odsync") {
        std::fprintf(stderr, "ledger-log-bench: --sync is fdatasync or odsync\n");
        std::exit(2);
      }
      options.odsync = sync == "odsync";
    } else if (arg == "--segment_mb") {
      options.segment_bytes = std::stoul(value()) << 20;
    } else if (arg == "--drop_caches") {
      options.drop_caches = true;
    } else {
      std::fprintf(stderr, "ledger-log-bench: unknown argument %s\n", argv[i]);
      std::exit(2);
    }
  }
  if (options.dir.empty() || options.entry_ops == 0 || options.segment_bytes < (1 << 20)) {
    std::fprintf(stderr,
                 "usage: ledger-log-bench --dir DIR [--entry_ops N>0] [--seconds S] "
                 "[--sync fdatasync|odsync] [--segment_mb M>=1] [--drop_caches]\n");
    std::exit(2);
  }
  return options;
}

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

std::string SegmentPath(const Options& options, uint64_t index) {
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx.log", static_cast<unsigned long long>(index));
  return options.dir + "/" + name;
}

// A new segment: zero-filled and synced, so that appends change no metadata.
int CreateSegment(const Options& options, uint64_t index) {
  const std::string path = SegmentPath(options, index);
  const int fd = open(
      path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | (options.odsync ? O_DSYNC : 0), 0644);
  if (fd < 0) Die("open " + path);
  const std::vector<char> zeros(size_t{1} << 20, 0);
  for (size_t written = 0; written < options.segment_bytes; written += zeros.size()) {
    if (pwrite(fd, zeros.data(), zeros.size(), static_cast<off_t>(written)) !=
        static_cast<ssize_t>(zeros.size())) {
      Die("fill " + path);
    }
  }
  if (fsync(fd) != 0) Die("fsync " + path);
  const int dir = open(options.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0 || fsync(dir) != 0) Die("fsync " + options.dir);
  close(dir);
  return fd;
}

void PutU32(char* at, uint32_t value) { std::memcpy(at, &value, sizeof(value)); }
void PutU64(char* at, uint64_t value) { std::memcpy(at, &value, sizeof(value)); }

// Reads every segment back and checks each entry, as recovery would; returns how many entries.
uint64_t Recover(const Options& options, uint64_t segments) {
  uint64_t entries = 0;
  std::vector<char> data(options.segment_bytes);
  for (uint64_t index = 0; index < segments; ++index) {
    const std::string path = SegmentPath(options, index);
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) Die("open " + path);
    size_t read_bytes = 0;
    while (read_bytes < data.size()) {
      const ssize_t n = pread(fd, data.data() + read_bytes, data.size() - read_bytes,
                              static_cast<off_t>(read_bytes));
      if (n <= 0) break;
      read_bytes += static_cast<size_t>(n);
    }
    close(fd);
    size_t offset = 0;
    while (offset + kHeaderBytes <= read_bytes) {
      uint32_t length = 0;
      uint32_t crc = 0;
      std::memcpy(&length, data.data() + offset, 4);
      std::memcpy(&crc, data.data() + offset + 4, 4);
      if (length == 0 || offset + kHeaderBytes + length > read_bytes) break;  // The end.
      const auto* covered = reinterpret_cast<const Bytef*>(data.data() + offset + 8);
      if (crc32(0, covered, static_cast<uInt>(8 + length)) != crc) break;  // A torn tail.
      ++entries;
      offset += kHeaderBytes + length;
    }
  }
  return entries;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = Parse(argc, argv);
  std::filesystem::create_directories(options.dir);
  for (const auto& entry : std::filesystem::directory_iterator(options.dir)) {
    if (entry.path().extension() == ".log") std::filesystem::remove(entry.path());
  }
  const size_t payload_bytes = options.entry_ops * kOperationBytes;
  const size_t entry_bytes = kHeaderBytes + payload_bytes;
  if (entry_bytes > options.segment_bytes) {
    std::fprintf(stderr, "ledger-log-bench: an entry is larger than a segment\n");
    return 2;
  }
  std::vector<char> entry(entry_bytes);
  std::mt19937_64 random(42);
  for (size_t i = kHeaderBytes; i < entry.size(); ++i) entry[i] = static_cast<char>(random());

  uint64_t segment = 0;
  int fd = CreateSegment(options, segment);
  size_t offset = 0;
  std::vector<double> latencies_us;
  uint64_t position = 0;
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = CpuSeconds();
  const auto deadline = start + std::chrono::duration<double>(options.seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    const auto before = std::chrono::steady_clock::now();
    if (offset + entry_bytes > options.segment_bytes) {
      close(fd);
      fd = CreateSegment(options, ++segment);
      offset = 0;
    }
    // Encoding belongs to the append: the journal thread does it for every group.
    PutU32(entry.data(), static_cast<uint32_t>(payload_bytes));
    PutU64(entry.data() + 8, ++position);
    PutU32(entry.data() + 4,
           static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(entry.data() + 8),
                                       static_cast<uInt>(8 + payload_bytes))));
    if (pwrite(fd, entry.data(), entry.size(), static_cast<off_t>(offset)) !=
        static_cast<ssize_t>(entry.size())) {
      Die("append");
    }
    if (!options.odsync && fdatasync(fd) != 0) Die("fdatasync");
    offset += entry.size();
    latencies_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - before)
            .count());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu = CpuSeconds() - cpu_start;
  close(fd);

  if (options.drop_caches) {
    sync();
    if (FILE* drop = std::fopen("/proc/sys/vm/drop_caches", "w")) {
      std::fputs("3\n", drop);
      std::fclose(drop);
    }
  }
  const auto recover_start = std::chrono::steady_clock::now();
  const uint64_t recovered = Recover(options, segment + 1);
  const double recover_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - recover_start)
          .count();
  if (recovered != position) {
    std::fprintf(stderr, "ledger-log-bench: recovered %llu entries of %llu\n",
                 static_cast<unsigned long long>(recovered),
                 static_cast<unsigned long long>(position));
    return 1;
  }

  std::sort(latencies_us.begin(), latencies_us.end());
  auto quantile = [&](double q) {
    return latencies_us[std::min(
        latencies_us.size() - 1,
        static_cast<size_t>(q * static_cast<double>(latencies_us.size())))];
  };
  const double ops = static_cast<double>(position * options.entry_ops);
  std::printf(
      "result candidate=log sync=%s k=%zu entries=%llu ops=%.0f seconds=%.2f entries_per_s=%.0f "
      "ops_per_s=%.0f p50_us=%.0f p99_us=%.0f max_us=%.0f cpu_us_per_op=%.3f recover_ms=%.1f "
      "log_mb=%.1f\n",
      options.odsync ? "odsync" : "fdatasync", options.entry_ops,
      static_cast<unsigned long long>(position), ops, seconds,
      static_cast<double>(position) / seconds, ops / seconds, quantile(0.5), quantile(0.99),
      latencies_us.back(), cpu * 1e6 / ops, recover_ms,
      static_cast<double>((segment + 1) * options.segment_bytes) / (1 << 20));
  return 0;
}
