// Test helper: a LedgerStore that passes every call to another store, for test stores that
// change one behaviour of it (how lookups answer, how writes end) and keep the rest.
#ifndef LEDGER_TESTS_SHARD_FORWARDING_STORE_H_
#define LEDGER_TESTS_SHARD_FORWARDING_STORE_H_

#include <optional>
#include <vector>

#include "shard/ledger_store.h"

namespace ledger::testing_util {

// As thread-safe as the store it forwards to.
class ForwardingStore : public LedgerStore {
 public:
  explicit ForwardingStore(LedgerStore* inner) : inner_(inner) {}

  absl::Status WriteGroup(absl::Span<const BatchWrite* const> batches) override {
    return inner_->WriteGroup(batches);
  }
  absl::StatusOr<std::optional<RequestRecord>> FindRequest(absl::string_view account_id,
                                                           absl::string_view request_id) override {
    return inner_->FindRequest(account_id, request_id);
  }
  absl::StatusOr<MemoryLookup> FindRequestInMemory(absl::string_view account_id,
                                                   absl::string_view request_id) override {
    return inner_->FindRequestInMemory(account_id, request_id);
  }
  absl::StatusOr<std::optional<AccountState>> FindAccount(absl::string_view account_id) override {
    return inner_->FindAccount(account_id);
  }
  absl::StatusOr<std::optional<TransferRecord>> FindTransfer(absl::string_view transfer_id,
                                                             absl::string_view from) override {
    return inner_->FindTransfer(transfer_id, from);
  }
  absl::StatusOr<std::vector<TransferRecord>> FindPendingTransfers(
      absl::string_view transfer_id) override {
    return inner_->FindPendingTransfers(transfer_id);
  }
  absl::StatusOr<std::optional<CreditReceipt>> FindCredit(absl::string_view transfer_id) override {
    return inner_->FindCredit(transfer_id);
  }

 protected:
  LedgerStore* inner() const { return inner_; }

 private:
  LedgerStore* const inner_;
};

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_SHARD_FORWARDING_STORE_H_
