#include "client/request_id.h"

#include <random>

#include "absl/strings/str_format.h"

namespace ledger {

std::string NewRequestId() {
  std::random_device random;
  return absl::StrFormat("ledgerctl-%08x%08x", random(), random());
}

}  // namespace ledger
