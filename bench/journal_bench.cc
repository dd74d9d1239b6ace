// ledger-journal-bench: what one group commit (one WriteBatch of G deposits, one synced write)
// costs on RocksDB opened with ledgerd's options, and which options make it cheaper (issue 13,
// item 7). Figures and the commands that produce them: docs/journal-tuning.md.
//
// BM_GroupCommit/<variant>/<G> times the commit path the journal thread takes; counters:
// writes/s, deposits/s, p50/p99 of one write (the Write call, plus FlushWAL for the manual-flush
// variant) and build_us (encoding the G deposits into the batch, outside the write).
// BM_Breakdown/<variant>/<G> is the same loop with RocksDB's PerfContext and IOStatsContext on
// (they cost clock reads, so its throughput is not comparable): where one write's time goes.
// BM_Paired/<variant>/<G> writes groups to the baseline and to the variant in turn, in one
// process, so that both see the same moments of a shared, noisy disk; speedup = the baseline's
// time per group / the variant's. bench/journal_table.py turns the JSON output into tables.
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "benchmark/benchmark.h"
#include "rocksdb/cache.h"
#include "rocksdb/compaction_filter.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/iostats_context.h"
#include "rocksdb/memtablerep.h"
#include "rocksdb/options.h"
#include "rocksdb/perf_context.h"
#include "rocksdb/perf_level.h"
#include "rocksdb/slice_transform.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"
#include "storage/record_codec.h"

