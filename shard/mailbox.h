// Defines `Mailbox<T>`, the bounded multi-producer, single-consumer queue in front of each shard,
// and `SendOutcome`, the result of a non-blocking send.
//
// The bound counts weight, not messages: each message carries a weight >= 1 (a shard gives a
// batch call's part of k operations the weight k), and the weights of the messages held may not
// exceed the capacity. A message takes one cell whatever its weight, so `capacity` cells always
// suffice.
//
// Design (why it is shaped like this):
// - Admission never blocks: `TrySend` is one compare-and-swap on the tail plus a store into the
//   claimed cell (Dmitry Vyukov's bounded queue, with a per-cell sequence number). A full mailbox
//   answers kFull at once, and the caller sheds the request.
// - The consumer sleeps on a futex (C++20 atomic wait) only when it finds the mailbox empty, and a
//   producer pays for a wake-up only when the consumer has announced that it sleeps. Under load
//   the consumer never sleeps and producers never make a system call. The "announce sleep,
//   re-check" and "publish, check sleeper" pairs are sequentially consistent, so no wake-up is
//   lost (see SleepUntilWoken).
// - Closing is one atomic OR of a bit into the tail, so the set of accepted messages is exactly
//   those that claimed a cell before the bit was set; the consumer drains every one of them
//   before `WaitAndDrain` reports the end.
// - Producer-side, consumer-side and sleep-state fields sit on separate cache lines.
#ifndef LEDGER_SHARD_MAILBOX_H_
#define LEDGER_SHARD_MAILBOX_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include "base/check.h"

namespace ledger {

// What happened to a `TrySend`.
enum class SendOutcome : uint8_t {
  kAccepted,  // queued; the consumer will receive it exactly once.
  kFull,      // the message's weight does not fit under `capacity`; nothing was queued.
  kClosed,    // the mailbox was closed; nothing was queued.
};

inline constexpr size_t kCacheLineBytes = 64;

// A bounded MPSC queue of `T` (default-constructible and movable).
// Thread-safe: `TrySend`, `Close`, `Depth`, `HeadPublished`, `capacity` and `closed` may be
// called from any thread; `TryDrain` and `WaitAndDrain` only by the single consumer. The consumer
// role may move between threads if they hand it over with acquire/release ordering (Shard does,
// with its drain token).
template <typename T>
class Mailbox {
 public:
  // Requires capacity >= 1.
  explicit Mailbox(size_t capacity)
      : capacity_(capacity),
        power_of_two_((capacity & (capacity - 1)) == 0),
        cells_(new Cell[capacity]) {
    LEDGER_CHECK(capacity >= 1);
    for (size_t i = 0; i < capacity; ++i) {
      cells_[i].sequence.store(FreeSequence(i), std::memory_order_relaxed);
    }
  }

  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  // Any thread. Never blocks. On kFull or kClosed `item` is left untouched, so the caller can
  // still answer it. `weight` (>= 1) is what the message counts against the capacity until its
  // cell is freed; a weight above the capacity never fits.
  [[nodiscard]] SendOutcome TrySend(T&& item, size_t weight = 1) {
    LEDGER_CHECK(weight >= 1);
    uint64_t tail = tail_.load(std::memory_order_relaxed);
    if ((tail & kClosedBit) != 0) return SendOutcome::kClosed;
    // Reserve the weight first: whoever holds a reservation finds a free cell, since every held
    // message weighs at least 1.
    if (weight_held_.fetch_add(weight, std::memory_order_acq_rel) + weight > capacity_) {
      weight_held_.fetch_sub(weight, std::memory_order_relaxed);
      return SendOutcome::kFull;
    }
    Cell* cell = nullptr;
    for (;;) {
      if ((tail & kClosedBit) != 0) {
        weight_held_.fetch_sub(weight, std::memory_order_relaxed);
        return SendOutcome::kClosed;
      }
      const uint64_t position = tail >> 1;
      cell = &cells_[Index(position)];
      const uint64_t sequence = cell->sequence.load(std::memory_order_acquire);
      const auto lag = static_cast<int64_t>(sequence - FreeSequence(position));
      if (lag == 0) {
        if (tail_.compare_exchange_weak(tail, tail + kPositionStep, std::memory_order_relaxed)) {
          cell->item = std::move(item);
          cell->weight = weight;
          // seq_cst, like the load of consumer_sleeping_ below: see SleepUntilWoken.
          cell->sequence.store(PublishedSequence(position), std::memory_order_seq_cst);
          break;
        }
      } else if (lag < 0) {
        // The cell still holds a message from the previous lap: its weight is being given back
        // by the thread freeing it (the reservation above saw it already released).
        weight_held_.fetch_sub(weight, std::memory_order_relaxed);
        return SendOutcome::kFull;
      } else {
        tail = tail_.load(std::memory_order_relaxed);  // Another producer took this cell.
      }
    }
    if (consumer_sleeping_.load(std::memory_order_seq_cst)) WakeConsumer();
    return SendOutcome::kAccepted;
  }

