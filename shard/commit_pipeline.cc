#include "shard/commit_pipeline.h"

#include <pthread.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "shard/check.h"

namespace ledger {

CommitPipeline::CommitPipeline(CommitPipelineOptions options)
    : options_(options), lanes_(options.num_shards, nullptr), failed_(options.num_shards) {
  LEDGER_CHECK(options_.store != nullptr);
  LEDGER_CHECK_GT(options_.num_shards, 0);
}

CommitPipeline::~CommitPipeline() { Stop(); }

void CommitPipeline::SetLane(int32_t shard, CommitLane* lane) {
  LEDGER_CHECK(!journal_.joinable());
  LEDGER_CHECK(shard >= 0 && shard < options_.num_shards);
  lanes_[shard] = lane;
}

void CommitPipeline::Start() {
  LEDGER_CHECK(!journal_.joinable());
  journal_ = std::thread([this] {
    // Named for top -H, perf and gdb (at most 15 characters).
    pthread_setname_np(pthread_self(), "ledger-journal");
    Run();
  });
}

void CommitPipeline::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    work_.Signal();
  }
  if (journal_.joinable()) journal_.join();
}

bool CommitPipeline::Submit(std::unique_ptr<SealedBatch> batch) {
  LEDGER_CHECK(batch->shard >= 0 && batch->shard < options_.num_shards);
  LEDGER_CHECK(lanes_[batch->shard] != nullptr);
  absl::MutexLock lock(&mu_);
  std::vector<std::unique_ptr<SealedBatch>>& failed = failed_[batch->shard];
  if (!failed.empty()) {
    batch->failure = failed.front()->failure;
    failed.push_back(std::move(batch));
    return false;
  }
  queue_.push_back(std::move(batch));
  // Only a sleeping journal thread needs the wake-up; a busy one takes the queue when it is done.
  if (journal_waiting_) work_.Signal();
  return true;
}

std::vector<std::unique_ptr<SealedBatch>> CommitPipeline::TakeFailed(int32_t shard) {
  LEDGER_CHECK(shard >= 0 && shard < options_.num_shards);
  absl::MutexLock lock(&mu_);
  return std::exchange(failed_[shard], {});
}

void CommitPipeline::Run() {
  std::vector<std::unique_ptr<SealedBatch>> group;
  std::vector<const BatchWrite*> writes;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      while (queue_.empty() && !stopping_) {
        journal_waiting_ = true;
        work_.Wait(&mu_);
        journal_waiting_ = false;
      }
      if (queue_.empty()) return;  // Stopping, and nothing is left to write.
      group.swap(queue_);
    }
    writes.clear();
    size_t calls = 0;
    for (const std::unique_ptr<SealedBatch>& batch : group) {
      if (!batch->write.empty()) writes.push_back(&batch->write);
      calls += batch->messages.size();
    }
    absl::Status written = absl::OkStatus();
    // A group of reads that only waited for earlier writes needs no write of its own.
    if (!writes.empty()) {
      const auto start = SteadyClock::now();
      written = options_.store->WriteGroup(writes);
      if (options_.observer != nullptr) {
        options_.observer->OnGroupWrite(group.size(), calls, SteadyClock::now() - start,
                                        written.ok());
      }
    }
    if (written.ok()) {
      for (std::unique_ptr<SealedBatch>& batch : group) {
        lanes_[batch->shard]->OnDurable(std::move(batch));
      }
    } else {
      for (CommitLane* lane : FailGroup(group, written)) lane->OnFailed();
    }
    group.clear();
  }
}

std::vector<CommitLane*> CommitPipeline::FailGroup(
    std::vector<std::unique_ptr<SealedBatch>>& group, const absl::Status& failure) {
  std::vector<CommitLane*> to_tell;
  absl::MutexLock lock(&mu_);
  for (std::unique_ptr<SealedBatch>& batch : group) {
    std::vector<std::unique_ptr<SealedBatch>>& failed = failed_[batch->shard];
    if (failed.empty()) to_tell.push_back(lanes_[batch->shard]);
    batch->failure = failure;
    failed.push_back(std::move(batch));
  }
  // Queued batches of those lanes were decided on top of the failed ones: they fail too, and
  // stay in sequence order behind them. Other lanes' batches keep their place.
  std::vector<std::unique_ptr<SealedBatch>> kept;
  for (std::unique_ptr<SealedBatch>& batch : queue_) {
    std::vector<std::unique_ptr<SealedBatch>>& failed = failed_[batch->shard];
    if (failed.empty()) {
      kept.push_back(std::move(batch));
    } else {
      batch->failure = failure;
      failed.push_back(std::move(batch));
    }
  }
  queue_.swap(kept);
  return to_tell;
}

}  // namespace ledger
