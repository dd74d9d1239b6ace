#include "shard/router.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/stable_hash.h"

namespace ledger {

absl::Status Router::ValidateOptions(const RouterOptions& options) {
  if (absl::Status shards = CheckOptionBound(kShardsBound, options.num_shards); !shards.ok()) {
    return shards;
  }
  if (!options.observers.empty() &&
      options.observers.size() != static_cast<size_t>(options.num_shards)) {
    return absl::InvalidArgumentError(absl::StrCat("need one observer per shard; got ",
                                                   options.observers.size(), " for ",
                                                   options.num_shards, " shards"));
  }
  return ValidateShardOptions(options.shard);
}

absl::StatusOr<std::unique_ptr<Router>> Router::Create(const RouterOptions& options) {
  return Create(options, RouterTestHooks{});
}

absl::StatusOr<std::unique_ptr<Router>> Router::Create(const RouterOptions& options,
                                                       const RouterTestHooks& hooks) {
  if (absl::Status status = ValidateOptions(options); !status.ok()) return status;

  std::unique_ptr<CommitPipeline> pipeline;
  if (options.shard.store != nullptr) {
    pipeline =
        std::make_unique<CommitPipeline>(CommitPipelineOptions{.store = options.shard.store,
                                                               .observer = options.commit_observer,
                                                               .num_shards = options.num_shards});
  }
  std::vector<std::unique_ptr<Shard>> shards;
  shards.reserve(options.num_shards);
  for (int32_t i = 0; i < options.num_shards; ++i) {
    ShardOptions shard_options = options.shard;
    shard_options.index = i;
    shard_options.observer = options.observers.empty() ? nullptr : options.observers[i];
    shard_options.pipeline = pipeline.get();
    shards.push_back(std::make_unique<Shard>(std::move(shard_options), hooks.shard));
  }
  return std::unique_ptr<Router>(
      new Router(std::move(pipeline), std::move(shards), options.transfers, hooks.transfers));
}

Router::Router(std::unique_ptr<CommitPipeline> pipeline, std::vector<std::unique_ptr<Shard>> shards,
               TransferCoordinatorOptions transfers, TransferTestHooks transfer_hooks)
    : pipeline_(std::move(pipeline)), shards_(std::move(shards)) {
  transfers.send = [this](int32_t shard, Message&& message) {
    return TrySend(shard, std::move(message));
  };
  transfers.shard_for = [this](absl::string_view account_id) { return ShardFor(account_id); };
  transfers_ =
      std::make_unique<TransferCoordinator>(std::move(transfers), std::move(transfer_hooks));
}

Router::~Router() { Stop(); }

void Router::LoadAccount(std::string account_id, AccountState state) {
  const int32_t owner = ShardFor(account_id);
  shards_[owner]->LoadAccount(std::move(account_id), state);
}

void Router::LoadPendingTransfer(std::string transfer_id, const TransferRecord& record) {
  shards_[ShardFor(record.from)]->LoadPendingTransfer(transfer_id, record);
  transfers_->Resume(std::move(transfer_id), record);
}

void Router::Start() {
  if (pipeline_ != nullptr) pipeline_->Start();
  for (const auto& shard : shards_) shard->Start();
  transfers_->Start();
}

void Router::CloseMailboxes() {
  for (const auto& shard : shards_) shard->CloseMailbox();
}

void Router::AbandonUndecided() {
  for (const auto& shard : shards_) shard->AbandonUndecided();
}

void Router::Stop() {
  // Close every mailbox first so that no shard keeps accepting while another drains.
  CloseMailboxes();
  for (const auto& shard : shards_) shard->Stop();
  // Last: each shard's Stop waits for the pipeline to answer what the shard sealed.
  if (pipeline_ != nullptr) pipeline_->Stop();
  transfers_->Stop();
}

int32_t Router::ShardFor(absl::string_view account_id) const {
  return ShardOf(account_id, num_shards());
}

SendOutcome Router::TrySend(int32_t shard, Message&& message) {
  LEDGER_CHECK(shard >= 0 && shard < num_shards());
  return shards_[shard]->TrySend(std::move(message));
}

SendOutcome Router::TrySendPart(int32_t shard, const Message* operations, size_t count) {
  LEDGER_CHECK(shard >= 0 && shard < num_shards());
  return shards_[shard]->TrySendPart(operations, count);
}

}  // namespace ledger