  // Consumer only. Moves up to `max_items` queued messages, oldest first, to the end of `out`,
  // stopping before a message that would take the weight moved above `max_weight` (the first
  // message is always moved). Never blocks; returns how many it moved.
  size_t TryDrain(std::vector<T>& out, size_t max_items, size_t max_weight = SIZE_MAX) {
    return Take(out, max_items, max_weight, /*free_cells=*/true);
  }

  // Consumer only. Like TryDrain, but the messages keep their cells: producers find the mailbox
  // full until FreeTaken gives the cells back. A shard with a journal uses it so that its
  // capacity bounds the messages it has accepted and not yet answered, not only those queued.
  size_t TryTake(std::vector<T>& out, size_t max_items, size_t max_weight = SIZE_MAX) {
    return Take(out, max_items, max_weight, /*free_cells=*/false);
  }

  // Frees the cells of the `count` oldest messages taken by TryTake and not yet freed. Any
  // thread, but one at a time and in order: the caller orders successive calls (a shard does,
  // through its pipeline's release/acquire handoffs).
  void FreeTaken(size_t count) {
    LEDGER_CHECK_LE(freed_position_ + count, head_.load(std::memory_order_acquire));
    size_t weight = 0;
    for (size_t i = 0; i < count; ++i, ++freed_position_) {
      Cell& cell = cells_[Index(freed_position_)];
      weight += cell.weight;
      cell.sequence.store(FreeSequence(freed_position_ + capacity_), std::memory_order_release);
    }
    // After the cells: a sender that reserves this weight finds its cell free.
    weight_held_.fetch_sub(weight, std::memory_order_acq_rel);
  }

  // Consumer only. Like TryDrain, but sleeps while the mailbox is open and empty. Returns 0 only
  // when the mailbox is closed and every accepted message has been drained.
  size_t WaitAndDrain(std::vector<T>& out, size_t max_items, size_t max_weight = SIZE_MAX) {
    LEDGER_CHECK(max_items >= 1);
    for (;;) {
      const size_t moved = TryDrain(out, max_items, max_weight);
      if (moved > 0) return moved;
      const uint64_t tail = tail_.load(std::memory_order_acquire);
      if ((tail >> 1) != head_position_) {
        // A producer claimed a cell and is about to fill it; that takes nanoseconds.
        std::this_thread::yield();
        continue;
      }
      if ((tail & kClosedBit) != 0) return 0;
      if (SpinUntilPublished()) continue;
      SleepUntilWoken();
    }
  }

  // Any thread; idempotent. After it returns every TrySend answers kClosed; messages accepted
  // before it stay queued and are still drained.
  void Close() {
    tail_.fetch_or(kClosedBit, std::memory_order_acq_rel);
    consumer_sleeping_.store(false, std::memory_order_relaxed);
    wake_epoch_.fetch_add(1, std::memory_order_release);
    wake_epoch_.notify_one();
  }

  // Any thread. Messages queued now; exact when quiescent, approximate under concurrent use.
  size_t Depth() const {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    const uint64_t claimed = tail_.load(std::memory_order_relaxed) >> 1;
    return claimed > head ? static_cast<size_t>(claimed - head) : 0;
  }

  // Any thread. True when the oldest message not yet drained is published. seq_cst, so that a
  // thread that gives up the consumer role and then checks this pairs with a producer that
  // publishes and then tries to take the role (see Shard::DrainWhileOwner): one of them sees the
  // other. False negatives are possible only while another thread is draining.
  bool HeadPublished() const {
    const uint64_t head = head_.load(std::memory_order_seq_cst);
    return cells_[Index(head)].sequence.load(std::memory_order_seq_cst) == PublishedSequence(head);
  }

  // Any thread. The weight of the messages held: queued, plus taken by TryTake and not yet
  // freed. Exact when quiescent.
  size_t WeightHeld() const { return weight_held_.load(std::memory_order_relaxed); }

  size_t capacity() const { return capacity_; }

  bool closed() const { return (tail_.load(std::memory_order_acquire) & kClosedBit) != 0; }

 private:
  // One cache line per cell where the item fits, so a producer filling one cell does not
  // invalidate the line the consumer is reading the previous one from.
  struct alignas(kCacheLineBytes) Cell {
    std::atomic<uint64_t> sequence{0};
    size_t weight = 1;  // Written by the producer that fills the cell, read by whoever frees it.
    T item{};
  };

