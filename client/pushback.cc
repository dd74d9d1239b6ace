#include "client/pushback.h"

#include <cstdint>
#include <string_view>

namespace ledger {

namespace {

// More digits could overflow int64; no server means a wait that long.
constexpr size_t kMaxDigits = 12;

}  // namespace

std::optional<std::chrono::milliseconds> RetryPushback(
    const std::multimap<grpc::string_ref, grpc::string_ref>& trailing_metadata) {
  const auto found = trailing_metadata.find(kRetryPushbackKey);
  if (found == trailing_metadata.end()) return std::nullopt;
  const std::string_view value(found->second.data(), found->second.size());
  // Digits only: no sign, no spaces, no unit. "-1" (do not retry) is refused here too.
  if (value.empty() || value.size() > kMaxDigits) return std::nullopt;
  int64_t milliseconds = 0;
  for (const char c : value) {
    if (c < '0' || c > '9') return std::nullopt;
    milliseconds = milliseconds * 10 + (c - '0');
  }
  return std::chrono::milliseconds(milliseconds);
}

}  // namespace ledger
