#include "shard/commit_pipeline.h"

#include <pthread.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace ledger {
namespace {

// A copy of `status` that shares no reference-counted payload with it. Failed batches move to the
// thread that rolls them back while the journal thread drops its own copy; Debian's Abseil is not
// built for ThreadSanitizer, so TSan cannot see a shared payload's atomic reference count and
// reports the last Unref's delete as a race with the other thread's reads.
absl::Status OwnCopy(const absl::Status& status) {
  return absl::Status(status.code(), status.message());
}

}  // namespace

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
  if (options_.completion_thread) {
    completer_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "ledger-complete");
      RunCompletions();
    });
  }
}

void CommitPipeline::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    work_.notify_one();
  }
  if (journal_.joinable()) journal_.join();
  {
    MutexLock lock(&completions_mu_);
    completions_stopping_ = true;
    completions_work_.notify_one();
  }
  if (completer_.joinable()) completer_.join();
}

bool CommitPipeline::Submit(std::unique_ptr<SealedBatch> batch) {
  LEDGER_CHECK(batch->shard >= 0 && batch->shard < options_.num_shards);
  LEDGER_CHECK(lanes_[batch->shard] != nullptr);
  MutexLock lock(&mu_);
  std::vector<std::unique_ptr<SealedBatch>>& failed = failed_[batch->shard];
  if (!failed.empty()) {
    batch->failure = OwnCopy(failed.front()->failure);
    failed.push_back(std::move(batch));
    return false;
  }
  queue_.push_back(std::move(batch));
  // Only a sleeping journal thread needs the wake-up; a busy one takes the queue when it is done.
  if (journal_waiting_) work_.notify_one();
  return true;
}

std::vector<std::unique_ptr<SealedBatch>> CommitPipeline::TakeFailed(int32_t shard) {
  LEDGER_CHECK(shard >= 0 && shard < options_.num_shards);
  MutexLock lock(&mu_);
  return std::exchange(failed_[shard], {});
}

void CommitPipeline::Run() {
  const size_t max_in_flight =
      static_cast<size_t>(std::max(1, options_.store->GroupWritesInFlight()));
  std::vector<const BatchWrite*> writes;
  for (;;) {
    std::unique_ptr<GroupWrite> finished;
    GroupWrite* started = nullptr;
    bool behind = false;  // Groups started earlier are still in flight.
    {
      MutexLock lock(&mu_);
      for (;;) {
        // Answers leave in the order their groups were started, whatever order writes end in.
        if (!in_flight_.empty() && in_flight_.front()->done) {
          finished = std::move(in_flight_.front());
          in_flight_.pop_front();
          break;
        }
        if (!queue_.empty() && in_flight_.size() < max_in_flight) {
          behind = !in_flight_.empty();
          in_flight_.push_back(std::make_unique<GroupWrite>());
          started = in_flight_.back().get();
          started->group.swap(queue_);
          break;
        }
        if (queue_.empty() && in_flight_.empty() && stopping_) return;  // Nothing left to write.
        journal_waiting_ = true;
        mu_.Wait(work_);
        journal_waiting_ = false;
      }
    }
    // Only this thread takes groups off in_flight_, so `started` lives until it is done.
    if (started != nullptr) {
      StartWrite(*started, behind, writes);
    } else {
      Finish(std::move(finished));
    }
  }
}

void CommitPipeline::StartWrite(GroupWrite& write, bool behind_writes_in_flight,
                                std::vector<const BatchWrite*>& writes) {
  writes.clear();
  for (const std::unique_ptr<SealedBatch>& batch : write.group) {
    if (!batch->write.empty()) writes.push_back(&batch->write);
    write.calls += batch->messages.size();
  }
  if (writes.empty()) {
    // A group of reads that only waited for earlier writes needs no write of its own; it is
    // answered once the writes before it are.
    MutexLock lock(&mu_);
    write.wrote = false;
    write.done = true;
    return;
  }
  write.start = SteadyClock::now();
  options_.store->StartGroupWrite(writes, behind_writes_in_flight,
                                  [this, &write](const absl::Status& outcome) {
                                    const SteadyClock::time_point end = SteadyClock::now();
                                    MutexLock lock(&mu_);
                                    write.outcome = OwnCopy(outcome);
                                    write.duration = end - write.start;
                                    write.done = true;
                                    if (journal_waiting_) work_.notify_one();
                                  });
}