  // The tail word holds (position << 1) | closed, so claiming a cell and closing are ordered by
  // one atomic variable.
  static constexpr uint64_t kClosedBit = 1;
  // About 2 microseconds of polling where a pause takes 20 ns (this project's AMD EPYC machines;
  // 10-140 cycles elsewhere): long enough to catch a burst's next message, short enough that an
  // idle shard does not steal a core from gRPC's threads.
  static constexpr int kSpinChecksBeforeSleep = 100;
  static constexpr uint64_t kPositionStep = 2;

  // A cell's sequence says whose turn it is: FreeSequence(p) when the producer of position p may
  // fill it, PublishedSequence(p) when the consumer may take it. Doubling keeps the two states
  // apart even for capacity 1, where position p + capacity is p + 1.
  static constexpr uint64_t FreeSequence(uint64_t position) { return 2 * position; }
  static constexpr uint64_t PublishedSequence(uint64_t position) { return 2 * position + 1; }

  size_t Index(uint64_t position) const {
    // The default capacities are powers of two; a mask saves a division on the hot path.
    return power_of_two_ ? static_cast<size_t>(position & (capacity_ - 1))
                         : static_cast<size_t>(position % capacity_);
  }

  // Polls the head cell for a short while before the consumer sleeps: a futex wait plus the
  // producer's wake-up costs microseconds on both sides, far more than a message that arrives
  // within the spin. True when a message was published meanwhile.
  bool SpinUntilPublished() const {
    const Cell& head = cells_[Index(head_position_)];
    for (int i = 0; i < kSpinChecksBeforeSleep; ++i) {
      if (head.sequence.load(std::memory_order_acquire) == PublishedSequence(head_position_)) {
        return true;
      }
      CpuRelax();
    }
    return false;
  }

  size_t Take(std::vector<T>& out, size_t max_items, size_t max_weight, bool free_cells) {
    uint64_t position = head_position_;
    size_t moved = 0;
    size_t weight = 0;
    while (moved < max_items) {
      Cell& cell = cells_[Index(position)];
      if (cell.sequence.load(std::memory_order_acquire) != PublishedSequence(position)) break;
      if (moved > 0 && weight + cell.weight > max_weight) break;
      weight += cell.weight;
      out.push_back(std::move(cell.item));
      if (free_cells) {
        cell.sequence.store(FreeSequence(position + capacity_), std::memory_order_release);
      }
      ++position;
      ++moved;
    }
    head_position_ = position;
    head_.store(position, std::memory_order_seq_cst);
    if (free_cells && weight > 0) weight_held_.fetch_sub(weight, std::memory_order_acq_rel);
    return moved;
  }

  static void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  // The store-buffering pair that prevents a lost wake-up: the consumer stores "sleeping" and
  // then loads the head cell; a producer stores the cell and then loads "sleeping". All four are
  // seq_cst, so at least one side sees the other's store: either the consumer finds the message
  // and stays awake, or the producer finds the sleeper and wakes it.
  void SleepUntilWoken() {
    const uint32_t epoch = wake_epoch_.load(std::memory_order_acquire);
    consumer_sleeping_.store(true, std::memory_order_seq_cst);
    const Cell& head = cells_[Index(head_position_)];
    const bool published =
        head.sequence.load(std::memory_order_seq_cst) == PublishedSequence(head_position_);
    if (published || tail_.load(std::memory_order_acquire) != (head_position_ << 1)) {
      // A message arrived, a producer is filling a cell, or the mailbox was closed.
      consumer_sleeping_.store(false, std::memory_order_relaxed);
      return;
    }
    wake_epoch_.wait(epoch, std::memory_order_acquire);
  }

  void WakeConsumer() {
    // Only the producer that flips the flag pays for the system call.
    if (consumer_sleeping_.exchange(false, std::memory_order_relaxed)) {
      wake_epoch_.fetch_add(1, std::memory_order_release);
      wake_epoch_.notify_one();
    }
  }

  const size_t capacity_;
  const bool power_of_two_;
  const std::unique_ptr<Cell[]> cells_;

  // Producer side: claimed positions and the closed bit; the weight held (reserved by senders,
  // given back when cells are freed).
  alignas(kCacheLineBytes) std::atomic<uint64_t> tail_{0};
  alignas(kCacheLineBytes) std::atomic<size_t> weight_held_{0};
  // Consumer side: the next position to drain (a private copy, and a published one for Depth).
  alignas(kCacheLineBytes) uint64_t head_position_ = 0;
  std::atomic<uint64_t> head_{0};
  // Sleep state: written by the consumer only when it runs out of work.
  alignas(kCacheLineBytes) std::atomic<bool> consumer_sleeping_{false};
  std::atomic<uint32_t> wake_epoch_{0};
  // TryTake's side: the oldest position taken and not yet freed.
  alignas(kCacheLineBytes) uint64_t freed_position_ = 0;
};

}  // namespace ledger

#endif  // LEDGER_SHARD_MAILBOX_H_
