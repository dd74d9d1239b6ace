// Defines `TransferCoordinator`, which carries a transfer between shards: it sends the client's
// Transfer to the shard of the source account and, when the destination lives on another shard,
// the credit to the destination's shard once the debit is durable, and the settle back to the
// source's once the credit (or its refusal) is durable. No shard ever waits for another: each
// step is a message, sent with the non-blocking TrySend; a step refused by a full mailbox is
// retried later by the coordinator's courier thread, never dropped and never blocking a shard.
//
// The state machine, and what recovery does in each state: docs/architecture.md, "Transfers".
#ifndef LEDGER_SHARD_TRANSFER_COORDINATOR_H_
#define LEDGER_SHARD_TRANSFER_COORDINATOR_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/annotated_mutex.h"
#include "shard/ledger_store.h"
#include "shard/mailbox.h"
#include "shard/message.h"

namespace ledger {

// The durable steps of a transfer across shards, in order.
enum class TransferStep : uint8_t {
  kDebited,   // The source's debit and its pending record are durable.
  kCredited,  // The destination's credit (or its refusal) and its receipt are durable.
  kSettled,   // The source's final record (and refund, if any) is durable.
};
absl::string_view TransferStepName(TransferStep step);

struct TransferCoordinatorOptions {
  // Sends a message to a shard without blocking (Router::TrySend). Required.
  std::function<SendOutcome(int32_t shard, Message&& message)> send;
  // The shard that owns an account (Router::ShardFor). Required.
  std::function<int32_t(absl::string_view account_id)> shard_for;
  // A step refused by a full mailbox (or failed by storage) is sent again after this delay,
  // doubled on each further refusal up to max_retry_delay.
  absl::Duration retry_delay = absl::Milliseconds(1);
  absl::Duration max_retry_delay = absl::Milliseconds(100);
};

// Where tests and ledgerd's --debug_crash_after_transfer_step reach inside the coordinator: kept
// out of its options (see ShardTestHooks). Empty in production.
struct TransferTestHooks {
  // Runs on the thread that learns a step is durable, before the next step is sent; the crash
  // tests exit the process here.
  std::function<void(TransferStep step, absl::string_view transfer_id)> after_step;
};

// Thread-safe: Submit and Resume from any thread; Start and Stop from one controlling thread.
class TransferCoordinator {
 public:
  explicit TransferCoordinator(TransferCoordinatorOptions options);
  // The same, with test hooks.
  TransferCoordinator(TransferCoordinatorOptions options, TransferTestHooks hooks);
  ~TransferCoordinator();

  TransferCoordinator(const TransferCoordinator&) = delete;
  TransferCoordinator& operator=(const TransferCoordinator&) = delete;

  // Starts the courier thread, which delivers the steps (and the resumed transfers).
  void Start();
  // Stops the courier. A step not yet delivered stays as the store has it (pending, resumed at
  // the next start); a caller still waiting for it is answered kTransferPending. Steps finished
  // after this are handled the same way. Idempotent.
  void Stop();

  // From now on Submit answers kClosed: a shutdown lets the transfers in flight finish (see
  // Drain) before the shards close their mailboxes. Any thread.
  void StopAccepting() { accepting_.store(false, std::memory_order_release); }
  // Waits until no transfer is being carried, at most `timeout` (on the monotonic clock); true
  // when none is. Any thread.
  bool Drain(absl::Duration timeout) const;

  // Sends a client's transfer (ids and amount validated, from != to) to the shard of `from`; the
  // strings are copied. On kAccepted, `client` is completed exactly once with the transfer's
  // final reply (or kTransferPending when the server stops first); otherwise nothing was sent and
  // `client` will not be called.
  [[nodiscard]] SendOutcome Submit(absl::string_view transfer_id, absl::string_view from,
                                   absl::string_view to, int64_t amount, Completion* client);
  // For a batch call, which sends its operations to each shard as one part: makes the flight of
  // a client's transfer (as Submit) and returns its first message, for the caller to send to
  // ShardFor(from) in its part; nullopt when not accepting (as kClosed). When the part is
  // refused, the caller must hand the message back to Unsent; once the part is accepted, the
  // flight completes `client` exactly once as for Submit.
  std::optional<Message> Prepare(absl::string_view transfer_id, absl::string_view from,
                                 absl::string_view to, int64_t amount, Completion* client);
  // A message from Prepare that was never accepted by a shard: its flight ends, `client` is not
  // called.
  void Unsent(const Message& message);

  // Resumes a transfer that the store holds as pending (its debit is durable): its credit is
  // sent again, which the destination's receipt makes safe. Any time; delivered once started.
  void Resume(std::string transfer_id, const TransferRecord& record);

  // Transfers debited and neither credited nor refunded, as far as this process knows, and their
  // amount: the money in flight between shards.
  int64_t in_flight_count() const { return in_flight_count_.load(std::memory_order_relaxed); }
  int64_t in_flight_amount() const { return in_flight_amount_.load(std::memory_order_relaxed); }
  // Steps sent again after a full mailbox or a failed write.
  int64_t step_retries() const { return step_retries_.load(std::memory_order_relaxed); }
  // Transfers this process is carrying (submitted or resumed, not yet answered or parked).
  int64_t active() const { return active_.load(std::memory_order_relaxed); }

 private:
  class Flight;
  friend class Flight;

  // A flight's step is durable (or refused): what comes next.
  void OnStepDone(Flight* flight, const Reply& reply);
  // Hands a flight to the courier for its next step, now or after its retry delay.
  void Enqueue(Flight* flight, bool retry);
  void Deliver(Flight* flight);
  // The server stops before the flight finished: its caller learns it is pending.
  void Park(Flight* flight);
  void Finish(Flight* flight, const Reply& reply);
  // A debit is durable (the money left its source's balance), or its credit or refund is (the
  // money is on a balance again): the in-flight figures.
  void MoneyLeft(int64_t amount);
  void MoneyLanded(int64_t amount);
  void RunCourier();

  const TransferCoordinatorOptions options_;
  const TransferTestHooks hooks_;
  std::atomic<int64_t> in_flight_count_{0};
  std::atomic<int64_t> in_flight_amount_{0};
  std::atomic<int64_t> step_retries_{0};
  std::atomic<int64_t> active_{0};
  std::atomic<bool> accepting_{true};

  struct Delayed {
    SteadyClock::time_point due;
    Flight* flight;
  };
  Mutex mu_;
  std::condition_variable work_;
  std::deque<Flight*> ready_ ABSL_GUARDED_BY(mu_);
  std::vector<Delayed> delayed_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ = false;
  std::thread courier_;
};

}  // namespace ledger

#endif  // LEDGER_SHARD_TRANSFER_COORDINATOR_H_