namespace ledger {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kAccounts = 10000;                         // As in bench/durability_bench.py's load.
const absl::Duration kIdempotencyTtl = absl::Hours(24);  // ledgerd's default --idempotency_ttl.

// The request family's filter does what ledgerd's ExpiredRequestFilter does (decode, compare with
// the TTL), so background compactions cost the CPU they cost in ledgerd.
class ExpiredRequestFilter final : public rocksdb::CompactionFilter {
 public:
  bool Filter(int, const rocksdb::Slice&, const rocksdb::Slice& value, std::string*,
              bool*) const override {
    absl::StatusOr<RequestRecord> record = storage::DecodeRequest({value.data(), value.size()});
    return record.ok() && record->recorded_at + kIdempotencyTtl <= absl::Now();
  }
  const char* Name() const override { return "ledgerd.ExpiredRequestFilter"; }
};

// The account id of a key: all of an account key, and what precedes the NUL of a journal or
// request key (storage/record_codec.h). For the hash-bucketed memtable variant only.
class AccountPrefix final : public rocksdb::SliceTransform {
 public:
  const char* Name() const override { return "ledgerd.AccountPrefix"; }
  rocksdb::Slice Transform(const rocksdb::Slice& key) const override {
    const void* nul = memchr(key.data(), '\0', key.size());
    return {key.data(), nul == nullptr
                            ? key.size()
                            : static_cast<size_t>(static_cast<const char*>(nul) - key.data())};
  }
  bool InDomain(const rocksdb::Slice&) const override { return true; }
};

// What one variant opens and how it commits.
struct Setup {
  rocksdb::DBOptions db;
  rocksdb::ColumnFamilyOptions family;  // Every family's; the request family adds its filter.
  rocksdb::WriteOptions write;
  bool flush_wal = false;  // Write without sync, then FlushWAL(true): manual_wal_flush's way.
  bool sort_keys = false;  // Each family's records in key order within the batch.
  // RocksDB's per-thread perf level on the writing thread. Its default, kEnableCount, counts
  // every key comparison into a thread-local PerfContext, which a shared librocksdb reaches
  // through __tls_get_addr.
  rocksdb::PerfLevel perf_level = rocksdb::PerfLevel::kEnableCount;
};

// A copy of RocksDbStore::OpenHandles's options (storage/rocksdb_store.cc), which the store does
// not expose; the variants below change a few of them. Keep the two in step.
Setup LedgerdSetup() {
  Setup setup;
  rocksdb::DBOptions& db = setup.db;
  db.create_if_missing = true;
  db.create_missing_column_families = true;
  db.error_if_exists = true;
  db.paranoid_checks = true;
  db.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  db.db_write_buffer_size = 64 << 20;
  db.max_background_jobs = 2;
  db.atomic_flush = true;
  db.max_bgerror_resume_count = 0;
  // ledgerd logs RocksDB's warnings to stderr and writes no LOG file; a LOG file at the default
  // level here would add writes that ledgerd does not make.
  db.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(32 << 20);
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  setup.family.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  setup.write.sync = true;
  return setup;
}

struct Variant {
  const char* name;
  std::function<void(Setup&)> change;
};

const std::vector<Variant>& Variants() {
  static const auto* variants = new std::vector<Variant>{
      {"baseline", [](Setup&) {}},
      // Sanitized to 0 under kPointInTimeRecovery in 7.8 (the run prints recycle_effective).
      {"recycle_log", [](Setup& s) { s.db.recycle_log_file_num = 4; }},
      // Recycling is not measured further: the only recovery mode 7.8 keeps it under,
      // kSkipAnyCorruptedRecords, skips corrupt records silently, and with it 7.8.3 crashes in
      // its first flush (SIGSEGV in DBImpl::MarkLogsSynced), atomic_flush or not.
      {"manual_wal_flush",
       [](Setup& s) {
         s.db.manual_wal_flush = true;
         s.write.sync = false;
         s.flush_wal = true;
       }},
      // Refused with atomic_flush ("atomic_flush is incompatible with enable_pipelined_write").
      {"pipelined_write", [](Setup& s) { s.db.enable_pipelined_write = true; }},
      {"unordered_write", [](Setup& s) { s.db.unordered_write = true; }},
      {"wal_bytes_per_sync_1M", [](Setup& s) { s.db.wal_bytes_per_sync = 1 << 20; }},
      {"max_total_wal_size_256M", [](Setup& s) { s.db.max_total_wal_size = 256 << 20; }},
      // Bigger memtables: fewer flushes, and a larger WAL preallocation (1.1 x write_buffer_size).
      {"memtable_256M",
       [](Setup& s) {
         s.db.db_write_buffer_size = 256 << 20;
         s.family.write_buffer_size = 128 << 20;
       }},
      {"memtable_16M", [](Setup& s) { s.family.write_buffer_size = 16 << 20; }},
      {"memtable_4M", [](Setup& s) { s.family.write_buffer_size = 4 << 20; }},
      // A memtable hashed by account id, a small skip list per account: an insert no longer
      // searches one skip list of every key. Changes how iterators and prefix seeks behave, so
      // it would need ledgerd's reads reviewed; measured to see whether it is worth that.
      {"hash_skiplist_by_account",
       [](Setup& s) {
         s.family.prefix_extractor = std::make_shared<AccountPrefix>();
         s.family.memtable_factory.reset(rocksdb::NewHashSkipListRepFactory(1 << 16));
         s.db.allow_concurrent_memtable_write = false;  // The hash memtables do not support it.
       }},
      {"use_fsync", [](Setup& s) { s.db.use_fsync = true; }},
      // One writer thread: nothing to gain from concurrent memtable inserts but their atomics.
      {"no_concurrent_memtable", [](Setup& s) { s.db.allow_concurrent_memtable_write = false; }},
      // Hints skip part of an insert when a group's keys of a family lie close together in the
      // memtable (they rarely do with random accounts).
      {"insert_hint", [](Setup& s) { s.write.memtable_insert_hint_per_batch = true; }},
      {"sorted_keys", [](Setup& s) { s.sort_keys = true; }},
      {"perf_level_disable", [](Setup& s) { s.perf_level = rocksdb::PerfLevel::kDisable; }},
      {"sorted+perf_off+wal256M",
       [](Setup& s) {
         s.sort_keys = true;
         s.perf_level = rocksdb::PerfLevel::kDisable;
         s.db.max_total_wal_size = 256 << 20;
       }},
  };
  return *variants;
}

// A database in a fresh directory under $TMPDIR (or /tmp), removed again at the end.
class JournalDb {
 public:
  static rocksdb::Status Open(const Setup& setup, std::unique_ptr<JournalDb>* out) {
    auto journal = std::unique_ptr<JournalDb>(new JournalDb(setup));
    const char* tmp = getenv("TMPDIR");
    std::string pattern = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/journal-bench-XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) return rocksdb::Status::IOError("mkdtemp failed");
    journal->dir_ = pattern;
    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    for (const char* name : {"default", "accounts", "journal", "requests"}) {
      rocksdb::ColumnFamilyOptions family = setup.family;
      if (std::string(name) == "requests") {
        family.compaction_filter = &journal->filter_;
        family.periodic_compaction_seconds = absl::ToInt64Seconds(kIdempotencyTtl);
      }
      descriptors.emplace_back(name, family);
    }
    rocksdb::DB* db = nullptr;
    rocksdb::Status opened =
        rocksdb::DB::Open(setup.db, journal->dir_, descriptors, &journal->families_, &db);
    journal->db_.reset(db);
    if (opened.ok()) *out = std::move(journal);
    return opened;
  }

