// Defines `Router`, the fixed set of shards behind the front end, and the stable choice of the
// shard that owns an account.
#ifndef LEDGER_SHARD_ROUTER_H_
#define LEDGER_SHARD_ROUTER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "shard/shard.h"
#include "shard/transfer_coordinator.h"

namespace ledger {

inline constexpr int32_t kMinShards = 2;
inline constexpr int32_t kMaxShards = 1024;

inline constexpr OptionBound kShardsBound{"--shards", kMinShards, kMaxShards};

struct RouterOptions {
  int32_t num_shards = kMinShards;  // kMinShards to kMaxShards.
  // Applied to every shard; its `index` and `observer` are set per shard by the router.
  ShardOptions shard;
  // Empty, or one per shard (not owned; must outlive the router).
  std::vector<ShardObserver*> observers;
  // With a store (shard.store): what the commit pipeline reports. Not owned; may be null.
  CommitObserver* commit_observer = nullptr;
  // How transfers between shards are carried; `send` and `shard_for` are the router's own.
  TransferCoordinatorOptions transfers;
};

// Where tests reach inside the router's shards and coordinator: kept out of RouterOptions (see
// ShardTestHooks). Empty in production.
struct RouterTestHooks {
  ShardTestHooks shard;
  TransferTestHooks transfers;
};

// Thread-safe: ShardFor, TrySend and the accessors may be called from any thread; Start and Stop
// from one controlling thread. Stop is mandatory before destruction.
class Router {
 public:
  // InvalidArgument naming the first option out of range, else OK.
  static absl::Status ValidateOptions(const RouterOptions& options);

  // InvalidArgument when an option is out of range (see ValidateOptions).
  static absl::StatusOr<std::unique_ptr<Router>> Create(const RouterOptions& options);
  // The same, with test hooks for every shard and the transfer coordinator.
  static absl::StatusOr<std::unique_ptr<Router>> Create(const RouterOptions& options,
                                                        const RouterTestHooks& hooks);

  ~Router();

  // Before Start only: hands a recovered account to the shard that owns it under this router's
  // shard count (which may differ from the count it was written under).
  void LoadAccount(std::string account_id, AccountState state);

  // Before Start only: a transfer the store holds as pending goes to the shard of its source
  // account, and the coordinator resumes it once started.
  void LoadPendingTransfer(std::string transfer_id, const TransferRecord& record);

  // Starts the commit pipeline (with a store), every shard thread and the transfer courier.
  void Start();
  // Closes every mailbox: from now on TrySend answers kClosed. Any thread.
  void CloseMailboxes();
  // Every shard answers the messages it has not yet decided kShuttingDown, unapplied (see
  // Shard::AbandonUndecided). Any thread.
  void AbandonUndecided();
  // Closes every mailbox, then waits until each shard has applied (or, after AbandonUndecided,
  // refused) and answered everything it accepted, and joins the shard threads and then the
  // journal thread, then stops the transfer courier (transfers it has not finished stay pending
  // in the store, for the next start). Idempotent.
  void Stop();

  // The shard that owns `account_id`: ShardOf(account_id, num_shards()), see stable_hash.h.
  int32_t ShardFor(absl::string_view account_id) const;

  // Never blocks. See Shard::TrySend. Requires 0 <= shard < num_shards().
  [[nodiscard]] SendOutcome TrySend(int32_t shard, Message&& message);
  // A batch call's part for one shard, accepted or refused whole. See Shard::TrySendPart.
  [[nodiscard]] SendOutcome TrySendPart(int32_t shard, const Message* operations, size_t count);

  // Transfers: Submit a client's, and the figures of those in flight. Thread-safe.
  TransferCoordinator& transfers() { return *transfers_; }
  const TransferCoordinator& transfers() const { return *transfers_; }

  int32_t num_shards() const { return static_cast<int32_t>(shards_.size()); }
  const Shard& shard(int32_t index) const { return *shards_[index]; }

 private:
  Router(std::unique_ptr<CommitPipeline> pipeline, std::vector<std::unique_ptr<Shard>> shards,
         TransferCoordinatorOptions transfers, TransferTestHooks transfer_hooks);

  // With a store: the one write path of every shard. Declared first, so it outlives them.
  const std::unique_ptr<CommitPipeline> pipeline_;
  const std::vector<std::unique_ptr<Shard>> shards_;
  // Sends to the shards; stopped after them.
  std::unique_ptr<TransferCoordinator> transfers_;
};

}  // namespace ledger

#endif  // LEDGER_SHARD_ROUTER_H_
