// Defines `ClientShares`: the server-wide in-flight bound (--max_in_flight) divided among the
// clients that compete for it, so that one client that ignores pushback cannot fill the bound and
// leave every other client refused.
//
// A client is whatever key the caller names (server/client_identity.h: the mutual-TLS identity,
// else the peer address or connection). A client counts while it has a call in flight or made
// one within kRecentWindow; each of the N clients that count may hold ceil(bound / N) calls in
// flight. Alone, a client may use the whole bound, exactly as without shares; as soon as a
// second one calls, the first is held to half, and so on. A client at its share is refused
// (FAIR_SHARE) while the others still find room, however many connections it opens when it is
// one address or one identity.
//
// Why a share by count in flight rather than a rate: the bound itself is a count in flight (the
// server's queue), so dividing it is what keeps a polite client's calls from queueing behind a
// greedy one's; a polite client needs few calls in flight, so it never meets its share, and the
// greedy one keeps every slot the polite one leaves free.
#ifndef LEDGER_SHARD_CLIENT_SHARES_H_
#define LEDGER_SHARD_CLIENT_SHARES_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_map.h"
#include "base/annotated_mutex.h"

namespace ledger {

// How long a client that made a call still counts among those sharing the bound.
inline constexpr std::chrono::milliseconds kRecentClientWindow{1000};
// The most clients tracked one by one; beyond, new clients share one entry (so that a flood of
// addresses costs bounded memory and is held, all together, to one share).
inline constexpr size_t kMaxTrackedClients = 65536;

// Thread-safe; one per server. Every call takes one short lock to take its share and one to
// give it back.
class ClientShares {
 public:
  using Clock = std::chrono::steady_clock;

  // One client's calls in flight. A Slot stays valid while it holds a call in flight.
  struct Entry {
    int64_t in_flight = 0;
    Clock::time_point last_call;
  };
  using Slot = Entry*;

  // `bound` > 0: the in-flight bound the clients share.
  explicit ClientShares(int64_t bound, Clock::time_point now = Clock::now());

  // What TryTake saw when it refused: the client's calls in flight, how many clients share, and
  // each one's share then.
  struct Refusal {
    int64_t in_flight = 0;
    size_t clients = 0;
    int64_t share = 0;
  };

  // Takes one of `client`'s share for a new call: its slot, or null (filling `refusal`) when the
  // client already holds its share.
  Slot TryTake(std::string_view client, Clock::time_point now, Refusal* refusal = nullptr);
  // Gives back what TryTake took (a null slot is ignored).
  void Release(Slot slot, Clock::time_point now);

  // The clients counted now (in flight, or recent as of the last sweep).
  size_t clients() const;
  // Each client's share now: ceil(bound / clients), the whole bound for one or none.
  int64_t share() const;

 private:
  // Drops the clients with nothing in flight and no call within kRecentClientWindow, at most
  // once per kRecentClientWindow / 4.
  void SweepLocked(Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t ShareLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t bound_;
  mutable Mutex mu_;
  absl::node_hash_map<std::string, Entry> clients_ ABSL_GUARDED_BY(mu_);
  // Where the clients beyond kMaxTrackedClients go.
  Entry overflow_ ABSL_GUARDED_BY(mu_);
  Clock::time_point last_sweep_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ledger

#endif  // LEDGER_SHARD_CLIENT_SHARES_H_