  ~JournalDb() {
    if (db_ != nullptr) {
      for (rocksdb::ColumnFamilyHandle* family : families_) db_->DestroyColumnFamilyHandle(family);
      db_->Close().PermitUncheckedError();
      db_.reset();
    }
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }

  rocksdb::DB& db() { return *db_; }
  rocksdb::ColumnFamilyHandle* accounts() { return families_[1]; }
  rocksdb::ColumnFamilyHandle* journal() { return families_[2]; }
  rocksdb::ColumnFamilyHandle* requests() { return families_[3]; }

  // One group commit: the batch, durable when this returns OK.
  rocksdb::Status Commit(rocksdb::WriteBatch& batch, Clock::duration* flush_time) {
    rocksdb::Status written = db_->Write(setup_.write, &batch);
    if (!written.ok() || !setup_.flush_wal) return written;
    const Clock::time_point start = Clock::now();
    written = db_->FlushWAL(/*sync=*/true);
    *flush_time += Clock::now() - start;
    return written;
  }

 private:
  explicit JournalDb(const Setup& setup) : setup_(setup) {}

  const Setup setup_;
  ExpiredRequestFilter filter_;
  std::string dir_;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> families_;
};

// Deposits as a shard decides them: to random accounts, each with the account's next journal
// sequence number and a fresh request_id, encoded by ledgerd's own codec, and put family by family
// as RocksDbStore::WriteWith does (all accounts, then all journal entries, then all requests).
class DepositSource {
 public:
  DepositSource() : sequences_(kAccounts, 0) {
    for (int i = 0; i < kAccounts; ++i) accounts_.push_back(absl::StrFormat("account-%06d", i));
  }

  // `sorted`: each family's records in key order (a stable sort, so that two records of one key
  // keep their order and the later still wins), which lets the memtable's skip list start each
  // insert from where the previous one ended.
  void Fill(JournalDb& db, int group, bool sorted, rocksdb::WriteBatch& batch) {
    for (auto& family : records_) family.clear();
    for (int i = 0; i < group; ++i) {
      const int index = static_cast<int>(Mix(next_) % kAccounts);
      const std::string& account = accounts_[index];
      const uint64_t sequence = ++sequences_[index];
      const int64_t balance = static_cast<int64_t>(sequence) * 1250;
      const std::string request_id = absl::StrFormat("%016x-%08x", Mix(~next_), next_);
      const absl::Time now = absl::Now();
      JournalEntry entry{.account_id = account,
                         .sequence = sequence,
                         .kind = EntryKind::kDeposit,
                         .amount = 1250,
                         .balance_after = balance,
                         .request_id = request_id,
                         .time = now};
      RequestRecord record{.op = Op::kDeposit,
                           .amount = 1250,
                           .outcome = Outcome::kOk,
                           .balance = balance,
                           .recorded_at = now};
      records_[0].emplace_back(storage::AccountKey(account),
                               storage::EncodeAccount({.balance = balance, .sequence = sequence}));
      records_[1].emplace_back(storage::JournalKey(account, sequence),
                               storage::EncodeJournal(entry));
      records_[2].emplace_back(storage::RequestKey(account, request_id),
                               storage::EncodeRequest(record));
      ++next_;
    }
    rocksdb::ColumnFamilyHandle* families[] = {db.accounts(), db.journal(), db.requests()};
    for (int f = 0; f < 3; ++f) {
      if (sorted) {
        std::stable_sort(records_[f].begin(), records_[f].end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      for (const auto& [key, value] : records_[f]) batch.Put(families[f], key, value);
    }
  }

 private:
  // splitmix64: a cheap, well-spread account choice.
  static uint64_t Mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9;
    x = (x ^ (x >> 27)) * 0x94d049bb133111eb;
    return x ^ (x >> 31);
  }

  std::vector<std::string> accounts_;
  std::vector<uint64_t> sequences_;
  std::vector<std::pair<std::string, std::string>> records_[3];  // accounts, journal, requests.
  uint64_t next_ = 0;
};

double Percentile(std::vector<double>& values, double fraction) {
  if (values.empty()) return 0;
  const size_t rank = static_cast<size_t>(fraction * static_cast<double>(values.size() - 1));
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(rank),
                   values.end());
  return values[rank];
}

