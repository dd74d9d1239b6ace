// Defines `OptionBound`, the allowed range of one numeric option, declared once beside the option
// it bounds, and `CheckOptionBound`, the one check of it that every layer runs: ledgerd on its
// flag before anything starts, and the component (Router, Shard, LedgerServer, the transport
// limits) on the value it is given by any caller, tests and benchmarks included. Both say the same
// words and name the option by its flag, so what a user reads does not depend on which layer
// caught the value.
#ifndef LEDGER_BASE_OPTION_BOUND_H_
#define LEDGER_BASE_OPTION_BOUND_H_

#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ledger {

// Thread-safe (a constant).
struct OptionBound {
  absl::string_view flag;  // As users set it: "--shards".
  int64_t min = 0;
  int64_t max = 0;
};

// OK when `value` is within `bound`; else InvalidArgument "--shards must be 2 to 1024; got 1"
// ("must be at least 0" for a bound whose max is the type's).
inline absl::Status CheckOptionBound(const OptionBound& bound, int64_t value) {
  if (value >= bound.min && value <= bound.max) return absl::OkStatus();
  if (bound.max == std::numeric_limits<int64_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(bound.flag, " must be at least ", bound.min, "; got ", value));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(bound.flag, " must be ", bound.min, " to ", bound.max, "; got ", value));
}

// The same for a duration with only a lower bound: "--keepalive_time must be at least 1ms; got 0".
inline absl::Status CheckDurationAtLeast(absl::string_view flag, absl::Duration value,
                                         absl::Duration min) {
  if (value >= min) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(flag, " must be at least ",
                                                 absl::FormatDuration(min), "; got ",
                                                 absl::FormatDuration(value)));
}

}  // namespace ledger

#endif  // LEDGER_BASE_OPTION_BOUND_H_
