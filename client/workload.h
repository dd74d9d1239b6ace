// Defines the load-test workload: which operation (a weighted mix), which account (uniform or
// Zipf-skewed), and how much.
#ifndef LEDGER_CLIENT_WORKLOAD_H_
#define LEDGER_CLIENT_WORKLOAD_H_

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "shard/ledger_rules.h"

namespace ledger {

// Relative weights of the three operations, from "deposit=70,withdraw=25,balance=5".
struct OperationMix {
  int deposit = 70;
  int withdraw = 25;
  int balance = 5;
};
absl::StatusOr<OperationMix> ParseOperationMix(absl::string_view text);

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

// One call to make. Thread-compatible: each thread owns its Workload (and its random engine).
struct PlannedCall {
  Op op = Op::kDeposit;
  size_t account = 0;
  int64_t amount = 0;
};

class Workload {
 public:
  Workload(OperationMix mix, const AccountDistribution* accounts, int64_t amount_min,
           int64_t amount_max, uint64_t seed)
      : mix_(mix), accounts_(accounts), amounts_(amount_min, amount_max), random_(seed) {}
  PlannedCall Next();

 private:
  OperationMix mix_;
  const AccountDistribution* accounts_;
  std::uniform_int_distribution<int64_t> amounts_;
  std::mt19937_64 random_;
};

}  // namespace ledger

#endif  // LEDGER_CLIENT_WORKLOAD_H_
