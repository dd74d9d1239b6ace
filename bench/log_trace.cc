// ledger-log-trace: turns the log of a ledgerd data directory into a trace of real group commits
// for the replication benchmark (bench/replication/shape_bench, issue 32's first deliverable:
// one Raft group per cluster or one per partition, measured on ledgerd's own entries).
//
// For every entry of the log it writes the entry as the journal thread made it (what one Raft
// group per cluster would propose) and the same changes split by partition (what one group per
// partition would propose: one entry per partition the group commit touched).
//
// A change's partition is PartitionOf(account) = JumpConsistentHash(Fnv1a64(account), P), the
// stable hash of docs/replication.md 2.1, where the account is the key's first part for the
// account, journal and request families. Transfer and credit records (the default family) name
// no account in their key; each goes with the last account change before it in the entry, which
// is its own batch's account for a debit or a credit and may be a neighbour's for a settle step.
// That moves a few hundred bytes between partitions and does not change how many there are.
//
// Trace format, little-endian, one record per log entry, then EOF:
//   [u32 operations][u32 whole length][whole payload][u32 pieces]
//   pieces x [u16 partition][u32 length][payload of that partition's changes]
// "operations" counts the entry's journal records: one per account an operation changed, so a
// Deposit is one and a transfer step is one.
//
// Usage: ledger-log-trace --log_dir DATA_DIR/ledger_log --out FILE [--partitions 64]
// Open recovers the log as ledgerd would (a torn tail is zeroed), so point it at a copy of a
// stopped or killed server's log.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "base/stable_hash.h"
#include "storage/local_log.h"
#include "storage/log_entry.h"

ABSL_FLAG(std::string, log_dir, "", "a ledgerd log directory (DATA_DIR/ledger_log), a copy");
ABSL_FLAG(std::string, out, "", "the trace file to write");
ABSL_FLAG(int32_t, partitions, 64, "partitions the changes are split into (1..65535)");

namespace {

using ledger::storage::LogChange;
using ledger::storage::LogEntryBuilder;
using ledger::storage::LogFamily;

void PutU32(std::string* out, uint32_t value) {
  for (int shift = 0; shift < 32; shift += 8) out->push_back(static_cast<char>(value >> shift));
}

void PutU16(std::string* out, uint16_t value) {
  out->push_back(static_cast<char>(value & 0xFF));
  out->push_back(static_cast<char>(value >> 8));
}

// The account a key belongs to, or empty for the default family's transfer and credit records.
absl::string_view AccountOf(const LogChange& change) {
  switch (change.family) {
    case LogFamily::kAccounts:
      return change.key;
    case LogFamily::kJournal:
    case LogFamily::kRequests:
      // account '\0' sequence | account '\0' request_id (storage/record_codec.cc).
      return change.key.substr(0, change.key.find('\0'));
    case LogFamily::kDefault:
      break;
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("writes a trace of a ledgerd log's entries, split by partition");
  absl::ParseCommandLine(argc, argv);
  const std::string log_dir = absl::GetFlag(FLAGS_log_dir);
  const std::string out_path = absl::GetFlag(FLAGS_out);
  const int32_t partitions = absl::GetFlag(FLAGS_partitions);
  if (log_dir.empty() || out_path.empty() || partitions < 1 || partitions > 65535) {
    std::cerr << "ledger-log-trace: --log_dir and --out are required, --partitions 1..65535\n";
    return 2;
  }
  ledger::storage::LocalLogOptions options;
  options.dir = log_dir;
  options.sync = false;
  absl::StatusOr<std::unique_ptr<ledger::storage::LocalLog>> log =
      ledger::storage::LocalLog::Open(options);
  if (!log.ok()) {
    std::cerr << "ledger-log-trace: " << log.status() << "\n";
    return 1;
  }
  std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
  if (!out) {
    std::cerr << "ledger-log-trace: cannot write " << out_path << "\n";
    return 1;
  }
  int64_t entries = 0;
  int64_t operations = 0;
  int64_t whole_bytes = 0;
  int64_t pieces = 0;
  const absl::Status read = (*log)->ReadFrom(
      (*log)->first_position(), [&](uint64_t, absl::string_view payload) -> absl::Status {
        std::map<int32_t, LogEntryBuilder> by_partition;
        int32_t last_partition = 0;
        uint32_t entry_operations = 0;
        absl::Status split = ledger::storage::ForEachLogChange(payload, [&](const LogChange& c) {
          const absl::string_view account = AccountOf(c);
          if (!account.empty()) {
            last_partition = ledger::JumpConsistentHash(ledger::Fnv1a64(account), partitions);
          }
          if (c.family == LogFamily::kJournal && c.value.has_value()) ++entry_operations;
          LogEntryBuilder& piece = by_partition[last_partition];
          if (c.value.has_value()) {
            piece.Put(c.family, c.key, *c.value);
          } else {
            piece.Delete(c.family, c.key);
          }
        });
        if (!split.ok()) return split;
        std::string record;
        PutU32(&record, entry_operations);
        PutU32(&record, static_cast<uint32_t>(payload.size()));
        record.append(payload.data(), payload.size());
        PutU32(&record, static_cast<uint32_t>(by_partition.size()));
        for (auto& [partition, builder] : by_partition) {
          const std::string& piece = builder.payload();
          PutU16(&record, static_cast<uint16_t>(partition));
          PutU32(&record, static_cast<uint32_t>(piece.size()));
          record.append(piece);
        }
        out.write(record.data(), static_cast<std::streamsize>(record.size()));
        ++entries;
        operations += entry_operations;
        whole_bytes += static_cast<int64_t>(payload.size());
        pieces += static_cast<int64_t>(by_partition.size());
        return absl::OkStatus();
      });
  out.close();
  if (!read.ok() || !out) {
    std::cerr << "ledger-log-trace: " << (read.ok() ? "write failed" : read.ToString()) << "\n";
    return 1;
  }
  const double n = entries > 0 ? static_cast<double>(entries) : 1.0;
  std::printf(
      "entries=%lld operations=%lld ops_per_entry=%.1f bytes_per_entry=%.0f "
      "partitions_per_entry=%.1f\n",
      static_cast<long long>(entries), static_cast<long long>(operations),
      static_cast<double>(operations) / n, static_cast<double>(whole_bytes) / n,
      static_cast<double>(pieces) / n);
  return entries > 0 ? 0 : 1;
}
