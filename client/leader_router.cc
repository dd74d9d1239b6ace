#include "client/leader_router.h"

#include <utility>

#include "base/check.h"

namespace ledger {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Whether `route` is down or restarting, as far as the client can tell: a call there found no
// server within kUnreachableFor, or its connection is failing. A hop there would wait for it
// (--wait_for_ready) instead of reaching a member that answers.
bool Down(const LeaderRouter::Route& route) {
  const int64_t since = route.unreachable_since_ns.load(std::memory_order_relaxed);
  if (since != 0 && NowNs() - since < std::chrono::nanoseconds(kUnreachableFor).count()) {
    return true;
  }
  const grpc_connectivity_state state = route.channels.front()->GetState(/*try_to_connect=*/false);
  return state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_CONNECTING ||
         state == GRPC_CHANNEL_SHUTDOWN;
}

}  // namespace

LeaderRouter::LeaderRouter(const std::vector<std::string>& targets, int32_t channels_per_address,
                           ChannelMaker make_channel)
    : channels_per_address_(channels_per_address), make_channel_(std::move(make_channel)) {
  LEDGER_CHECK(!targets.empty());
  LEDGER_CHECK(targets.size() <= kLeaderRoutesMax);
  LEDGER_CHECK(channels_per_address_ >= 1);
  absl::MutexLock lock(&mu_);
  for (const std::string& address : targets) {
    Route* route = RouteTo(address);
    LEDGER_CHECK(route != nullptr);
    targets_.push_back(route);
  }
  current_.store(targets_.front(), std::memory_order_release);
}

LeaderRouter::Route* LeaderRouter::RouteTo(const std::string& address) {
  std::unique_ptr<Route>& route = routes_[address];
  if (route != nullptr) return route.get();
  if (routes_.size() > kLeaderRoutesMax) {
    routes_.erase(address);
    return nullptr;
  }
  route = std::make_unique<Route>();
  route->address = address;
  for (int32_t i = 0; i < channels_per_address_; ++i) {
    route->channels.push_back(make_channel_(address, i));
    route->stubs.push_back(v1::Ledger::NewStub(route->channels.back()));
  }
  return route.get();
}

void LeaderRouter::MoveTo(const Route* route) {
  LEDGER_CHECK(route != nullptr);
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < targets_.size(); ++i) {
    if (targets_[i] == route) target_index_ = i;
  }
  current_.store(route, std::memory_order_release);
}

const LeaderRouter::Route* LeaderRouter::NextTarget(const Route* from) {
  size_t start = target_index_;
  for (size_t i = 0; i < targets_.size(); ++i) {
    if (targets_[i] == from) start = i;
  }
  size_t chosen = (start + 1) % targets_.size();
  for (size_t step = 1; step <= targets_.size(); ++step) {
    const size_t index = (start + step) % targets_.size();
    if (!Down(*targets_[index])) {
      chosen = index;
      break;
    }
  }
  target_index_ = chosen;
  return targets_[chosen];
}

LeaderRouter::Hop LeaderRouter::Follow(const Route* refused_at, const CallOutcome& refusal) {
  LEDGER_CHECK(refused_at != nullptr);
  LEDGER_CHECK(refusal.reason == v1::NOT_LEADER);
  const std::string leader(MetadataValue(refusal.metadata, "leader_address"));
  absl::MutexLock lock(&mu_);
  // The leader named, unless it is the refuser itself, one address too many, or down.
  const Route* named = leader.empty() || leader == refused_at->address ? nullptr : RouteTo(leader);
  const bool named_down = named != nullptr && Down(*named);
  if (named_down) named = nullptr;
  if (current_.load(std::memory_order_relaxed) == refused_at) {
    current_.store(named != nullptr ? named : NextTarget(refused_at), std::memory_order_release);
  }
  Hop hop;
  hop.route = current_.load(std::memory_order_relaxed);
  hop.wait = named != nullptr ? std::chrono::milliseconds(0)
             : named_down     ? refusal.retry_delay.value_or(kDownLeaderNamedWait)
                              : refusal.retry_delay.value_or(std::chrono::milliseconds(0));
  return hop;
}

void LeaderRouter::Answered(const Route* at) {
  if (at->unreachable_since_ns.load(std::memory_order_relaxed) != 0) {
    at->unreachable_since_ns.store(0, std::memory_order_relaxed);
  }
  // Stored at most once a millisecond: every worker thread answers here, and a store per call
  // would bounce the cache line between them.
  const int64_t now = NowNs();
  if (now - at->answered_at_ns.load(std::memory_order_relaxed) > 1'000'000) {
    at->answered_at_ns.store(now, std::memory_order_relaxed);
  }
}

bool LeaderRouter::AnsweredSince(const Route* at, std::chrono::steady_clock::time_point since) {
  // Answered keeps the time to a millisecond.
  return at->answered_at_ns.load(std::memory_order_relaxed) + 1'000'000 >=
         std::chrono::duration_cast<std::chrono::nanoseconds>(since.time_since_epoch()).count();
}

void LeaderRouter::Unanswered(const Route* at) {
  if (targets_.size() < 2) return;
  at->unreachable_since_ns.store(NowNs(), std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  if (current_.load(std::memory_order_relaxed) != at) return;
  current_.store(NextTarget(at), std::memory_order_release);
}

}  // namespace ledger
