#include "client/workload.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ledger {

absl::StatusOr<OperationMix> ParseOperationMix(absl::string_view text) {
  OperationMix mix{0, 0, 0};
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
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--mix: unknown operation '", kv.first,
                                                     "'; use deposit=N,withdraw=N,balance=N"));
    }
  }
  if (mix.deposit + mix.withdraw + mix.balance == 0) {
    return absl::InvalidArgumentError("--mix: at least one weight must be positive");
  }
  return mix;
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

PlannedCall Workload::Next() {
  const int total = mix_.deposit + mix_.withdraw + mix_.balance;
  const int pick = std::uniform_int_distribution<int>(0, total - 1)(random_);
  PlannedCall call;
  call.op = pick < mix_.deposit                   ? Op::kDeposit
            : pick < mix_.deposit + mix_.withdraw ? Op::kWithdraw
                                                  : Op::kBalance;
  call.account = accounts_->Next(random_);
  call.amount = call.op == Op::kBalance ? 0 : amounts_(random_);
  return call;
}

}  // namespace ledger
