// ledger-bench: throughput of the hand-off from the front end to a shard, and of a shard applying
// deposits. Figures and the commands that produce them are in docs/benchmarks.md.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "metrics/ledger_metrics.h"
#include "metrics/log_histogram.h"
#include "prometheus/histogram.h"
#include "shard/mailbox.h"
#include "shard/message.h"
#include "shard/shard.h"
#include "storage/data_directory.h"

namespace ledger {
namespace {

constexpr size_t kCapacity = 1024;
constexpr size_t kDrainBatch = 256;
constexpr int64_t kMessagesPerIteration = 1 << 20;

// The baseline: a std::mutex around a std::deque of the same capacity, with a condition variable
// for the sleeping consumer. Thread-safe.
class MutexDequeQueue {
 public:
  explicit MutexDequeQueue(size_t capacity) : capacity_(capacity) {}

  bool TrySend(Message&& message) {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || queue_.size() >= capacity_) return false;
    queue_.push_back(std::move(message));
    if (consumer_waiting_) not_empty_.notify_one();
    return true;
  }

  size_t WaitAndDrain(std::vector<Message>& out, size_t max_items) {
    std::unique_lock<std::mutex> lock(mu_);
    consumer_waiting_ = true;
    not_empty_.wait(lock, [&] { return !queue_.empty() || closed_; });
    consumer_waiting_ = false;
    size_t moved = 0;
    while (moved < max_items && !queue_.empty()) {
      out.push_back(std::move(queue_.front()));
      queue_.pop_front();
      ++moved;
    }
    return moved;
  }

  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    not_empty_.notify_one();
  }

 private:
  const size_t capacity_;
  std::mutex mu_;
  std::condition_variable not_empty_;
  std::deque<Message> queue_;
  bool consumer_waiting_ = false;
  bool closed_ = false;
};

// Adapts Mailbox<Message> to the same shape as MutexDequeQueue.
class LockFreeMailbox {
 public:
  explicit LockFreeMailbox(size_t capacity) : mailbox_(capacity) {}
  bool TrySend(Message&& message) {
    return mailbox_.TrySend(std::move(message)) == SendOutcome::kAccepted;
  }
  size_t WaitAndDrain(std::vector<Message>& out, size_t max_items) {
    return mailbox_.WaitAndDrain(out, max_items);
  }
  void Close() { mailbox_.Close(); }

 private:
  Mailbox<Message> mailbox_;
};

// Producers TrySend (retrying while full, as a load test of the queue itself) and one consumer
// drains batches until it has seen every message. Reports messages per second.
template <typename Queue>
void BM_QueueTrySendDrain(benchmark::State& state) {
  const int producers = static_cast<int>(state.range(0));
  const int64_t per_producer = kMessagesPerIteration / producers;
  int64_t full_retries = 0;
  for (auto _ : state) {
    Queue queue(kCapacity);
    std::atomic<int64_t> sum{0};
    std::thread consumer([&] {
      std::vector<Message> batch;
      batch.reserve(kDrainBatch);
      int64_t local_sum = 0;
      int64_t received = 0;
      while (received < per_producer * producers) {
        received += static_cast<int64_t>(queue.WaitAndDrain(batch, kDrainBatch));
        for (const Message& message : batch) local_sum += message.Get<DepositCall>().amount;
        batch.clear();
      }
      sum = local_sum;
    });
    std::vector<std::thread> senders;
    senders.reserve(producers);
    std::atomic<int64_t> retries{0};
    for (int p = 0; p < producers; ++p) {
      senders.emplace_back([&] {
        int64_t local_retries = 0;
        for (int64_t i = 0; i < per_producer; ++i) {
          for (;;) {
            Message message = MakeAccountCall(Op::kDeposit, "", 1, "", nullptr);
            if (queue.TrySend(std::move(message))) break;
            ++local_retries;
            std::this_thread::yield();
          }
        }
        retries.fetch_add(local_retries);
      });
    }
    for (std::thread& sender : senders) sender.join();
    consumer.join();
    queue.Close();
    benchmark::DoNotOptimize(sum.load());
    full_retries += retries.load();
  }
  state.SetItemsProcessed(state.iterations() * per_producer * producers);
  state.counters["full_retries_per_msg"] =
      benchmark::Counter(static_cast<double>(full_retries) /
                         static_cast<double>(state.iterations() * per_producer * producers));
}

void BM_MailboxTrySendDrain(benchmark::State& state) {
  BM_QueueTrySendDrain<LockFreeMailbox>(state);
}
void BM_MailboxMutexDequeBaseline(benchmark::State& state) {
  BM_QueueTrySendDrain<MutexDequeQueue>(state);
}
BENCHMARK(BM_MailboxTrySendDrain)->ArgName("producers")->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_MailboxMutexDequeBaseline)->ArgName("producers")->Arg(1)->Arg(2)->UseRealTime();

