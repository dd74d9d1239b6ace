#include "server/watch_retention.h"

#include <array>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ledger {

absl::StatusOr<WatchRetention> ParseWatchRetention(absl::string_view text) {
  const auto invalid = [text](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--watch_retention must be 0, a size (512MiB, 20GiB: B, KiB, MiB, GiB or TiB, at most "
        "1PiB) or an age (24h, 90m: 1s to 87600h); got \"",
        text, "\"", why.empty() ? "" : ": ", why));
  };
  if (text == "0") return WatchRetention{};
  constexpr std::array<std::pair<absl::string_view, int>, 5> kUnits = {
      {{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}};
  for (const auto& [suffix, shift] : kUnits) {
    if (!absl::EndsWith(text, suffix)) continue;
    uint64_t count = 0;
    if (!absl::SimpleAtoi(text.substr(0, text.size() - suffix.size()), &count)) {
      return invalid("not a whole number before the unit");
    }
    constexpr uint64_t kMaxBytes = uint64_t{1} << 50;
    if (count == 0 || count > (kMaxBytes >> shift)) return invalid("out of range");
    return WatchRetention{.bytes = static_cast<int64_t>(count << shift)};
  }
  absl::Duration age;
  if (!absl::ParseDuration(text, &age)) return invalid("");
  if (age < absl::Seconds(1) || age > absl::Hours(87600)) return invalid("out of range");
  return WatchRetention{.age = age};
}

}  // namespace ledger
