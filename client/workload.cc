#include "client/workload.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ledger {

absl::StatusOr<OperationMix> ParseOperationMix(absl::string_view text) {
  OperationMix mix{0, 0, 0, 0};
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(part, '=');
    int weight = 0;
    if (!absl::SimpleAtoi(kv.second, &weight) || weight < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--mix: weight for '", kv.first, "' must be a whole number >= 0"));
    }
    if (kv.first == "deposit") {
      mix.deposit = weight;
    } else if (kv.first == "withdraw") {
      mix.withdraw = weight;
    } else if (kv.first == "balance") {
      mix.balance = weight;
    } else if (kv.first == "transfer") {
      mix.transfer = weight;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--mix: unknown operation '", kv.first,
                       "'; use deposit=N,withdraw=N,balance=N,transfer=N"));
    }
  }
  // Each weight is at most INT_MAX; their sum must be too, since Next draws below it.
  if (int64_t{mix.deposit} + mix.withdraw + mix.balance + mix.transfer >
      std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError("--mix: the weights add up to too much");
  }
  if (mix.total() == 0) {
    return absl::InvalidArgumentError("--mix: at least one weight must be positive");
  }
  return mix;
}

absl::StatusOr<TransferScope> ParseTransferScope(absl::string_view text) {
  if (text == "any") return TransferScope::kAny;
  if (text == "same_shard") return TransferScope::kSameShard;
  if (text == "cross_shard") return TransferScope::kCrossShard;
  return absl::InvalidArgumentError(
      absl::StrCat("--transfer_scope must be any, same_shard or cross_shard; got \"", text, "\""));
}

absl::StatusOr<TransferPartners> TransferPartners::Create(TransferScope scope, size_t accounts,
                                                          std::vector<int32_t> shard_of) {
  if (accounts < 2) {
    return absl::InvalidArgumentError("transfers need at least 2 accounts (--accounts)");
  }
  std::vector<std::vector<size_t>> by_shard;
  std::vector<size_t> sources;
  if (scope == TransferScope::kAny) {
    for (size_t i = 0; i < accounts; ++i) sources.push_back(i);
    return TransferPartners(scope, accounts, {}, {}, std::move(sources));
  }
  if (shard_of.size() != accounts) {
    return absl::InvalidArgumentError(
        "--transfer_scope same_shard or cross_shard needs --server_shards (the server's "
        "--shards), to know which accounts share a shard");
  }
  for (size_t i = 0; i < accounts; ++i) {
    const auto shard = static_cast<size_t>(shard_of[i]);
    if (shard >= by_shard.size()) by_shard.resize(shard + 1);
    by_shard[shard].push_back(i);
  }
  const size_t populated = static_cast<size_t>(std::count_if(
      by_shard.begin(), by_shard.end(), [](const auto& owned) { return !owned.empty(); }));
  for (size_t i = 0; i < accounts; ++i) {
    const size_t same = by_shard[static_cast<size_t>(shard_of[i])].size();
    if (scope == TransferScope::kSameShard ? same >= 2 : populated >= 2) sources.push_back(i);
  }
  if (sources.empty()) {
    return absl::InvalidArgumentError(
        scope == TransferScope::kSameShard
            ? "--transfer_scope=same_shard: no shard holds two of the --accounts"
            : "--transfer_scope=cross_shard: all --accounts are on one shard (needs "
              "--server_shards >= 2 and more accounts)");
  }
  return TransferPartners(scope, accounts, std::move(shard_of), std::move(by_shard),
                          std::move(sources));
}

bool TransferPartners::Allows(size_t from, size_t to) const {
  if (from == to) return false;
  switch (scope_) {
    case TransferScope::kAny:
      return true;
    case TransferScope::kSameShard:
      return shard_of_[from] == shard_of_[to];
    case TransferScope::kCrossShard:
      return shard_of_[from] != shard_of_[to];
  }
  return false;
}

bool TransferPartners::HasPartner(size_t from) const {
  switch (scope_) {
    case TransferScope::kAny:
      return true;  // Create made sure there are 2 accounts.
    case TransferScope::kSameShard:
      return by_shard_[static_cast<size_t>(shard_of_[from])].size() >= 2;
    case TransferScope::kCrossShard:
      return by_shard_[static_cast<size_t>(shard_of_[from])].size() < accounts_;
  }
  return false;
}

