// Test helper: a LedgerStore kept in memory, whose writes and lookups can be made to fail, and
// which remembers every batch it was given.
#ifndef LEDGER_TESTS_SHARD_MEMORY_STORE_H_
#define LEDGER_TESTS_SHARD_MEMORY_STORE_H_

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shard/ledger_store.h"

namespace ledger::testing_util {

// Thread-safe.
class MemoryStore final : public LedgerStore {
 public:
  using LedgerStore::Write;
  absl::Status WriteGroup(absl::Span<const BatchWrite* const> group) override {
    std::function<void(const BatchWrite&)> hook;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++groups_;
      hook = on_write_;
    }
    // Outside the lock: a hook that holds the write in flight must not hold up lookups, which a
    // real store answers while it writes (shards prefetch from it meanwhile).
    if (hook) {
      for (const BatchWrite* batch : group) hook(*batch);
    }
    std::lock_guard<std::mutex> lock(mu_);
    const bool fail = fail_writes_ || fail_next_writes_ > 0;
    if (fail_next_writes_ > 0) --fail_next_writes_;
    if (fail) {
      ++failed_writes_;
      if (land_failed_writes_) {
        for (const BatchWrite* batch : group) Apply(*batch);
      }
      return absl::UnavailableError("injected write failure");
    }
    for (const BatchWrite* batch : group) {
      Apply(*batch);
      batches_.push_back(*batch);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::optional<RequestRecord>> FindRequest(absl::string_view account_id,
                                                           absl::string_view request_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (fail_lookups_) return absl::UnavailableError("injected lookup failure");
    auto found = requests_.find({std::string(account_id), std::string(request_id)});
    if (found == requests_.end()) return std::nullopt;
    return found->second;
  }

  absl::StatusOr<std::optional<AccountState>> FindAccount(absl::string_view account_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (fail_lookups_) return absl::UnavailableError("injected lookup failure");
    auto found = accounts_.find(std::string(account_id));
    if (found == accounts_.end()) return std::nullopt;
    return found->second;
  }

  absl::StatusOr<std::optional<TransferRecord>> FindTransfer(absl::string_view transfer_id,
                                                             absl::string_view from) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (fail_lookups_) return absl::UnavailableError("injected lookup failure");
    auto pending = pending_.find({std::string(transfer_id), std::string(from)});
    if (pending != pending_.end()) return pending->second;
    auto found = transfers_.find(std::string(transfer_id));
    if (found == transfers_.end()) return std::nullopt;
    return found->second;
  }

  absl::StatusOr<std::optional<CreditReceipt>> FindCredit(absl::string_view transfer_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (fail_lookups_) return absl::UnavailableError("injected lookup failure");
    auto found = credits_.find(std::string(transfer_id));
    if (found == credits_.end()) return std::nullopt;
    return found->second;
  }

  absl::StatusOr<std::vector<TransferRecord>> FindPendingTransfers(
      absl::string_view transfer_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (fail_lookups_) return absl::UnavailableError("injected lookup failure");
    std::vector<TransferRecord> pending;
    for (const auto& [key, record] : pending_) {
      if (key.first == transfer_id) pending.push_back(record);
    }
    return pending;
  }

  // Every transfer record stored, by transfer_id.
  std::map<std::string, TransferRecord> transfers() const {
    std::lock_guard<std::mutex> lock(mu_);
    return transfers_;
  }

  // Makes the next failing write land on "disk" anyway, as a write whose sync fails after its
  // data reached the log may.
  void LandFailedWrites(bool land) {
    std::lock_guard<std::mutex> lock(mu_);
    land_failed_writes_ = land;
  }

  void FailWrites(bool fail) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_writes_ = fail;
  }
  // Fails the next `count` writes (groups), then lets writes succeed again: for a failure that
  // must hit one group and spare the one after it.
  void FailNextWrites(int count) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_next_writes_ = count;
  }
  void FailLookups(bool fail) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_lookups_ = fail;
  }
  // Runs inside every write, once per batch of the group, on the writing thread (the commit
  // pipeline's), before the write succeeds or fails and without the store's lock. May block, to
  // hold the write in flight, and may call the store.
  void OnWrite(std::function<void(const BatchWrite&)> hook) {
    std::lock_guard<std::mutex> lock(mu_);
    on_write_ = std::move(hook);
  }

  // Writes (groups) attempted, successful or not.
  int groups() const {
    std::lock_guard<std::mutex> lock(mu_);
    return groups_;
  }
  // Batches successfully written, in order.
  std::vector<BatchWrite> batches() const {
    std::lock_guard<std::mutex> lock(mu_);
    return batches_;
  }
  int failed_writes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_writes_;
  }
  std::vector<JournalEntry> journal() const {
    std::lock_guard<std::mutex> lock(mu_);
    return journal_;
  }
  std::optional<AccountState> account(const std::string& id) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto found = accounts_.find(id);
    if (found == accounts_.end()) return std::nullopt;
    return found->second;
  }

 private:
  void Apply(const BatchWrite& batch) {
    for (const AccountWrite& account : batch.accounts) {
      accounts_[account.account_id] = account.state;
    }
    for (const JournalEntry& entry : batch.journal) journal_.push_back(entry);
    for (const RequestWrite& request : batch.requests) {
      requests_[{request.account_id, request.request_id}] = request.record;
    }
    for (const TransferWrite& transfer : batch.transfers) {
      transfers_[transfer.transfer_id] = transfer.record;
      if (transfer.record.state == TransferState::kPending) {
        pending_[{transfer.transfer_id, transfer.record.from}] = transfer.record;
      } else {
        pending_.erase({transfer.transfer_id, transfer.record.from});
      }
    }
    for (const CreditWrite& credit : batch.credits) credits_[credit.transfer_id] = credit.receipt;
  }

  mutable std::mutex mu_;
  bool fail_writes_ = false;
  bool fail_lookups_ = false;
  bool land_failed_writes_ = false;
  int fail_next_writes_ = 0;
  int failed_writes_ = 0;
  int groups_ = 0;
  std::function<void(const BatchWrite&)> on_write_;
  std::map<std::string, AccountState> accounts_;
  std::vector<JournalEntry> journal_;
  std::map<std::pair<std::string, std::string>, RequestRecord> requests_;
  std::vector<BatchWrite> batches_;
  std::map<std::string, TransferRecord> transfers_;
  std::map<std::string, CreditReceipt> credits_;
  std::map<std::pair<std::string, std::string>, TransferRecord> pending_;
};

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_SHARD_MEMORY_STORE_H_
