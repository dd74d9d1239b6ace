// Defines the load-test workload: which operation (a weighted mix), which account (uniform or
// Zipf-skewed), how much, and for a transfer which second account (any other, or one on the same
// or on another shard).
#ifndef LEDGER_CLIENT_WORKLOAD_H_
#define LEDGER_CLIENT_WORKLOAD_H_

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/call_kind.h"

namespace ledger {

// Relative weights of the operations, from "deposit=70,withdraw=25,balance=5,transfer=0"
// (an operation left out weighs 0).
struct OperationMix {
  int deposit = 70;
  int withdraw = 25;
  int balance = 5;
  int transfer = 0;
  int total() const { return deposit + withdraw + balance + transfer; }
};
absl::StatusOr<OperationMix> ParseOperationMix(absl::string_view text);

// Which destination a transfer may have, given its source: any other account, one on the same
// shard (a one-write transfer on the server), or one on another shard (the cross-shard protocol).
enum class TransferScope { kAny, kSameShard, kCrossShard };
// "any", "same_shard" or "cross_shard".
absl::StatusOr<TransferScope> ParseTransferScope(absl::string_view text);

// Draws accounts by index in [0, accounts): "uniform", or "zipf:S" where account k is drawn
// with weight 1/(k+1)^S (S > 0; hot accounts concentrate load on a few shards).
class AccountDistribution {
 public:
  static absl::StatusOr<AccountDistribution> Create(absl::string_view spec, size_t accounts);
  size_t Next(std::mt19937_64& random) const;

 private:
  AccountDistribution(size_t accounts, std::vector<double> cumulative)
      : accounts_(accounts), cumulative_(std::move(cumulative)) {}

  size_t accounts_;
  std::vector<double> cumulative_;  // Empty for uniform.
};

// The accounts a transfer from a given account may go to, under a TransferScope. Immutable after
// Create, so thread-safe.
class TransferPartners {
 public:
  // `shard_of[i]` is account i's shard (ShardOf of its name); it may be empty for kAny. Fails
  // when no account has a partner: fewer than 2 accounts, no shard holding 2 of them
  // (kSameShard), or all of them on one shard (kCrossShard).
  static absl::StatusOr<TransferPartners> Create(TransferScope scope, size_t accounts,
                                                 std::vector<int32_t> shard_of);

  // Whether a transfer from `from` to `to` is in scope (never when from == to).
  bool Allows(size_t from, size_t to) const;
  bool HasPartner(size_t from) const;
  // A uniformly random account with a partner: a source when the drawn one has none.
  size_t AnySource(std::mt19937_64& random) const;
  // A uniformly random partner of `from`. Requires HasPartner(from).
  size_t AnyPartner(size_t from, std::mt19937_64& random) const;

 private:
  TransferPartners(TransferScope scope, size_t accounts, std::vector<int32_t> shard_of,
                   std::vector<std::vector<size_t>> by_shard, std::vector<size_t> sources)
      : scope_(scope),
        accounts_(accounts),
        shard_of_(std::move(shard_of)),
        by_shard_(std::move(by_shard)),
        sources_(std::move(sources)) {}

  TransferScope scope_;
  size_t accounts_;
  std::vector<int32_t> shard_of_;
  std::vector<std::vector<size_t>> by_shard_;  // Index: shard; the accounts it owns.
  std::vector<size_t> sources_;                // The accounts that have a partner.
};

// One call to make. Thread-compatible: each thread owns its Workload (and its random engine).
struct PlannedCall {
  CallKind op = CallKind::kDeposit;
  size_t account = 0;     // A transfer's source.
  size_t to_account = 0;  // Transfers only: the destination, never `account`.
  int64_t amount = 0;
};

class Workload {
 public:
  // `partners` may be null when the mix has no transfers.
  Workload(OperationMix mix, const AccountDistribution* accounts, int64_t amount_min,
           int64_t amount_max, uint64_t seed, const TransferPartners* partners = nullptr)
      : mix_(mix),
        accounts_(accounts),
        partners_(partners),
        amounts_(amount_min, amount_max),
        random_(seed) {}
  PlannedCall Next();

 private:
  // A transfer's two accounts, each drawn from the distribution: the destination is redrawn
  // while it is out of scope, at most kTransferRedraws times, then picked uniformly among the
  // source's partners, so that a narrow scope under a skewed distribution cannot spin.
  void ChooseTransferAccounts(PlannedCall& call);

  OperationMix mix_;
  const AccountDistribution* accounts_;
  const TransferPartners* partners_;
  std::uniform_int_distribution<int64_t> amounts_;
  std::mt19937_64 random_;
};

}  // namespace ledger

#endif  // LEDGER_CLIENT_WORKLOAD_H_
