#include "storage/journal_check_pool.h"

#include <pthread.h>

#include <algorithm>

#include "rocksdb/iterator.h"
#include "storage/account_journal_check.h"

namespace ledger::storage {

int JournalCheckThreads() {
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
}

JournalCheckPool::JournalCheckPool(NewJournalIterator new_journal, const Load& load, int threads)
    : new_journal_(std::move(new_journal)), load_(load), building_(std::make_unique<Chunk>()) {
  building_->first = true;
  for (int i = 0; i < std::max(threads, 1); ++i) workers_.emplace_back([this] { RunWorker(); });
}

JournalCheckPool::~JournalCheckPool() {
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
  }
  for (std::thread& worker : workers_) worker.join();
}

absl::Status JournalCheckPool::Add(absl::string_view account_id, const AccountState& state) {
  if (!failure_.ok()) return failure_;
  if (building_->accounts.size() == kChunkAccounts) {
    Submit(std::string(account_id));
    building_ = std::make_unique<Chunk>();
    size_t ahead = 0;
    {
      absl::MutexLock lock(&mu_);
      ahead = submitted_.size();
    }
    LoadChecked(/*wait_for_one=*/ahead > kMaxChunksAhead);
  }
  building_->accounts.emplace_back(std::string(account_id), state);
  return failure_;
}

absl::Status JournalCheckPool::Finish() {
  if (!failure_.ok()) return failure_;
  Submit(std::nullopt);
  building_ = nullptr;
  while (failure_.ok()) {
    {
      absl::MutexLock lock(&mu_);
      if (submitted_.empty()) break;
    }
    LoadChecked(/*wait_for_one=*/true);
  }
  return failure_;
}

void JournalCheckPool::Submit(std::optional<std::string> next_account) {
  building_->next_account = std::move(next_account);
  absl::MutexLock lock(&mu_);
  to_check_.push_back(building_.get());
  submitted_.push_back(std::move(building_));
}

void JournalCheckPool::LoadChecked(bool wait_for_one) {
  while (failure_.ok()) {
    Chunk* chunk = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (submitted_.empty()) return;
      chunk = submitted_.front().get();
      if (wait_for_one) {
        mu_.Await(absl::Condition(
            +[](Chunk* oldest) { return oldest->done; }, chunk));
      } else if (!chunk->done) {
        return;
      }
    }
    // Done: the worker no longer touches it, and only this thread pops.
    for (size_t i = 0; i < chunk->passed; ++i) {
      load_(std::move(chunk->accounts[i].first), chunk->accounts[i].second);
    }
    failure_ = chunk->status;
    absl::MutexLock lock(&mu_);
    submitted_.pop_front();
    wait_for_one = false;
  }
}

void JournalCheckPool::RunWorker() {
  pthread_setname_np(pthread_self(), "ledger-check");
  std::unique_ptr<rocksdb::Iterator> journal = new_journal_();
  while (true) {
    Chunk* chunk = nullptr;
    {
      absl::MutexLock lock(&mu_);
      const auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !to_check_.empty() || closing_;
      };
      mu_.Await(absl::Condition(&work));
      // Closing: after Finish nothing is left; after a disagreement, what is left goes unchecked.
      if (closing_) return;
      chunk = to_check_.front();
      to_check_.pop_front();
    }
    Check(*journal, *chunk);
    absl::MutexLock lock(&mu_);
    chunk->done = true;
  }
}

void JournalCheckPool::Check(rocksdb::Iterator& journal, Chunk& chunk) {
  AccountJournalCheck check(&journal);
  if (!chunk.first && !chunk.accounts.empty()) check.StartAt(chunk.accounts.front().first);
  for (const auto& [account_id, state] : chunk.accounts) {
    chunk.status = check.CheckNext(account_id, state);
    if (!chunk.status.ok()) return;
    ++chunk.passed;
  }
  if (chunk.next_account.has_value()) {
    chunk.status = check.Finish(absl::string_view(*chunk.next_account));
  } else {
    chunk.status = check.Finish();
  }
}

}  // namespace ledger::storage
