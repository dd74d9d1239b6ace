// Defines `WatchRebuild`, ledger-loadtest --watch: a consumer of ledger.v1.Ledger/Watch that
// follows the stream through the whole run (from the newest position when the run starts, its
// accounts being new), rebuilds every account's balance from the operations it receives, and at
// the end checks the rebuilt balances against what Balance read, account by account. Across a
// restart of ledgerd (or a change of leader) it opens the stream again from the last position
// it processed, so the check also proves that a resumed stream skips and repeats nothing.
#ifndef LEDGER_CLIENT_LOADTEST_WATCH_H_
#define LEDGER_CLIENT_LOADTEST_WATCH_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "base/annotated_mutex.h"
#include "base/steady_wait.h"
#include "client/loadtest_driver.h"
#include "client/loadtest_outcome.h"
#include "grpcpp/grpcpp.h"

namespace ledger {

// Thread-safe.
class WatchRebuild {
 public:
  // How long Check waits for the stream to reach the balances read.
  static constexpr absl::Duration kCatchUpLimit = absl::Seconds(30);

  // Starts following the stream from the newest position; returns once the server has said
  // which (its first message) or `timeout` passed (then Check says INCOMPLETE). `driver` must
  // outlive this object.
  WatchRebuild(LoadtestDriver& driver, absl::Duration timeout);
  ~WatchRebuild();

  WatchRebuild(const WatchRebuild&) = delete;
  WatchRebuild& operator=(const WatchRebuild&) = delete;

  // Waits (at most kCatchUpLimit) until the balance rebuilt for every account in `touched`
  // equals `read` (index: account; nullopt: never opened, 0), then stops following the stream.
  WatchCheck Check(const std::vector<size_t>& touched,
                   const std::vector<std::optional<int64_t>>& read);

 private:
  void Follow();
  // Applies one message's events; false (with failure_ set) on an operation out of sequence.
  bool Apply(const v1::WatchResponse& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  LoadtestDriver& driver_;
  absl::flat_hash_map<std::string, size_t> index_;  // Account name to index in driver.names().
  ::ledger::Mutex mu_;
  std::vector<int64_t> balances_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> sequences_ ABSL_GUARDED_BY(mu_);  // 0: no operation seen.
  bool started_ ABSL_GUARDED_BY(mu_) = false;             // The first message came.
  uint64_t position_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t events_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reconnects_ ABSL_GUARDED_BY(mu_) = 0;
  std::string failure_ ABSL_GUARDED_BY(mu_);           // The stream ended for good, or went wrong.
  bool out_of_sequence_ ABSL_GUARDED_BY(mu_) = false;  // An operation repeated or skipped.
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  SteadyCondVar changed_;  // Notified after every change of what Check and the start wait for.
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace ledger

#endif  // LEDGER_CLIENT_LOADTEST_WATCH_H_
