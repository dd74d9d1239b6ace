#include "shard/client_shares.h"

#include <algorithm>

#include "absl/strings/string_view.h"
#include "base/check.h"

namespace ledger {

ClientShares::ClientShares(int64_t bound, Clock::time_point now) : bound_(bound), last_sweep_(now) {
  LEDGER_CHECK(bound > 0);
}

ClientShares::Slot ClientShares::TryTake(std::string_view client, Clock::time_point now,
                                         Refusal* refusal) {
  MutexLock lock(&mu_);
  SweepLocked(now);
  Entry* entry = nullptr;
  if (auto found = clients_.find(absl::string_view(client.data(), client.size()));
      found != clients_.end()) {
    entry = &found->second;
  } else if (clients_.size() < kMaxTrackedClients) {
    entry = &clients_.try_emplace(std::string(client)).first->second;
  } else {
    entry = &overflow_;
  }
  entry->last_call = now;
  const int64_t share = ShareLocked();
  if (entry->in_flight >= share) {
    if (refusal != nullptr) {
      *refusal = {.in_flight = entry->in_flight, .clients = clients_.size(), .share = share};
    }
    return nullptr;
  }
  ++entry->in_flight;
  return entry;
}

void ClientShares::Release(Slot slot, Clock::time_point now) {
  if (slot == nullptr) return;
  MutexLock lock(&mu_);
  LEDGER_CHECK(slot->in_flight > 0);
  --slot->in_flight;
  slot->last_call = now;
}

size_t ClientShares::clients() const {
  MutexLock lock(&mu_);
  return clients_.size();
}

int64_t ClientShares::share() const {
  MutexLock lock(&mu_);
  return ShareLocked();
}

int64_t ClientShares::ShareLocked() const {
  const auto clients = static_cast<int64_t>(std::max<size_t>(clients_.size(), 1));
  return (bound_ + clients - 1) / clients;
}

void ClientShares::SweepLocked(Clock::time_point now) {
  if (now - last_sweep_ < kRecentClientWindow / 4) return;
  last_sweep_ = now;
  absl::erase_if(clients_, [now](const auto& client) {
    return client.second.in_flight == 0 && now - client.second.last_call > kRecentClientWindow;
  });
}

}  // namespace ledger
