// Defines `WatchFeed`, what serves ledger.v1.Ledger/Watch: every watcher's stream of committed
// operations, fed by one thread of its own that reads the log (storage/replicated_log.h's
// LogReader), never the commit path. A watcher has at most one message in flight: the feed
// reads its next part of the log only once gRPC has sent the last one, so a slow watcher costs
// the ledger nothing but its own place in the log, and one message of memory.
//
// The stream of one watcher: messages of whole log positions in commit order, each with the
// position to resume from; a watcher whose account filter matches nothing new gets that position
// alone about once a second. It ends only with an error (docs/api.md, "Watch"): the log dropped
// its place (OUT_OF_RANGE, POSITION_NOT_KEPT, naming the oldest position kept), the server stops
// (UNAVAILABLE, SHUTTING_DOWN) or stops leading (NOT_LEADER), the log cannot be read
// (STORAGE_READ_FAILED), or the client cancels.
#ifndef LEDGER_SERVER_WATCH_FEED_H_
#define LEDGER_SERVER_WATCH_FEED_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "base/annotated_mutex.h"
#include "base/option_bound.h"
#include "base/steady_wait.h"
#include "grpcpp/grpcpp.h"
#include "metrics/ledger_metrics.h"
#include "server/client_identity.h"
#include "server/leadership.h"
#include "server/watch_encoding.h"
#include "storage/ledger_storage.h"

namespace ledger {

// --max_watchers, --max_watchers_per_client and --max_watch_accounts: defaults and bounds.
inline constexpr int64_t kDefaultMaxWatchers = 64;
inline constexpr OptionBound kMaxWatchersBound{"--max_watchers", 0, 4096};
inline constexpr int64_t kDefaultMaxWatchersPerClient = 8;
inline constexpr OptionBound kMaxWatchersPerClientBound{"--max_watchers_per_client", 1, 4096};
inline constexpr int64_t kDefaultMaxWatchAccounts = 1000;
inline constexpr OptionBound kMaxWatchAccountsBound{"--max_watch_accounts", 1, 100000};

struct WatchOptions {
  // Watch streams served at once, server-wide and per client (ClientKeyOf of `client_by`);
  // beyond either a new one is refused RESOURCE_EXHAUSTED, WATCH_LIMIT.
  int64_t max_watchers = kDefaultMaxWatchers;
  int64_t max_watchers_per_client = kDefaultMaxWatchersPerClient;
  FairShareBy client_by = FairShareBy::kAddress;
  // Account ids one Watch may filter on (INVALID_ARGUMENT beyond).
  int64_t max_accounts = kDefaultMaxWatchAccounts;
  // Log payload read for one message: bounds a message (its events take about as much again
  // in protobuf) and so what a watcher holds while gRPC sends it.
  int64_t message_bytes = int64_t{64} << 10;
  // How often a watcher whose filter matches nothing new is sent its position.
  absl::Duration progress_interval = absl::Seconds(1);
  // How often the feed looks for new entries while watchers wait at the end of the log.
  absl::Duration poll_interval = absl::Milliseconds(2);
  // The newest positions kept encoded in memory for every watcher near the end of the log (the
  // tail, below); a watcher further behind reads the log itself.
  int64_t tail_bytes = int64_t{8} << 20;
};

// Thread-safe.
class WatchFeed {
 public:
  // `store` null: the server keeps no log (--durability=none) and refuses every Watch
  // NOT_DURABLE. `leadership` null on a single node. Neither owned; both outlive the feed, and
  // so must `metrics`.
  WatchFeed(storage::LedgerStorage* store, const Leadership* leadership, LedgerMetrics* metrics,
            const WatchOptions& options);
  ~WatchFeed();

  WatchFeed(const WatchFeed&) = delete;
  WatchFeed& operator=(const WatchFeed&) = delete;

  // A Watch call: refused at once (bad request, a bound, no log, not leading, stopping), or
  // registered with the feed. Returns its reactor.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Watch(grpc::CallbackServerContext* context,
                                                    const grpc::ByteBuffer& request);

  // Ends every stream UNAVAILABLE, SHUTTING_DOWN, refuses new ones the same way and stops the
  // feed's thread. Idempotent.
  void Stop();

  WatchStats stats() const;

 private:
  class Stream;
  struct Watcher;

  void Run();
  // Sends `watcher` its next message if there is one to send; true when it did any work.
  bool Feed(const std::shared_ptr<Watcher>& watcher, uint64_t committed, SteadyTime now);
  // with_balances: the first message, the watched accounts as of the applied position.
  bool SendBalances(const std::shared_ptr<Watcher>& watcher, uint64_t committed, SteadyTime now);
  // Starts the write of `message` (its events) with the position fields; clears nothing.
  void Send(Watcher& watcher, std::string& message, int events, uint64_t position,
            uint64_t committed, SteadyTime now);
  // Reads the log past the tail's end, up to `committed` (kTailReadBytes at a time), encoding
  // each position once for every watcher; drops the oldest beyond options_.tail_bytes. With no
  // watcher (`wanted` false) it lets the tail go.
  void ExtendTail(uint64_t committed, bool wanted);
  // What a watcher is told when its place in the log cannot be read: POSITION_NOT_KEPT after
  // `after` when the log dropped it, else STORAGE_READ_FAILED.
  grpc::Status ReadFailure(const absl::Status& failure, uint64_t after) const;
  // Finishes its stream with `status` and forgets it. Feed thread (or Stop, after it).
  void End(const std::shared_ptr<Watcher>& watcher, const grpc::Status& status);
  void Wake();

  storage::LedgerStorage* const store_;
  const Leadership* const leadership_;
  LedgerMetrics* const metrics_;
  const WatchOptions options_;

  // The newest positions, encoded (watch_encoding.h): the watchers near the end of the log read
  // them from here, so that each entry is read and decoded once, whatever their number. Feed
  // thread only.
  static constexpr int64_t kTailReadBytes = int64_t{1} << 20;
  std::deque<EncodedPosition> tail_;
  int64_t tail_bytes_ = 0;
  std::unique_ptr<storage::LogReader> tail_reader_;

  mutable ::ledger::Mutex mu_;
  std::condition_variable wake_;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::shared_ptr<Watcher>> watchers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int64_t> per_client_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;

  std::atomic<uint64_t> events_sent_{0};
  std::atomic<uint64_t> messages_sent_{0};
  std::atomic<uint64_t> max_lag_positions_{0};
  std::atomic<double> max_lag_seconds_{0};
};

}  // namespace ledger

#endif  // LEDGER_SERVER_WATCH_FEED_H_
