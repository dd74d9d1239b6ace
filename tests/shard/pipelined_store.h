// Test helper: a LedgerStore whose group writes end later, up to a number of them in flight at
// once, as a cluster replica's do (RocksDbStore::StartGroupWrite over RaftLog::Propose): what the
// commit pipeline's writes in flight are tested with. Each write is the inner store's WriteGroup
// (so a MemoryStore's failure injection applies), done when the write finishes: when the test
// calls Finish, or, with `auto_finish`, on the store's own thread as soon as it can.
//
// It keeps StartGroupWrite's contract as RaftLog does: writes finish in the order they started;
// once one fails the store is poisoned, and every write not finished yet fails without reaching
// the inner store, as does a write started behind writes in flight; a write started behind none
// repairs the store and goes on.
#ifndef LEDGER_TESTS_SHARD_PIPELINED_STORE_H_
#define LEDGER_TESTS_SHARD_PIPELINED_STORE_H_

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "tests/shard/forwarding_store.h"

namespace ledger::testing_util {

// Thread-safe.
class PipelinedStore final : public ForwardingStore {
 public:
  PipelinedStore(LedgerStore* inner, int in_flight, bool auto_finish)
      : ForwardingStore(inner), in_flight_(in_flight) {
    if (auto_finish) {
      finisher_ = std::thread([this] {
        for (;;) {
          {
            std::unique_lock<std::mutex> lock(mu_);
            started_.wait(lock, [this] { return !pending_.empty() || stopping_; });
            if (pending_.empty()) return;
          }
          Finish();
        }
      });
    }
  }
  ~PipelinedStore() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    started_.notify_all();
    if (finisher_.joinable()) finisher_.join();
  }

  int GroupWritesInFlight() const override { return in_flight_; }

  void StartGroupWrite(absl::Span<const BatchWrite* const> batches, bool behind_writes_in_flight,
                       GroupWritten written) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (poisoned_ && behind_writes_in_flight) {
        ++refused_;
        // Outside the lock, as a store may: below.
      } else {
        poisoned_ = false;
        pending_.push_back(Pending{.batches = {}, .written = std::move(written)});
        for (const BatchWrite* batch : batches) pending_.back().batches.push_back(*batch);
        most_pending_ = std::max(most_pending_, pending_.size());
        started_.notify_all();
        return;
      }
    }
    written(absl::UnavailableError("refused: an earlier write failed and is not handled yet"));
  }

  // Finishes the oldest write in flight (none: nothing happens); its outcome goes to the caller
  // of StartGroupWrite before this returns.
  void Finish() {
    Pending finishing;
    bool poisoned = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (pending_.empty()) return;
      finishing = std::move(pending_.front());
      pending_.pop_front();
      poisoned = poisoned_;
    }
    absl::Status outcome =
        poisoned ? absl::UnavailableError("an earlier write in flight failed") : Write(finishing);
    if (!outcome.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      poisoned_ = true;
    }
    finishing.written(std::move(outcome));
  }

  // Writes started and not finished.
  size_t pending() const {
    std::lock_guard<std::mutex> lock(mu_);
    return pending_.size();
  }
  // The most writes that were in flight at once.
  size_t most_pending() const {
    std::lock_guard<std::mutex> lock(mu_);
    return most_pending_;
  }
  // Writes refused at once: started behind writes in flight after one failed.
  int refused() const {
    std::lock_guard<std::mutex> lock(mu_);
    return refused_;
  }

 private:
  struct Pending {
    std::vector<BatchWrite> batches;
    GroupWritten written;
  };

  absl::Status Write(const Pending& pending) {
    std::vector<const BatchWrite*> group;
    for (const BatchWrite& batch : pending.batches) group.push_back(&batch);
    return inner()->WriteGroup(group);
  }

  const int in_flight_;
  mutable std::mutex mu_;
  std::condition_variable started_;
  std::deque<Pending> pending_;
  size_t most_pending_ = 0;
  int refused_ = 0;
  bool poisoned_ = false;
  bool stopping_ = false;
  std::thread finisher_;
};

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_SHARD_PIPELINED_STORE_H_
