// ShardMetrics under concurrency: senders apply messages inline (so the recording thread keeps
// changing) while a scraper collects. Built into the ThreadSanitizer run as well.
#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "metrics/ledger_metrics.h"
#include "shard/router.h"
#include "tests/shard/shard_test_util.h"

namespace ledger {
namespace {

using testing_util::RecordingCompletion;

TEST(ShardMetricsConcurrencyTest, CountsEveryMessageWhileScrapedByAnotherThread) {
  constexpr int kSenders = 3;
  constexpr int kPerSender = 3000;
  std::vector<ShardMetrics> metrics(2);
  RouterOptions options;
  options.num_shards = 2;
  options.shard.inline_execution = true;
  options.observers = {&metrics[0], &metrics[1]};
  auto router = Router::Create(options);
  ASSERT_TRUE(router.ok());
  (*router)->Start();

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> scrapes{0};
  std::thread scraper([&] {
    while (!stop.load()) {
      for (const ShardMetrics& shard : metrics) {
        prometheus::ClientMetric metric;
        shard.handler(Op::kDeposit).Collect(metric);
        shard.wait().Collect(metric);
        (void)shard.accounts();
      }
      scrapes.fetch_add(1);
    }
  });
  std::vector<std::thread> senders;
  for (int t = 0; t < kSenders; ++t) {
    senders.emplace_back([&, t] {
      for (int i = 0; i < kPerSender; ++i) {
        // Halfway, the first sender waits for two more scrapes, so that at least one whole
        // scrape runs while messages are being recorded however the threads are scheduled.
        if (t == 0 && i == kPerSender / 2) {
          const uint64_t seen = scrapes.load();
          while (scrapes.load() < seen + 2) std::this_thread::yield();
        }
        const std::string id = absl::StrCat("acct-", t, "-", i % 20);
        RecordingCompletion completion;
        Message message = MakeAccountCall(Op::kDeposit, id, 1, "", &completion);
        ASSERT_EQ((*router)->TrySend((*router)->ShardFor(id), std::move(message)),
                  SendOutcome::kAccepted);
        completion.WaitForReply();
      }
    });
  }
  for (std::thread& sender : senders) sender.join();
  (*router)->Stop();
  stop = true;
  scraper.join();

  uint64_t handled = 0;
  for (const ShardMetrics& shard : metrics) {
    prometheus::ClientMetric metric;
    shard.handler(Op::kDeposit).Collect(metric);
    handled += metric.histogram.sample_count;
    EXPECT_EQ(metric.histogram.bucket.back().cumulative_count, metric.histogram.sample_count);
  }
  EXPECT_EQ(handled, static_cast<uint64_t>(kSenders * kPerSender));
  EXPECT_GE(scrapes.load(), 2u);
}

}  // namespace
}  // namespace ledger
