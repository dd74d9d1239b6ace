#include "shard/mailbox.h"

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ledger {
namespace {

// Encodes (producer, sequence) in one value so a consumer can check order and uniqueness.
constexpr uint64_t Encode(uint64_t producer, uint64_t sequence) {
  return (producer << 32) | sequence;
}

TEST(MailboxTest, AcceptsExactlyCapacityMessagesThenReportsFull) {
  for (size_t capacity : {1, 3, 8, 1000}) {
    Mailbox<int> mailbox(capacity);
    for (size_t i = 0; i < capacity; ++i) {
      ASSERT_EQ(mailbox.TrySend(static_cast<int>(i)), SendOutcome::kAccepted) << capacity;
    }
    EXPECT_EQ(mailbox.TrySend(-1), SendOutcome::kFull) << capacity;
    EXPECT_EQ(mailbox.Depth(), capacity);
  }
}

TEST(MailboxTest, AcceptsAgainAfterADrainFreesSpace) {
  Mailbox<int> mailbox(2);
  ASSERT_EQ(mailbox.TrySend(1), SendOutcome::kAccepted);
  ASSERT_EQ(mailbox.TrySend(2), SendOutcome::kAccepted);
  ASSERT_EQ(mailbox.TrySend(3), SendOutcome::kFull);
  std::vector<int> out;
  EXPECT_EQ(mailbox.TryDrain(out, 1), 1u);
  EXPECT_EQ(mailbox.TrySend(4), SendOutcome::kAccepted);
  EXPECT_EQ(mailbox.TryDrain(out, 10), 2u);
  EXPECT_EQ(out, (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(mailbox.Depth(), 0u);
}

TEST(MailboxTest, DrainTakesAtMostMaxItemsOldestFirst) {
  Mailbox<int> mailbox(16);
  for (int i = 0; i < 10; ++i) ASSERT_EQ(mailbox.TrySend(int{i}), SendOutcome::kAccepted);
  std::vector<int> out;
  EXPECT_EQ(mailbox.TryDrain(out, 4), 4u);
  EXPECT_EQ(out, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(mailbox.Depth(), 6u);
}

TEST(MailboxTest, WrapsAroundManyTimesWithNonPowerOfTwoCapacity) {
  Mailbox<int> mailbox(3);
  std::vector<int> out;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(mailbox.TrySend(int{i}), SendOutcome::kAccepted);
    ASSERT_EQ(mailbox.TryDrain(out, 8), 1u);
    ASSERT_EQ(out.back(), i);
  }
}

TEST(MailboxTest, ClosedMailboxRefusesNewMessagesButDrainsAcceptedOnes) {
  Mailbox<int> mailbox(8);
  ASSERT_EQ(mailbox.TrySend(1), SendOutcome::kAccepted);
  ASSERT_EQ(mailbox.TrySend(2), SendOutcome::kAccepted);
  mailbox.Close();
  EXPECT_TRUE(mailbox.closed());
  EXPECT_EQ(mailbox.TrySend(3), SendOutcome::kClosed);
  std::vector<int> out;
  EXPECT_EQ(mailbox.WaitAndDrain(out, 8), 2u);
  EXPECT_EQ(mailbox.WaitAndDrain(out, 8), 0u);  // Closed and empty: the end, without blocking.
  EXPECT_EQ(out, (std::vector<int>{1, 2}));
}

TEST(MailboxTest, CloseWakesASleepingConsumer) {
  Mailbox<int> mailbox(4);
  std::atomic<size_t> drained{99};
  std::thread consumer([&] {
    std::vector<int> out;
    drained = mailbox.WaitAndDrain(out, 4);
  });
  mailbox.Close();
  consumer.join();
  EXPECT_EQ(drained.load(), 0u);
}

TEST(MailboxTest, SleepingConsumerWakesForEveryMessage) {
  // One message at a time, so the consumer goes to sleep between messages and every send must
  // wake it: a lost wake-up hangs this test.
  constexpr int kMessages = 20'000;
  Mailbox<int> mailbox(1);
  std::atomic<int> received{0};
  std::thread consumer([&] {
    std::vector<int> out;
    while (mailbox.WaitAndDrain(out, 1) > 0) received.fetch_add(1, std::memory_order_release);
  });
  for (int i = 0; i < kMessages; ++i) {
    while (mailbox.TrySend(int{i}) != SendOutcome::kAccepted) std::this_thread::yield();
    while (received.load(std::memory_order_acquire) <= i) std::this_thread::yield();
  }
  mailbox.Close();
  consumer.join();
  EXPECT_EQ(received.load(), kMessages);
}

TEST(MailboxTest, FourProducersDeliverEachMessageExactlyOnceInProducerOrder) {
  constexpr uint64_t kProducers = 4;
  constexpr uint64_t kPerProducer = 100'000;
  Mailbox<uint64_t> mailbox(1024);
  std::vector<uint64_t> next_expected(kProducers, 0);
  uint64_t received = 0;
  bool in_order = true;
  std::thread consumer([&] {
    std::vector<uint64_t> out;
    while (mailbox.WaitAndDrain(out, 256) > 0) {
      for (uint64_t value : out) {
        const uint64_t producer = value >> 32;
        const uint64_t sequence = value & 0xFFFFFFFF;
        if (sequence != next_expected[producer]) in_order = false;
        next_expected[producer] = sequence + 1;
        ++received;
      }
      out.clear();
    }
  });
  std::vector<std::thread> producers;
  for (uint64_t p = 0; p < kProducers; ++p) {
    producers.emplace_back([&mailbox, p] {
      for (uint64_t i = 0; i < kPerProducer; ++i) {
        while (mailbox.TrySend(Encode(p, i)) == SendOutcome::kFull) std::this_thread::yield();
      }
    });
  }
  for (std::thread& producer : producers) producer.join();
  mailbox.Close();
  consumer.join();
  EXPECT_TRUE(in_order);
  EXPECT_EQ(received, kProducers * kPerProducer);
  for (uint64_t p = 0; p < kProducers; ++p) EXPECT_EQ(next_expected[p], kPerProducer);
}

TEST(MailboxTest, EverythingAcceptedBeforeACloseRacingWithProducersIsDrained) {
  constexpr int kProducers = 3;
  Mailbox<int> mailbox(64);
  std::atomic<int> accepted{0};
  std::atomic<bool> go{false};
  int drained = 0;
  std::thread consumer([&] {
    std::vector<int> out;
    while (mailbox.WaitAndDrain(out, 16) > 0) {
      drained += static_cast<int>(out.size());
      out.clear();
    }
  });
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      for (;;) {
        const SendOutcome outcome = mailbox.TrySend(1);
        if (outcome == SendOutcome::kClosed) return;
        if (outcome == SendOutcome::kAccepted) accepted.fetch_add(1);
      }
    });
  }
  go = true;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  mailbox.Close();
  for (std::thread& producer : producers) producer.join();
  consumer.join();
  EXPECT_GT(accepted.load(), 0);
  EXPECT_EQ(drained, accepted.load());
}

}  // namespace
}  // namespace ledger