double Micros(Clock::duration duration) {
  return std::chrono::duration<double, std::micro>(duration).count();
}

// Opens `setup`'s database and flushes it three times, so that a variant that recycles logs is
// writing into a recycled one. An empty string, or what failed.
std::string OpenWarm(const Setup& setup, DepositSource& source, std::unique_ptr<JournalDb>* db) {
  if (rocksdb::Status opened = JournalDb::Open(setup, db); !opened.ok()) {
    return absl::StrCat("open: ", opened.ToString());
  }
  rocksdb::WriteBatch batch;
  Clock::duration ignored{};
  for (int i = 0; i < 3; ++i) {
    batch.Clear();
    source.Fill(**db, 16, setup.sort_keys, batch);
    JournalDb& journal = **db;
    rocksdb::Status done = journal.Commit(batch, &ignored);
    if (done.ok()) {
      done = journal.db().Flush(rocksdb::FlushOptions(),
                                {journal.accounts(), journal.journal(), journal.requests()});
    }
    if (!done.ok()) return absl::StrCat("warm-up: ", done.ToString());
  }
  return "";
}

void GroupCommit(benchmark::State& state, const Variant& variant, bool breakdown) {
  const int group = static_cast<int>(state.range(0));
  Setup setup = LedgerdSetup();
  variant.change(setup);
  std::unique_ptr<JournalDb> db;
  DepositSource source;
  if (std::string failed = OpenWarm(setup, source, &db); !failed.empty()) {
    state.SkipWithError(failed.c_str());
    return;
  }
  rocksdb::WriteBatch batch;
  Clock::duration flush_time{};
  rocksdb::SetPerfLevel(setup.perf_level);
  if (breakdown) {
    rocksdb::SetPerfLevel(rocksdb::PerfLevel::kEnableTime);
    rocksdb::get_perf_context()->Reset();
    rocksdb::get_iostats_context()->Reset();
  }
  flush_time = {};
  std::vector<double> write_us;
  Clock::duration build_time{};
  for (auto _ : state) {
    batch.Clear();
    const Clock::time_point start = Clock::now();
    source.Fill(*db, group, setup.sort_keys, batch);
    const Clock::time_point built = Clock::now();
    rocksdb::Status written = db->Commit(batch, &flush_time);
    write_us.push_back(Micros(Clock::now() - built));
    build_time += built - start;
    if (!written.ok()) {
      state.SkipWithError(absl::StrCat("write: ", written.ToString()).c_str());
      break;
    }
  }
  const double writes = static_cast<double>(state.iterations());
  state.counters["writes"] = benchmark::Counter(writes, benchmark::Counter::kIsRate);
  state.counters["deposits"] = benchmark::Counter(writes * group, benchmark::Counter::kIsRate);
  state.counters["build_us"] = Micros(build_time) / writes;
  state.counters["p50_us"] = Percentile(write_us, 0.50);
  state.counters["p99_us"] = Percentile(write_us, 0.99);
  state.counters["batch_KiB"] = static_cast<double>(batch.GetDataSize()) / 1024;
  state.counters["recycle_effective"] =
      static_cast<double>(db->db().GetDBOptions().recycle_log_file_num);
  if (breakdown) {
    const rocksdb::PerfContext& perf = *rocksdb::get_perf_context();
    const rocksdb::IOStatsContext& io = *rocksdb::get_iostats_context();
    const auto per_write = [&](uint64_t nanos) {
      return static_cast<double>(nanos) / 1e3 / writes;
    };
    double total_us = 0;
    for (double us : write_us) total_us += us;
    state.counters["mean_write_us"] = total_us / writes;
    state.counters["flushwal_us"] = Micros(flush_time) / writes;
    state.counters["wal_us"] = per_write(perf.write_wal_time);
    state.counters["memtable_us"] = per_write(perf.write_memtable_time);
    state.counters["prepost_us"] = per_write(perf.write_pre_and_post_process_time);
    state.counters["delay_us"] = per_write(perf.write_delay_time);
    state.counters["sched_us"] = per_write(perf.write_scheduling_flushes_compactions_time);
    state.counters["thread_wait_us"] = per_write(perf.write_thread_wait_nanos);
    state.counters["db_mutex_us"] = per_write(perf.db_mutex_lock_nanos);
    state.counters["io_fsync_us"] = per_write(io.fsync_nanos);
    state.counters["io_write_us"] = per_write(io.write_nanos);
    state.counters["io_alloc_us"] = per_write(io.allocate_nanos);
    state.counters["io_rangesync_us"] = per_write(io.range_sync_nanos);
  }
  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kEnableCount);
}

