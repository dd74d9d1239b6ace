// Defines `CallKind`, the four ledger operations a client calls (Deposit, Withdraw, Balance,
// Transfer), in the order the load test's report lists them, and their lower-case names.
//
// The clients' own list, not the shards' `Op`: the shards also pass internal messages between
// themselves (a transfer's credit and settle steps) that no client ever calls.
#ifndef LEDGER_CLIENT_CALL_KIND_H_
#define LEDGER_CLIENT_CALL_KIND_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace ledger {

enum class CallKind : uint8_t { kDeposit, kWithdraw, kBalance, kTransfer };

// Every kind, in report order; a kind's index here is CallKindIndex.
inline constexpr std::array<CallKind, 4> kCallKinds = {CallKind::kDeposit, CallKind::kWithdraw,
                                                       CallKind::kBalance, CallKind::kTransfer};

inline constexpr size_t CallKindIndex(CallKind kind) { return static_cast<size_t>(kind); }

// "deposit", "withdraw", "balance" or "transfer": the names the server's logs and metric labels
// use too, and the keys of the report's "ops".
inline constexpr absl::string_view CallKindName(CallKind kind) {
  switch (kind) {
    case CallKind::kDeposit:
      return "deposit";
    case CallKind::kWithdraw:
      return "withdraw";
    case CallKind::kBalance:
      return "balance";
    case CallKind::kTransfer:
      return "transfer";
  }
  return "unknown";  // Only a value cast from outside the enum.
}

}  // namespace ledger

#endif  // LEDGER_CLIENT_CALL_KIND_H_