size_t TransferPartners::AnySource(std::mt19937_64& random) const {
  return sources_[std::uniform_int_distribution<size_t>(0, sources_.size() - 1)(random)];
}

size_t TransferPartners::AnyPartner(size_t from, std::mt19937_64& random) const {
  if (scope_ == TransferScope::kAny) {
    const size_t k = std::uniform_int_distribution<size_t>(0, accounts_ - 2)(random);
    return k >= from ? k + 1 : k;  // Every account but `from`.
  }
  const auto own_shard = static_cast<size_t>(shard_of_[from]);
  const std::vector<size_t>& own = by_shard_[own_shard];
  if (scope_ == TransferScope::kSameShard) {
    // `from` is in `own` once; the last slot stands in for it when drawn.
    const size_t k = std::uniform_int_distribution<size_t>(0, own.size() - 2)(random);
    return own[k] == from ? own.back() : own[k];
  }
  // Cross-shard: the k-th account outside `from`'s shard.
  size_t k = std::uniform_int_distribution<size_t>(0, accounts_ - own.size() - 1)(random);
  for (size_t shard = 0; shard < by_shard_.size(); ++shard) {
    if (shard == own_shard) continue;
    if (k < by_shard_[shard].size()) return by_shard_[shard][k];
    k -= by_shard_[shard].size();
  }
  return by_shard_[own_shard == 0 ? 1 : 0].front();  // Unreachable: k < accounts outside.
}

absl::StatusOr<AccountDistribution> AccountDistribution::Create(absl::string_view spec,
                                                                size_t accounts) {
  if (accounts == 0) return absl::InvalidArgumentError("--accounts must be at least 1");
  if (spec == "uniform") return AccountDistribution(accounts, {});
  double exponent = 0;
  if (!absl::ConsumePrefix(&spec, "zipf:") || !absl::SimpleAtod(spec, &exponent) ||
      !(exponent > 0)) {
    return absl::InvalidArgumentError(
        "--distribution must be uniform or zipf:S with S > 0 (for example zipf:1.1)");
  }
  std::vector<double> cumulative(accounts);
  double total = 0;
  for (size_t k = 0; k < accounts; ++k) {
    total += 1.0 / std::pow(static_cast<double>(k + 1), exponent);
    cumulative[k] = total;
  }
  for (double& value : cumulative) value /= total;
  return AccountDistribution(accounts, std::move(cumulative));
}

size_t AccountDistribution::Next(std::mt19937_64& random) const {
  if (cumulative_.empty()) {
    return std::uniform_int_distribution<size_t>(0, accounts_ - 1)(random);
  }
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(random);
  const auto at = std::upper_bound(cumulative_.begin(), cumulative_.end(), u);
  return std::min(static_cast<size_t>(at - cumulative_.begin()), accounts_ - 1);
}

// How often a transfer's destination is redrawn from the distribution before it is picked among
// the source's partners directly.
constexpr int kTransferRedraws = 32;

PlannedCall Workload::Next() {
  const int pick = std::uniform_int_distribution<int>(0, mix_.total() - 1)(random_);
  PlannedCall call;
  call.op = pick < mix_.deposit                                  ? CallKind::kDeposit
            : pick < mix_.deposit + mix_.withdraw                ? CallKind::kWithdraw
            : pick < mix_.deposit + mix_.withdraw + mix_.balance ? CallKind::kBalance
                                                                 : CallKind::kTransfer;
  if (call.op == CallKind::kTransfer) {
    ChooseTransferAccounts(call);
  } else {
    call.account = accounts_->Next(random_);
  }
  call.amount = call.op == CallKind::kBalance ? 0 : amounts_(random_);
  return call;
}

void Workload::ChooseTransferAccounts(PlannedCall& call) {
  // A mix with transfers is only built with partners (the load test checks it at start).
  if (partners_ == nullptr) std::abort();
  call.account = accounts_->Next(random_);
  if (!partners_->HasPartner(call.account)) call.account = partners_->AnySource(random_);
  for (int draw = 0; draw < kTransferRedraws; ++draw) {
    call.to_account = accounts_->Next(random_);
    if (partners_->Allows(call.account, call.to_account)) return;
  }
  call.to_account = partners_->AnyPartner(call.account, random_);
}

}  // namespace ledger
