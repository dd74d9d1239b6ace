#include "shard/shard.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace ledger {

absl::Status ValidateShardOptions(const ShardOptions& options) {
  // Sizes above int64 are out of every bound.
  for (const auto& [bound, value] : {std::pair{kMailboxCapacityBound, options.mailbox_capacity},
                                     std::pair{kMaxBatchBound, options.max_batch}}) {
    const auto signed_value = static_cast<int64_t>(
        std::min<size_t>(value, static_cast<size_t>(std::numeric_limits<int64_t>::max())));
    if (absl::Status status = CheckOptionBound(bound, signed_value); !status.ok()) return status;
  }
  if (absl::Status status = CheckOptionBound(kOverdraftLimitBound, options.policy.overdraft_limit);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = CheckDurationAtLeast("--debug_handler_delay",
                                                 options.debug_handler_delay, absl::ZeroDuration());
      !status.ok()) {
    return status;
  }
  if (options.debug_handler_delay > absl::ZeroDuration() && options.inline_execution) {
    return absl::InvalidArgumentError(
        "a debug handler delay needs inline execution off: it must not sleep on a sender's thread");
  }
  if (options.pipeline != nullptr && options.store == nullptr) {
    return absl::InvalidArgumentError("a commit pipeline needs a store");
  }
  if (options.idempotency_ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("idempotency TTL must be greater than zero");
  }
  return absl::OkStatus();
}

namespace {

ShardCoreOptions CoreOptions(const ShardOptions& options, ShardObserver* observer) {
  return ShardCoreOptions{.index = options.index,
                          .max_batch = options.max_batch,
                          .policy = options.policy,
                          .observer = observer,
                          .store = options.store,
                          .idempotency_ttl = options.idempotency_ttl,
                          .clock = options.clock,
                          .steady_clock = nullptr,
                          .debug_handler_delay = options.debug_handler_delay};
}

}  // namespace

namespace {

std::unique_ptr<CommitPipeline> OwnPipeline(const ShardOptions& options) {
  if (options.store == nullptr || options.pipeline != nullptr) return nullptr;
  return std::make_unique<CommitPipeline>(CommitPipelineOptions{
      .store = options.store, .observer = nullptr, .num_shards = options.index + 1});
}

}  // namespace

Shard::Shard(ShardOptions options) : Shard(std::move(options), ShardTestHooks{}) {}

Shard::Shard(ShardOptions options, ShardTestHooks hooks)
    : options_(std::move(options)),
      observer_(options_.observer != nullptr ? options_.observer : DiscardingShardObserver()),
      own_pipeline_(OwnPipeline(options_)),
      pipeline_(own_pipeline_ != nullptr ? own_pipeline_.get() : options_.pipeline),
      mailbox_(options_.mailbox_capacity),
      core_(CoreOptions(options_, observer_), std::move(hooks)) {
  LEDGER_CHECK(ValidateShardOptions(options_).ok());
  if (pipeline_ != nullptr) pipeline_->SetLane(options_.index, this);
}

void Shard::LoadAccount(std::string account_id, AccountState state) {
  LEDGER_CHECK(!started_);
  // Before Start nobody else can hold the token; taking it says so to the thread-safety analysis.
  LEDGER_CHECK(drain_.TryAcquire());
  core_.LoadAccount(std::move(account_id), state);
  drain_.Release();
}

void Shard::LoadPendingTransfer(const std::string& transfer_id, const TransferRecord& record) {
  LEDGER_CHECK(!started_);
  LEDGER_CHECK(drain_.TryAcquire());
  core_.LoadPendingTransfer(transfer_id, record);
  drain_.Release();
}

Shard::~Shard() {
  // Destroying a started shard without Stop would drop accepted messages unanswered.
  LEDGER_CHECK(!started_ || stopped_);
}

void Shard::Start() {
  LEDGER_CHECK(!started_);
  started_ = true;
  if (own_pipeline_ != nullptr) own_pipeline_->Start();
  // The dedicated loop sleeps in the mailbox, where nothing but a message wakes it; a shard with
  // a pipeline must also wake for a failed write, so it always sleeps on its handoff word.
  const bool handoff = options_.inline_execution || pipeline_ != nullptr;
  thread_ = std::thread([this, handoff] {
    // Named for top -H, perf and gdb (at most 15 characters).
    const std::string name = absl::StrCat("ledger-shard-", options_.index);
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
    if (handoff) {
      RunHandoffLoop();
    } else {
      Run();
    }
  });
}

