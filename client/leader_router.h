// Defines `LeaderRouter`, how ledger-loadtest's calls find a cluster's leader: the channels to
// --target's addresses and to the leaders that NOT_LEADER refusals name, and the one address
// every call goes to now. A refusal (or a lost connection) moves that address once, for every
// worker: the others, refused by the same replica, find it moved and follow at once instead of
// each paying its own hops. ledgerctl's LedgerctlSession::FollowLeader is the single-threaded
// model; this is the same rule shared by many threads.
#ifndef LEDGER_CLIENT_LEADER_ROUTER_H_
#define LEDGER_CLIENT_LEADER_ROUTER_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "client/call_outcome.h"
#include "grpcpp/grpcpp.h"
#include "ledger/v1/ledger.grpc.pb.h"

namespace ledger {

// The most times one call (or one read of the verification) is sent on after a NOT_LEADER
// refusal, as ledgerctl's own bound: a cluster that has not shown its leader after this many
// redirections is electing one, or its members disagree about who leads.
inline constexpr int kLoadtestLeaderHopsMax = 10;

// The most addresses the router keeps channels to: --target's plus the leaders that refusals
// name (a cluster's members, under other spellings at most). A refusal naming one more is
// followed as if it named none (to the next --target address).
inline constexpr size_t kLeaderRoutesMax = 32;

// How long an address where a call found no server counts as down: hops pass over it meanwhile
// (unless every address is down), though a follower may still name it as the leader it has not
// yet seen die. Long enough for the others to elect a leader; short enough that a replica started
// again, which may come to lead, is tried soon.
inline constexpr std::chrono::seconds kUnreachableFor(3);

// The wait before the next hop after a refusal naming a leader that is down: the follower has
// not noticed yet, and the election that replaces it takes about this many times
// kLoadtestLeaderHopsMax.
inline constexpr std::chrono::milliseconds kDownLeaderNamedWait(200);

// Thread-safe.
class LeaderRouter {
 public:
  // One address's channels (--channels of them) and their stubs, made once; never destroyed
  // before the router, so a pointer to it stays valid.
  struct Route {
    std::string address;
    std::vector<std::shared_ptr<grpc::Channel>> channels;
    std::vector<std::unique_ptr<v1::Ledger::Stub>> stubs;
    // When a call there last found no server (steady clock, ns; 0: it answered since): set by
    // Unanswered, cleared by Answered. For kUnreachableFor, hops pass over it.
    mutable std::atomic<int64_t> unreachable_since_ns{0};
    // When it last answered a call (steady clock, ns, to about a millisecond; 0: never): a call
    // that waited out its deadline there while nothing else was answered either found no server
    // (a paused process, or one cut off from its peers, keeps its connections up and answers
    // nothing), as AnsweredSince tells.
    mutable std::atomic<int64_t> answered_at_ns{0};
  };
  // Makes channel number `index` (0 to channels_per_address - 1) to `address`.
  using ChannelMaker =
      std::function<std::shared_ptr<grpc::Channel>(const std::string& address, int32_t index)>;

  // `targets`: --target's addresses, parsed, at least one and at most kLeaderRoutesMax; calls go
  // to the first until one is moved.
  LeaderRouter(const std::vector<std::string>& targets, int32_t channels_per_address,
               ChannelMaker make_channel);

  // Where calls go now. Never null. Lock-free; any thread.
  const Route* Current() const { return current_.load(std::memory_order_acquire); }
  // --target's routes, in the order given.
  const std::vector<const Route*>& targets() const { return targets_; }
  // Makes `route` where calls go now (Connect, once it has found the one that answers).
  void MoveTo(const Route* route) ABSL_LOCKS_EXCLUDED(mu_);

  // Where the same request goes after `refusal` (its reason NOT_LEADER) from `refused_at`, and
  // how long it waits first.
  struct Hop {
    const Route* route = nullptr;
    std::chrono::milliseconds wait{0};
  };
  // When `refused_at` is still where calls go, moves that: to the refusal's leader_address when
  // it names one that is not down, else to the next --target address (passing over those that
  // are down, unless all are). When another call moved it already, leaves it. Either way the hop
  // goes where calls go now; it waits the refusal's RetryInfo delay when no leader was named
  // (kDownLeaderNamedWait when the one named is down).
  Hop Follow(const Route* refused_at, const CallOutcome& refusal) ABSL_LOCKS_EXCLUDED(mu_);
  // After a call to `at` found no server (UNAVAILABLE without ledgerd's details: the connection
  // was lost or refused, as when the leader is killed; or a deadline that passed while it waited
  // for a connection): marks `at` down and, when it is still where calls go and --target names
  // other addresses, moves to the next of them. One address: changes nothing.
  void Unanswered(const Route* at) ABSL_LOCKS_EXCLUDED(mu_);
  // After `at` answered a call (any answer of ledgerd's, a refusal included): it is reachable
  // again. Two atomic loads when it was already and answered within the last millisecond.
  static void Answered(const Route* at);
  // Whether `at` answered any call at or after `since` (steady clock).
  static bool AnsweredSince(const Route* at, std::chrono::steady_clock::time_point since);

 private:
  Route* RouteTo(const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The --target route after `from` in order (after the last one moved to, when `from` is not
  // one of them) that is not down (Down); the next one when all are.
  const Route* NextTarget(const Route* from) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int32_t channels_per_address_;
  const ChannelMaker make_channel_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Route>> routes_ ABSL_GUARDED_BY(mu_);
  std::vector<const Route*> targets_;             // Set by the constructor only.
  size_t target_index_ ABSL_GUARDED_BY(mu_) = 0;  // Of the --target route last moved to.
  // Written under mu_; read without it by Current.
  std::atomic<const Route*> current_{nullptr};
};

}  // namespace ledger

#endif  // LEDGER_CLIENT_LEADER_ROUTER_H_
