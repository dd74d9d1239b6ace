// Defines `JournalCheckPool`, which loads a start-up's accounts in key order, each checked against
// its newest journal entry (AccountJournalCheck) on worker threads, a chunk of accounts at a time.
//
// Why: the check is a Seek into the journal per account, and with long histories the journal is
// the largest family (1M accounts and 20M operations: about 11 s of one core, most of a start).
// The accounts are read on the caller's thread and checked on the others', and an account is
// loaded only once its chunk has passed, in key order, so that a corrupt ledger is never served
// and nothing after the first disagreement is loaded.
#ifndef LEDGER_STORAGE_JOURNAL_CHECK_POOL_H_
#define LEDGER_STORAGE_JOURNAL_CHECK_POOL_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "shard/ledger_store.h"

namespace rocksdb {
class Iterator;
}  // namespace rocksdb

namespace ledger::storage {

// Accounts per chunk, and the most chunks read ahead of the loading (the memory the pool holds:
// about kChunkAccounts * kMaxChunksAhead account ids and states).
inline constexpr size_t kChunkAccounts = 4096;
inline constexpr size_t kMaxChunksAhead = 16;

// Add and Finish from one thread (the reader's); `load` runs on it too.
class JournalCheckPool {
 public:
  // An unpositioned iterator over the journal family, one per worker thread.
  using NewJournalIterator = std::function<std::unique_ptr<rocksdb::Iterator>()>;
  using Load = std::function<void(std::string account_id, const AccountState& state)>;

  // `threads` workers (at least 1); `new_journal` and `load` must outlive the pool.
  JournalCheckPool(NewJournalIterator new_journal, const Load& load, int threads);
  ~JournalCheckPool();

  JournalCheckPool(const JournalCheckPool&) = delete;
  JournalCheckPool& operator=(const JournalCheckPool&) = delete;

  // The next stored account, in key order. Returns the first disagreement found so far (DataLoss
  // naming the account; the caller stops reading), else OK.
  absl::Status Add(absl::string_view account_id, const AccountState& state);
  // After the last Add: checks and loads what is left; the first disagreement, else OK.
  absl::Status Finish();

 private:
  struct Chunk {
    std::vector<std::pair<std::string, AccountState>> accounts;
    bool first = false;  // The first chunk: its check also reads the journal before it.
    std::optional<std::string> next_account;  // The first account of the next chunk.
    bool done = false;
    absl::Status status;
    size_t passed = 0;  // Accounts that agree, from the first: all of them when status is OK.
  };
  void Submit(std::optional<std::string> next_account) ABSL_LOCKS_EXCLUDED(mu_);
  // Loads the checked chunks at the front, in order; with `wait_for_one`, waits for the oldest
  // first. Stops at the first disagreement (kept in failure_).
  void LoadChecked(bool wait_for_one) ABSL_LOCKS_EXCLUDED(mu_);
  void RunWorker();
  static void Check(rocksdb::Iterator& journal, Chunk& chunk);

  const NewJournalIterator new_journal_;
  const Load& load_;
  std::unique_ptr<Chunk> building_;  // The reader's.
  absl::Status failure_;             // The reader's: the first disagreement loaded up to.
  absl::Mutex mu_;
  std::deque<Chunk*> to_check_ ABSL_GUARDED_BY(mu_);
  // Every submitted chunk not yet loaded, in key order (the reader pops; workers mark done).
  std::deque<std::unique_ptr<Chunk>> submitted_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

// The workers a start-up's check uses: the machine's cores, at most 4.
int JournalCheckThreads();

}  // namespace ledger::storage

#endif  // LEDGER_STORAGE_JOURNAL_CHECK_POOL_H_