// Counts completions; the benchmark waits until every message was answered. Thread-safe.
class CountingCompletion final : public Completion {
 public:
  bool CallerGone() const override { return false; }
  void Complete(const Reply& reply) override {
    balance_sum_ += reply.balance;  // Shard thread only.
    completed_.fetch_add(1, std::memory_order_release);
  }
  int64_t completed() const { return completed_.load(std::memory_order_acquire); }

 private:
  std::atomic<int64_t> completed_{0};
  int64_t balance_sum_ = 0;
};

// One producer sends deposits to one shard over `range(0)` accounts; the shard applies each
// (hash-map lookup, rules, store) and answers it. `range(1)` picks who applies: 0, the shard
// thread only (a cross-thread hand-off per message); 1, the sender itself when the shard is idle
// (inline execution, what ledgerd does). Reports deposits per second.
void BM_ShardApplyDeposits(benchmark::State& state) {
  const int64_t accounts = state.range(0);
  const bool inline_execution = state.range(1) != 0;
  const bool with_metrics = state.range(2) != 0;
  std::vector<std::string> ids;
  for (int64_t i = 0; i < accounts; ++i) ids.push_back(absl::StrCat("account-", i));
  constexpr int64_t kDeposits = 1 << 19;
  for (auto _ : state) {
    ShardOptions options;
    options.mailbox_capacity = kCapacity;
    options.inline_execution = inline_execution;
    ShardMetrics metrics;
    if (with_metrics) options.observer = &metrics;
    Shard shard(options);
    CountingCompletion completion;
    shard.Start();
    for (int64_t i = 0; i < kDeposits; ++i) {
      for (;;) {
        Message message = MakeAccountCall(Op::kDeposit, ids[i % accounts], 1, "", &completion);
        if (shard.TrySend(std::move(message)) == SendOutcome::kAccepted) break;
        std::this_thread::yield();
      }
    }
    while (completion.completed() < kDeposits) std::this_thread::yield();
    shard.Stop();
  }
  state.SetItemsProcessed(state.iterations() * kDeposits);
}
// range(2): 1 records every message in ShardMetrics (what ledgerd does), 0 discards.
BENCHMARK(BM_ShardApplyDeposits)
    ->ArgNames({"accounts", "inline", "metrics"})
    ->ArgsProduct({{1000, 100000}, {0, 1}, {0, 1}})
    ->UseRealTime();

// The cost of one latency observation: prometheus-cpp's Histogram (mutex, linear bucket search,
// CAS on a double) against LogHistogram (bit_width, two plain stores), same 28 bounds.
void BM_HistogramObservePrometheusCpp(benchmark::State& state) {
  prometheus::Histogram::BucketBoundaries bounds;
  for (size_t i = 0; i < LogHistogram::kBuckets; ++i) {
    bounds.push_back(LogHistogram::UpperBoundSeconds(i));
  }
  prometheus::Histogram histogram(bounds);
  int64_t nanos = 150;
  for (auto _ : state) {
    histogram.Observe(static_cast<double>(nanos) * 1e-9);
    nanos = nanos * 7 % 5'000'000 + 100;  // Wander over the buckets.
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_HistogramObservePrometheusCpp);

void BM_HistogramObserveLogHistogram(benchmark::State& state) {
  LogHistogram histogram;
  int64_t nanos = 150;
  for (auto _ : state) {
    histogram.Record(std::chrono::nanoseconds(nanos));
    nanos = nanos * 7 % 5'000'000 + 100;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_HistogramObserveLogHistogram);

// What checking that the data directory is still in place adds to every batch write: a few
// system calls (fstat, stat, faccessat), against a synced write of hundreds of microseconds.
void BM_DataDirectoryCheck(benchmark::State& state) {
  std::string dir = (std::filesystem::temp_directory_path() / "ledger-bench-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) {
    state.SkipWithError("mkdtemp failed");
    return;
  }
  std::ofstream(dir + "/CURRENT") << "MANIFEST-000001\n";
  absl::StatusOr<std::unique_ptr<storage::DataDirectoryGuard>> guard =
      storage::DataDirectoryGuard::Open(dir);
  if (!guard.ok()) {
    state.SkipWithError(std::string(guard.status().message()).c_str());
    return;
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize((*guard)->Check().ok());
  }
  state.SetItemsProcessed(state.iterations());
  guard->reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_DataDirectoryCheck);

}  // namespace
}  // namespace ledger

BENCHMARK_MAIN();