void CommitPipeline::Finish(std::unique_ptr<GroupWrite> finished) {
  Observe(*finished);
  if (finished->outcome.ok()) {
    Release(finished->group, finished->calls);
    return;
  }
  // Every write started after the failed one fails too (LedgerStore::StartGroupWrite), and may
  // hold batches decided on top of it: they are failed with it, in the order they were started,
  // once each has its outcome.
  std::vector<std::unique_ptr<GroupWrite>> later;
  {
    MutexLock lock(&mu_);
    while (!in_flight_.empty()) {
      if (!in_flight_.front()->done) {
        journal_waiting_ = true;
        mu_.Wait(work_);
        journal_waiting_ = false;
        continue;
      }
      later.push_back(std::move(in_flight_.front()));
      in_flight_.pop_front();
    }
  }
  std::vector<std::unique_ptr<SealedBatch>> failed = std::move(finished->group);
  for (std::unique_ptr<GroupWrite>& write : later) {
    Observe(*write);
    for (std::unique_ptr<SealedBatch>& batch : write->group) failed.push_back(std::move(batch));
  }
  AwaitCompletions();
  for (CommitLane* lane : FailGroup(failed, finished->outcome)) lane->OnFailed();
}

void CommitPipeline::Observe(const GroupWrite& write) {
  if (!write.wrote || options_.observer == nullptr) return;
  options_.observer->OnGroupWrite(write.group.size(), write.calls, write.duration,
                                  write.outcome.ok());
}

void CommitPipeline::Release(std::vector<std::unique_ptr<SealedBatch>>& group, size_t calls) {
  if (options_.completion_thread) {
    MutexLock lock(&completions_mu_);
    // A small group with nothing ahead of it is answered here: waking the completion thread
    // would cost more than the answers, and the answers would wait for the wake-up. Only this
    // thread hands the completion thread work, so nothing can overtake these answers.
    const bool answer_here =
        calls <= kAnswerOnJournalThreadMax && completions_.empty() && !completing_;
    if (!answer_here) {
      for (std::unique_ptr<SealedBatch>& batch : group) completions_.push_back(std::move(batch));
      if (completer_waiting_) completions_work_.notify_one();
      return;
    }
  }
  for (std::unique_ptr<SealedBatch>& batch : group) {
    CommitLane* const lane = lanes_[batch->shard];
    lane->OnDurable(std::move(batch));
  }
}

void CommitPipeline::RunCompletions() {
  std::vector<std::unique_ptr<SealedBatch>> done;
  for (;;) {
    {
      MutexLock lock(&completions_mu_);
      completing_ = false;
      if (completions_.empty()) completions_idle_.notify_all();
      while (completions_.empty() && !completions_stopping_) {
        completer_waiting_ = true;
        completions_mu_.Wait(completions_work_);
        completer_waiting_ = false;
      }
      if (completions_.empty()) return;
      done.swap(completions_);
      completing_ = true;
    }
    for (std::unique_ptr<SealedBatch>& batch : done) {
      CommitLane* const lane = lanes_[batch->shard];
      lane->OnDurable(std::move(batch));
    }
    done.clear();
  }
}

void CommitPipeline::AwaitCompletions() {
  if (!options_.completion_thread) return;
  MutexLock lock(&completions_mu_);
  while (!completions_.empty() || completing_) completions_mu_.Wait(completions_idle_);
}

std::vector<CommitLane*> CommitPipeline::FailGroup(std::vector<std::unique_ptr<SealedBatch>>& group,
                                                   const absl::Status& failure) {
  std::vector<CommitLane*> to_tell;
  MutexLock lock(&mu_);
  for (std::unique_ptr<SealedBatch>& batch : group) {
    std::vector<std::unique_ptr<SealedBatch>>& failed = failed_[batch->shard];
    if (failed.empty()) to_tell.push_back(lanes_[batch->shard]);
    batch->failure = OwnCopy(failure);
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
      batch->failure = OwnCopy(failure);
      failed.push_back(std::move(batch));
    }
  }
  queue_.swap(kept);
  return to_tell;
}

}  // namespace ledger