void Shard::Stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  mailbox_.Close();
  stopping_.store(true, std::memory_order_release);
  HandOffToShardThread();
  thread_.join();
  // A sender may still hold the token for messages it accepted before the close; it decides them
  // before it lets go, and whatever it leaves is taken here. Then the pipeline answers what was
  // sealed (it writes while this waits).
  for (;;) {
    if (drain_.TryAcquire()) {
      const Turn turn = TakeTurn(options_.max_batch, /*may_block=*/true);
      const bool done = turn == Turn::kIdle && Quiescent();
      drain_.Release();
      if (done) break;
      if (turn != Turn::kIdle) continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (own_pipeline_ != nullptr) own_pipeline_->Stop();
}

bool Shard::Quiescent() {
  return mailbox_.Depth() == 0 && core_.batch().empty() &&
         !recovery_pending_.load(std::memory_order_acquire) &&
         (pipeline_ == nullptr ||
          finished_through_.load(std::memory_order_acquire) == core_.last_sealed());
}

SendOutcome Shard::TrySend(Message&& message) {
  LEDGER_CHECK(message.completion != nullptr && !message.is_part());
  return Send(std::move(message), 1);
}

SendOutcome Shard::TrySendPart(const Message* operations, size_t count) {
  LEDGER_CHECK(count >= 1 && count <= UINT32_MAX);
  Message carrier{.kind =
                      BatchPart{.operations = operations, .size = static_cast<uint32_t>(count)}};
  return Send(std::move(carrier), count);
}

SendOutcome Shard::Send(Message&& message, size_t operations) {
  message.enqueued_at = SteadyClock::now();
  const SendOutcome outcome = mailbox_.TrySend(std::move(message), operations);
  if (outcome == SendOutcome::kFull) observer_->OnShed(operations);
  if (outcome != SendOutcome::kAccepted) return outcome;
  if (options_.inline_execution) {
    if (DrainWhileOwner(kInlineBatchesMax, std::min(kInlineBatchMax, options_.max_batch),
                        /*may_block=*/false)) {
      HandOffToShardThread();  // A backlog, or a disk read: the shard thread takes it from here.
    }
  } else if (pipeline_ != nullptr) {
    HandOffToShardThread();  // The shard thread sleeps on its handoff word, not in the mailbox.
  }
  return outcome;
}

// Dedicated mode without a store: the shard thread is the only consumer and sleeps in the
// mailbox. It holds the drain token for its whole life (no sender ever takes it in this mode).
void Shard::Run() {
  LEDGER_CHECK(drain_.TryAcquire());
  while (mailbox_.WaitAndDrain(taken_, options_.max_batch, options_.max_batch) > 0) {
    ExpandIntoBatch();
    core_.BeginBatch();
    while (!core_.AllDecided()) core_.DecideNext(abandoning_.load(std::memory_order_acquire));
    core_.Seal(/*finished_through=*/0);  // No store: answered at once.
  }
  drain_.Release();
}

// The shard thread sleeps until a sender hands it work (a backlog, a batch that needs a disk
// read), the journal thread reports a failed write, or Stop; then it drains until nothing is left
// or a sender holds the token.
void Shard::RunHandoffLoop() {
  for (;;) {
    const uint32_t epoch = handoff_epoch_.load(std::memory_order_acquire);
    while (DrainWhileOwner(1, options_.max_batch, /*may_block=*/true)) {
    }
    if (stopping_.load(std::memory_order_acquire)) return;  // Stop drains what is left.
    handoff_epoch_.wait(epoch, std::memory_order_acquire);
  }
}

bool Shard::DrainWhileOwner(int max_batches, size_t batch_limit, bool may_block) {
  for (int i = 0; i < max_batches; ++i) {
    // seq_cst (inside the token): pairs with WorkPending below, see there.
    if (!drain_.TryAcquire()) return false;
    const Turn turn = TakeTurn(batch_limit, may_block);
    drain_.Release();
    if (turn == Turn::kNeedsShardThread) return true;
    // Work published while we held the token was left to us by whoever published it.
    if (!WorkPending()) return false;
  }
  return true;
}

bool Shard::WorkPending() const {
  // Both seq_cst, like the token: a thread that publishes work and then fails TryAcquire, and
  // the holder that releases the token and then checks here, cannot both miss each other.
  return mailbox_.HeadPublished() || recovery_pending_.load(std::memory_order_seq_cst);
}

Shard::Turn Shard::TakeTurn(size_t batch_limit, bool may_block) {
  if (recovery_pending_.load(std::memory_order_acquire)) RecoverFailedWrites();
  // A batch left undecided by a sender (it needed a disk read) goes first.
  if (core_.batch().empty()) {
    const size_t taken = pipeline_ != nullptr ? mailbox_.TryTake(taken_, batch_limit, batch_limit)
                                              : mailbox_.TryDrain(taken_, batch_limit, batch_limit);
    if (taken == 0) return Turn::kIdle;
    ExpandIntoBatch();
  }
  if (!core_.Prefetch(may_block, finished_through_.load(std::memory_order_acquire))) {
    return Turn::kNeedsShardThread;
  }
  core_.BeginBatch();
  // The flag is read per message: AbandonUndecided refuses every message not yet decided.
  while (!core_.AllDecided()) core_.DecideNext(abandoning_.load(std::memory_order_acquire));
  // Acquire: when every sealed batch is finished, the journal thread's last FreeTaken for this
  // shard happened before the one below.
  const size_t cells = pipeline_ != nullptr ? CellsHeld(core_.batch()) : 0;
  SealResult sealed = core_.Seal(finished_through_.load(std::memory_order_acquire));
  if (pipeline_ == nullptr) return Turn::kProgressed;  // Drained cells are free already.
  if (sealed.completed_now > 0) mailbox_.FreeTaken(cells);
  if (sealed.to_write != nullptr && !pipeline_->Submit(std::move(sealed.to_write))) {
    RecoverFailedWrites();  // An earlier write failed; this batch joined it.
  }
  return Turn::kProgressed;
}

void Shard::RecoverFailedWrites() {
  // Cleared before taking: a failure reported after this is seen by the next turn.
  recovery_pending_.store(false, std::memory_order_seq_cst);
  std::vector<std::unique_ptr<SealedBatch>> failed = pipeline_->TakeFailed(options_.index);
  if (failed.empty()) return;
  core_.RollBack(failed);
  for (std::unique_ptr<SealedBatch>& batch : failed) {
    const size_t cells = CellsHeld(batch->messages);
    batch->CompleteAll();
    mailbox_.FreeTaken(cells);
  }
  finished_through_.store(core_.last_sealed(), std::memory_order_release);
}

void Shard::OnDurable(std::unique_ptr<SealedBatch> batch) {
  const size_t cells = CellsHeld(batch->messages);
  batch->CompleteAll();
  mailbox_.FreeTaken(cells);
  finished_through_.store(batch->sequence, std::memory_order_release);
}

void Shard::OnFailed() {
  recovery_pending_.store(true, std::memory_order_seq_cst);
  HandOffToShardThread();
}

void Shard::ExpandIntoBatch() {
  std::vector<Message>& batch = core_.batch();
  for (Message& message : taken_) {
    const BatchPart* part = std::get_if<BatchPart>(&message.kind);
    if (part == nullptr) {
      batch.push_back(std::move(message));
      continue;
    }
    for (uint32_t i = 0; i < part->size; ++i) {
      Message& operation = batch.emplace_back(part->operations[i]);
      operation.enqueued_at = message.enqueued_at;
      operation.holds_cell = i == 0;
      LEDGER_CHECK(operation.completion != nullptr && !operation.is_part());
    }
  }
  taken_.clear();
}

void Shard::HandOffToShardThread() {
  handoff_epoch_.fetch_add(1, std::memory_order_release);
  handoff_epoch_.notify_one();
}

}  // namespace ledger
