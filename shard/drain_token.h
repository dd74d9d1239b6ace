// Defines `DrainToken`, the right to apply a shard's messages, as a clang thread-safety
// capability: whoever holds it alone touches the shard's core and the mailbox's consumer side.
//
// It is not a mutex: nobody waits for it. A thread that fails TryAcquire leaves its work to the
// holder (see Shard::DrainWhileOwner). Annotating it lets `clang -Wthread-safety` reject code that
// touches state marked ABSL_GUARDED_BY(token) without having acquired the token.
#ifndef LEDGER_SHARD_DRAIN_TOKEN_H_
#define LEDGER_SHARD_DRAIN_TOKEN_H_

#include <atomic>

#include "absl/base/thread_annotations.h"
#include "shard/mailbox.h"

namespace ledger {

// Thread-safe.
class ABSL_LOCKABLE DrainToken {
 public:
  // True when this thread now holds the token; false when another thread does. seq_cst: pairs
  // with Mailbox::HeadPublished (see Shard::DrainWhileOwner).
  [[nodiscard]] bool TryAcquire() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    return !held_.exchange(true, std::memory_order_seq_cst);
  }

  // Only by the holder.
  void Release() ABSL_UNLOCK_FUNCTION() { held_.store(false, std::memory_order_seq_cst); }

  // Any thread; a snapshot that may be stale by the time it is used.
  bool IsHeld() const { return held_.load(std::memory_order_acquire); }

 private:
  alignas(kCacheLineBytes) std::atomic<bool> held_{false};
};

}  // namespace ledger

#endif  // LEDGER_SHARD_DRAIN_TOKEN_H_