// The variant and the baseline side by side in one process, one group to each in turn (the
// order alternating), so that both see the same moments of a shared, noisy disk. Counters: each
// one's p50/p99 of a write and mean time per group (build + write); speedup = the baseline's
// mean time per group / the variant's.
void Paired(benchmark::State& state, const Variant& variant) {
  const int group = static_cast<int>(state.range(0));
  Setup setups[2] = {LedgerdSetup(), LedgerdSetup()};
  variant.change(setups[1]);
  std::unique_ptr<JournalDb> dbs[2];
  DepositSource sources[2];
  for (int i = 0; i < 2; ++i) {
    if (std::string failed = OpenWarm(setups[i], sources[i], &dbs[i]); !failed.empty()) {
      state.SkipWithError(failed.c_str());
      return;
    }
  }
  rocksdb::WriteBatch batch;
  Clock::duration flush_time{};
  std::vector<double> write_us[2];
  Clock::duration cycle[2] = {};
  int first = 0;
  for (auto _ : state) {
    first ^= 1;
    for (int k = 0; k < 2; ++k) {
      const int i = first ^ k;
      rocksdb::SetPerfLevel(setups[i].perf_level);
      batch.Clear();
      const Clock::time_point start = Clock::now();
      sources[i].Fill(*dbs[i], group, setups[i].sort_keys, batch);
      const Clock::time_point built = Clock::now();
      rocksdb::Status written = dbs[i]->Commit(batch, &flush_time);
      const Clock::time_point end = Clock::now();
      write_us[i].push_back(Micros(end - built));
      cycle[i] += end - start;
      if (!written.ok()) {
        state.SkipWithError(absl::StrCat("write: ", written.ToString()).c_str());
        rocksdb::SetPerfLevel(rocksdb::PerfLevel::kEnableCount);
        return;
      }
    }
  }
  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kEnableCount);
  const double groups = static_cast<double>(state.iterations());
  state.counters["base_p50_us"] = Percentile(write_us[0], 0.50);
  state.counters["var_p50_us"] = Percentile(write_us[1], 0.50);
  state.counters["base_p99_us"] = Percentile(write_us[0], 0.99);
  state.counters["var_p99_us"] = Percentile(write_us[1], 0.99);
  state.counters["base_group_us"] = Micros(cycle[0]) / groups;
  state.counters["var_group_us"] = Micros(cycle[1]) / groups;
  state.counters["speedup"] = Micros(cycle[0]) / Micros(cycle[1]);
}

int RegisterAll() {
  for (const Variant& variant : Variants()) {
    for (const char* kind : {"BM_GroupCommit/", "BM_Breakdown/", "BM_Paired/"}) {
      const std::string name = kind;
      benchmark::RegisterBenchmark(absl::StrCat(kind, variant.name).c_str(),
                                   [&variant, name](benchmark::State& state) {
                                     if (name == "BM_Paired/") {
                                       Paired(state, variant);
                                     } else {
                                       GroupCommit(state, variant, name == "BM_Breakdown/");
                                     }
                                   })
          ->ArgName("G")
          ->Args({1})
          ->Args({16})
          ->Args({64})
          ->Args({256})
          ->Args({1024})
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
  return 0;
}

const int registered = RegisterAll();

}  // namespace
}  // namespace ledger

BENCHMARK_MAIN();
