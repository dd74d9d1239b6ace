// Defines `ShardObserver`, the interface through which a shard reports what it measures, so that
// metrics/ can export it without shard/ knowing about Prometheus.
#ifndef LEDGER_SHARD_SHARD_OBSERVER_H_
#define LEDGER_SHARD_SHARD_OBSERVER_H_

#include <chrono>
#include <cstddef>

#include "shard/ledger_rules.h"

namespace ledger {

// One observer serves one shard. Implementations must be thread-safe: OnShed is called by any
// producer thread, every other method by the shard's own thread. Each call is on a hot path:
// no allocation, no lock that a scrape can hold for long.
class ShardObserver {
 public:
  virtual ~ShardObserver() = default;

  // A TrySend found the mailbox full; the message, of `operations` operations (a batch call's
  // part has several, any other message one), was shed. Any thread.
  virtual void OnShed(size_t operations) = 0;

  // The caller was gone when the message reached the handler; it was skipped. Shard thread.
  virtual void OnExpired() = 0;

  // A message was handled (whatever its outcome). `wait` runs from TrySend to handler start,
  // `handler` is the time the handler took. Shard thread.
  virtual void OnHandled(Op op, std::chrono::nanoseconds wait,
                         std::chrono::nanoseconds handler) = 0;

  // A handler failed unexpectedly and answered kInternal. Shard thread.
  virtual void OnInternalError() = 0;

  // A batch of `size` messages was decided; `accounts` is the shard's account count after it.
  // Shard thread. (Its write is the commit pipeline's, reported by a CommitObserver.)
  virtual void OnBatch(size_t size, size_t accounts) = 0;

  // The store failed a write or a lookup; the messages it concerned were answered kStorageFailed.
  // Shard thread.
  virtual void OnStorageError() = 0;
};

// Discards everything. Thread-safe.
class NullShardObserver final : public ShardObserver {
 public:
  void OnShed(size_t) override {}
  void OnExpired() override {}
  void OnHandled(Op, std::chrono::nanoseconds, std::chrono::nanoseconds) override {}
  void OnInternalError() override {}
  void OnBatch(size_t, size_t) override {}
  void OnStorageError() override {}
};

// The one observer of every shard that was given none. Thread-safe.
inline ShardObserver* DiscardingShardObserver() {
  static NullShardObserver observer;
  return &observer;
}

}  // namespace ledger

#endif  // LEDGER_SHARD_SHARD_OBSERVER_H_
