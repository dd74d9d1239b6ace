// Test helper: a scratch directory holding a new, empty ledger, made as `ledgerd init` makes it
// (the server and the store only open existing ledgers).
#ifndef LEDGER_TESTS_SCRATCH_LEDGER_H_
#define LEDGER_TESTS_SCRATCH_LEDGER_H_

#include <string>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "storage/rocksdb_store.h"
#include "tests/scratch_dir.h"

namespace ledger::testing_util {

// Creates a new, empty ledger in `dir` (missing or empty); a failure fails the calling test. Its
// first log segment is `log_segment_bytes` (small: tests make hundreds of ledgers, some on tiny
// filesystems).
inline void InitLedger(const std::string& dir, int64_t log_segment_bytes = int64_t{1} << 20) {
  storage::StoreOptions options;
  options.data_dir = dir;
  options.log_segment_bytes = log_segment_bytes;
  absl::StatusOr<std::string> ledger_id = storage::RocksDbStore::Init(options);
  EXPECT_TRUE(ledger_id.ok()) << ledger_id.status();
}

// Not thread-safe.
class ScratchLedger : public ScratchDir {
 public:
  ScratchLedger() { InitLedger(path()); }
};

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_SCRATCH_LEDGER_H_
