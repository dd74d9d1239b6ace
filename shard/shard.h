// Defines `Shard`, one account actor: a bounded mailbox, the accounts it alone owns, and the
// thread that applies its messages one at a time.
#ifndef LEDGER_SHARD_SHARD_H_
#define LEDGER_SHARD_SHARD_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "shard/ledger_rules.h"
#include "shard/mailbox.h"
#include "shard/message.h"
#include "shard/shard_observer.h"

namespace ledger {

// Bounds checked at start-up (TigerBeetle style: every queue and batch has a named limit).
inline constexpr size_t kMailboxCapacityMax = size_t{1} << 24;
inline constexpr size_t kMaxBatchMax = 65536;
inline constexpr size_t kDefaultMaxBatch = 256;

struct ShardOptions {
  int32_t index = 0;
  size_t mailbox_capacity = 1024;       // 1 to kMailboxCapacityMax.
  size_t max_batch = kDefaultMaxBatch;  // Messages drained per wake-up: 1 to kMaxBatchMax.
  LedgerPolicy policy;
  // Fault injection: slows every handler by this much. Zero in production.
  absl::Duration debug_handler_delay = absl::ZeroDuration();
  // Test-only: runs on the shard thread before each handler; may block (to hold the shard) or
  // throw (to simulate a handler fault). Empty in production.
  std::function<void(const Message&)> test_before_handle;
  // Not owned; must outlive the shard. Null discards everything.
  ShardObserver* observer = nullptr;
};

// InvalidArgument naming the first option out of range, else OK.
absl::Status ValidateShardOptions(const ShardOptions& options);

// Thread-safe: TrySend, MailboxDepth and the accessors may be called from any thread; Start and
// Stop from one controlling thread. The accounts are owned by the shard thread; not thread-safe.
//
// Lifecycle: construct, Start, any number of TrySend, Stop (mandatory before destruction).
// Stop closes the mailbox, lets the shard thread apply and answer every message accepted before
// it, and joins the thread.
class Shard {
 public:
  // Requires ValidateShardOptions(options).ok().
  explicit Shard(ShardOptions options);
  ~Shard();

  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  void Start();
  // Any thread; idempotent. From now on TrySend answers kClosed; accepted messages still run.
  void CloseMailbox() { mailbox_.Close(); }
  // Closes the mailbox, waits until every accepted message is applied and answered, joins.
  void Stop();

  // Any thread; never blocks. Stamps `message.enqueued_at`. On kFull (counted as shed) or kClosed
  // the message was not queued and its completion will not be called: the caller answers it.
  [[nodiscard]] SendOutcome TrySend(Message&& message);

  size_t MailboxDepth() const { return mailbox_.Depth(); }
  size_t mailbox_capacity() const { return mailbox_.capacity(); }
  int32_t index() const { return options_.index; }

 private:
  void Run();
  void ProcessBatch();
  Reply Handle(const Message& message);
  Reply ApplyToAccounts(const Message& message);

  const ShardOptions options_;
  ShardObserver* const observer_;
  Mailbox<Message> mailbox_;
  std::thread thread_;
  bool started_ = false;
  bool stopped_ = false;

  // Owned by the shard thread.
  absl::flat_hash_map<std::string, int64_t> balances_;
  std::vector<Message> batch_;
  std::vector<Reply> replies_;
};

}  // namespace ledger

#endif  // LEDGER_SHARD_SHARD_H_
