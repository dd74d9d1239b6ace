#include "storage/raft_log.h"

// libraft 0.15's headers lack extern "C" guards, so C++ must add them or fail to link.
extern "C" {
#include <raft.h>
#include <raft/uv.h>
}
#include <uv.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/annotated_mutex.h"
#include "base/check.h"
#include "base/steady_wait.h"
#include "storage/local_log.h"
#include "storage/raft_catch_up.h"
#include "storage/raft_io_guard.h"
#include "storage/raft_nodelay.h"

namespace ledger::storage {

namespace {

// One entry (Append, Propose) or barrier (Barrier) on its way through the loop thread, which
// owns it from the moment it is queued: Decide tells its outcome, once, and deletes it.
struct Proposal {
  struct raft_apply req {};  // "struct": the function raft_apply hides the type's name in C++.
  struct raft_barrier barrier_req {};
  RaftLog::Replica* replica = nullptr;
  // A barrier (RaftLog::Barrier) rather than an entry.
  bool barrier = false;
  std::string payload;
  RaftLog::Decided decided;

  void Decide(absl::StatusOr<uint64_t> outcome) {
    decided(std::move(outcome));
    delete this;
  }
};

// What a caller of Append or Barrier waits on.
// std::mutex-based (base/annotated_mutex.h), not absl's: ThreadSanitizer must see the hand-off.
class Outcome {
 public:
  RaftLog::Decided Setter() {
    return [this](absl::StatusOr<uint64_t> outcome) {
      MutexLock lock(&mu_);
      result_ = std::move(outcome);
      decided_ = true;
      // Under the lock: once it is released the waiter may return and destroy this.
      decided_cv_.notify_one();
    };
  }
  absl::StatusOr<uint64_t> Wait() {
    MutexLock lock(&mu_);
    while (!decided_) mu_.Wait(decided_cv_);
    return result_;
  }

 private:
  Mutex mu_;
  std::condition_variable decided_cv_;
  bool decided_ ABSL_GUARDED_BY(mu_) = false;
  absl::StatusOr<uint64_t> result_ ABSL_GUARDED_BY(mu_) = absl::UnknownError("not decided");
};

// libraft 0.15 writes an entry padded to a multiple of 8 bytes but reads its segments back as if
// nothing were padded (uvLoadEntriesBatch sums the unpadded lengths), so a log holding one entry
// of any other length cannot be loaded again: raft_start fails with "short read". Every entry is
// therefore a multiple of 8 bytes already: the payload, zeros, and a last byte saying how many
// bytes (1 to 8) follow the payload.
size_t PaddedLength(size_t payload) { return (payload + 1 + 7) / 8 * 8; }

void Pad(absl::string_view payload, char* out, size_t padded) {
  std::memcpy(out, payload.data(), payload.size());
  std::memset(out + payload.size(), 0, padded - payload.size());
  out[padded - 1] = static_cast<char>(padded - payload.size());
}

// The payload of a padded entry, or nullopt when it is not one.
std::optional<absl::string_view> Unpad(const raft_buffer& buf) {
  if (buf.len == 0 || buf.len % 8 != 0) return std::nullopt;
  const auto* bytes = static_cast<const char*>(buf.base);
  const auto tail = static_cast<size_t>(static_cast<unsigned char>(bytes[buf.len - 1]));
  if (tail < 1 || tail > 8) return std::nullopt;
  return absl::string_view(bytes, buf.len - tail);
}

absl::Status RaftError(absl::string_view what, int rv) {
  return absl::InternalError(absl::StrCat(what, ": ", raft_strerror(rv)));
}

}  // namespace

struct RaftLog::Replica {
  RaftLogOptions options;
  std::unique_ptr<LocalLog> mirror;

  // The loop thread's own: libuv and libraft state.
  uv_loop_t loop{};
  uv_async_t wake{};
  uv_check_t check{};
  NodelayTransport nodelay;
  raft_uv_transport& transport = nodelay.transport;
  // libraft's I/O behind the guard of two of 0.15's bugs (storage/raft_io_guard.h).
  RaftIoGuard io_guard;
  raft_io& io = io_guard.io;
  raft_fsm fsm{};
  struct raft raft {};
  std::thread thread;

  // std::mutex-based (base/annotated_mutex.h), so that ThreadSanitizer sees what it guards.
  mutable Mutex mu;

  // The loop thread's own: committed entries not in the mirror yet (its writes failed), their
  // payload bytes, the Appends waiting for theirs, and the timer that tries again.
  static constexpr int64_t kMaxUnmirroredBytes = int64_t{64} << 20;
  static constexpr uint64_t kMirrorRetryMs = 50;
  std::deque<std::pair<uint64_t, std::string>> unmirrored;
  int64_t unmirrored_bytes = 0;
  std::map<uint64_t, Proposal*> awaiting_mirror;
  // The loop thread's own: above 0 once libraft has taken a snapshot through this position that
  // the mirror does not reach (RaftStatus::needs_state_through).
  uint64_t awaiting_state_through = 0;
  // The loop thread's own: payload bytes committed since the last snapshot, and whether the
  // next apply has been asked to take one (snapshot_bytes reached).
  int64_t bytes_since_snapshot = 0;
  bool snapshot_asked = false;
  // The loop thread's own, on a leader: the followers it has sent a snapshot, until they are
  // back from the restart that takes its state; and how many entries to keep behind a snapshot
  // for them (storage/raft_catch_up.h).
  struct CatchingUp {
    // Since when nothing was heard from it (libraft's recent_recv false), if so now.
    std::optional<SteadyTime> quiet_since;
    bool restarted = false;  // Quiet for two election timeouts since it was sent the snapshot.
  };
  absl::flat_hash_map<raft_id, CatchingUp> catching_up;
  std::optional<CatchUpWindow> catch_up;  // Set at Open, from the options.
  uv_timer_t retry{};
  std::deque<Proposal*> queued ABSL_GUARDED_BY(mu);
  bool stopping ABSL_GUARDED_BY(mu) = false;
  absl::Status poison ABSL_GUARDED_BY(mu);
  RaftStatus status ABSL_GUARDED_BY(mu);

  // Loop thread, from io_guard: a write to libraft's log failed with `code`; the replica is
  // stuck until opened again (RaftStatus::log_write_failed).
  void OnLogWriteFailed(int code) {
    MutexLock lock(&mu);
    if (!status.log_write_failed.empty()) return;
    status.log_write_failed = absl::StrCat(raft_strerror(code), " (", io.errmsg, ")");
  }

  bool closing = false;  // The loop thread's own: raft_close was called.

  // Loop thread: proposes what Append queued, or refuses it.
  void OnWake() {
    std::deque<Proposal*> proposals;
    bool stop = false;
    {
      MutexLock lock(&mu);
      proposals.swap(queued);
      stop = stopping;
    }
    for (Proposal* p : proposals) {
      if (stop) {
        p->Decide(absl::UnavailableError("the replica is stopping; nothing was proposed"));
      } else {
        Propose(p);
      }
    }
    // Once: a wake that comes after the close began (an Append that queued as the stop was
    // asked) must not close libraft and the handles again (libuv aborts on a second uv_close).
    if (stop && !closing) {
      closing = true;
      uv_check_stop(&check);
      uv_timer_stop(&retry);
      // Committed (libraft said so) but not mirrored here: the entry is durable on a majority,
      // and this replica's libraft log replays it into the mirror at the next start.
      for (auto& [index, proposal] : awaiting_mirror) proposal->Decide(index);
      awaiting_mirror.clear();
      raft_close(&raft, [](struct raft* r) {
        auto* self = static_cast<Replica*>(r->data);
        raft_uv_close(&self->io);
        raft_uv_tcp_close(&self->transport);
        uv_close(reinterpret_cast<uv_handle_t*>(&self->wake), nullptr);
        uv_close(reinterpret_cast<uv_handle_t*>(&self->check), nullptr);
        uv_close(reinterpret_cast<uv_handle_t*>(&self->retry), nullptr);
      });
    }
  }

  // Loop thread: `proposal` is decided at `index` once the mirror holds it.
  void DecideWhenMirrored(Proposal* proposal, uint64_t index) {
    if (mirror->last_position() >= index) {
      proposal->Decide(index);
    } else {
      awaiting_mirror.emplace(index, proposal);
    }
  }

  void Propose(Proposal* p) {
    if (!p->barrier) {
      // An earlier entry's outcome is unknown (its leadership was lost): one proposed behind it
      // could commit in a later term of this node's, after the caller rolled it back as failed.
      absl::Status poisoned;
      {
        MutexLock lock(&mu);
        poisoned = poison;
      }
      if (!poisoned.ok()) {
        p->Decide(absl::UnavailableError(
            absl::StrCat("not proposed: the outcome of an earlier entry is unknown (",
                         poisoned.message(), ")")));
        return;
      }
    }
    if (raft_state(&raft) != RAFT_LEADER) {
      p->Decide(NotLeader());
      return;
    }
    if (awaiting_state_through > 0) {
      // It could not apply the entry (Commit refuses everything until then).
      p->Decide(absl::UnavailableError(
          absl::StrCat("node ", options.node_id, " leads but lacks the state through log position ",
                       awaiting_state_through, " and is fetching it; nothing was proposed")));
      return;
    }
    p->replica = this;
    if (p->barrier) {
      p->barrier_req.data = p;
      const int rv = raft_barrier(&raft, &p->barrier_req, [](struct raft_barrier* req, int status) {
        auto* proposal = static_cast<Proposal*>(req->data);
        Replica* self = proposal->replica;
        if (status != 0) {
          proposal->Decide(absl::UnavailableError(absl::StrCat(
              "leadership was lost before the barrier committed (", raft_strerror(status), ")")));
          return;
        }
        // Everything before the barrier is applied, so mirrored or queued for the mirror; the
        // barrier's own index is filled now rather than with the next entry, so that the
        // mirror (and what on_committed told) reaches it.
        self->FillTo(req->index);
        self->DecideWhenMirrored(proposal, req->index);
      });
      if (rv != 0) p->Decide(rv == RAFT_NOTLEADER ? NotLeader() : RaftError("raft_barrier", rv));
      return;
    }
    raft_buffer buf;
    buf.len = PaddedLength(p->payload.size());
    buf.base = raft_malloc(buf.len);  // raft_apply takes it, so it must come from raft_malloc.
    if (buf.base == nullptr) {
      p->Decide(absl::ResourceExhaustedError("out of memory for a Raft entry"));
      return;
    }
    Pad(p->payload, static_cast<char*>(buf.base), buf.len);
    p->req.data = p;
    const int rv = raft_apply(
        &raft, &p->req, &buf, 1, [](struct raft_apply* req, int status, void* /*result*/) {
          auto* proposal = static_cast<Proposal*>(req->data);
          Replica* self = proposal->replica;
          if (status == 0) {
            // Committed; returned once it is in this replica's mirror too.
            self->DecideWhenMirrored(proposal, req->index);
          } else {
            proposal->Decide(absl::UnavailableError(
                absl::StrCat("leadership was lost before the entry was known to be committed (",
                             raft_strerror(status), "): its outcome is unknown")));
          }
        });
    if (rv != 0) {
      raft_free(buf.base);
      p->Decide(rv == RAFT_NOTLEADER ? NotLeader() : RaftError("raft_apply", rv));
    }
  }

  absl::Status NotLeader() {
    raft_id id = 0;
    const char* address = nullptr;
    raft_leader(&raft, &id, &address);
    if (id == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("node ", options.node_id, " is not the leader, and no leader is known"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", options.node_id, " is not the leader; the leader is node ", id, " at ", address));
  }

  // Loop thread: the newest position mirrored or queued for the mirror.
  uint64_t LastKnown() const {
    return unmirrored.empty() ? mirror->last_position() : unmirrored.back().first;
  }

  // Loop thread: Raft's own entries up to `index` (which never reach the FSM) fill their
  // positions in the mirror with empty payloads.
  void FillTo(uint64_t index) {
    for (uint64_t position = LastKnown() + 1; position <= index; ++position) {
      unmirrored.emplace_back(position, std::string());
    }
    FlushUnmirrored();
  }

  // Loop thread, from the FSM: the committed entry at `index`, into the mirror.
  int Commit(raft_index index, absl::string_view payload) {
    // Everything after a snapshot this replica lacks the state of waits in libraft until the
    // state is fetched and the replica opened again: mirroring it would leave a gap.
    if (awaiting_state_through > 0) return RAFT_IOERR;
    const uint64_t last_known = LastKnown();
    if (index <= last_known) return 0;  // Replayed after a restart: mirrored already.
    if (unmirrored_bytes > kMaxUnmirroredBytes) {
      // The mirror has been failing for a while: hold further entries back in libraft, which
      // applies them again with its next commit (an FSM error leaves last_applied as it was).
      return RAFT_IOERR;
    }
    // Raft's own entries (configuration, barriers) never reach the FSM; they fill their index.
    for (uint64_t position = last_known + 1; position < index; ++position) {
      unmirrored.emplace_back(position, std::string());
    }
    unmirrored.emplace_back(index, std::string(payload));
    unmirrored_bytes += static_cast<int64_t>(payload.size());
    catch_up->Committed(index, static_cast<int64_t>(payload.size()));
    FlushUnmirrored();
    bytes_since_snapshot += static_cast<int64_t>(payload.size());
    if (bytes_since_snapshot >= options.snapshot_bytes && !snapshot_asked) {
      // libraft snapshots by entry count only: a threshold of 1 makes its next apply take one,
      // and the snapshot puts the configured threshold back.
      raft_set_snapshot_threshold(&raft, 1);
      snapshot_asked = true;
    }
    return 0;
  }

  // Loop thread: writes what is committed but not mirrored yet, in order, and releases the
  // Appends that waited for it. A failed write (a full disk, a failed sync) poisons the mirror:
  // it is repaired and tried again on a timer, so that the replica catches up without waiting
  // for the next commit.
  void FlushUnmirrored() {
    while (!unmirrored.empty()) {
      if (!mirror->poisoned().ok() && !mirror->Repair().ok()) break;
      const auto& [position, payload] = unmirrored.front();
      absl::StatusOr<uint64_t> appended = mirror->Append(payload);
      if (!appended.ok()) break;
      LEDGER_CHECK(*appended == position);
      if (options.on_committed) options.on_committed(position, payload);
      unmirrored_bytes -= static_cast<int64_t>(payload.size());
      unmirrored.pop_front();
    }
    const uint64_t mirrored = mirror->last_position();
    while (!awaiting_mirror.empty() && awaiting_mirror.begin()->first <= mirrored) {
      awaiting_mirror.begin()->second->Decide(awaiting_mirror.begin()->first);
      awaiting_mirror.erase(awaiting_mirror.begin());
    }
    if (!unmirrored.empty() && !uv_is_active(reinterpret_cast<uv_handle_t*>(&retry))) {
      uv_timer_start(
          &retry, [](uv_timer_t* timer) { static_cast<Replica*>(timer->data)->FlushUnmirrored(); },
          kMirrorRetryMs, 0);
    }
  }

  // Loop thread, each iteration, on a leader (elsewhere there are none): a follower libraft is
  // sending a snapshot joins `catching_up`. It keeps taking entries while it fetches the state,
  // then goes quiet while it restarts on it, and leaves once it is heard from again within the
  // fixed count of the leader's log. libraft's recent_recv says whether it was heard from since
  // the leader last checked its quorum, once per election timeout, so it is false for a moment
  // after every check even for a follower that answers: quiet means false for two election
  // timeouts (a restart takes longer).
  void NoteCatchingUp() {
    if (raft_state(&raft) != RAFT_LEADER) {
      catching_up.clear();
      return;
    }
    // libraft's PROGRESS__SNAPSHOT (src/progress.h; not in its public header).
    constexpr unsigned short kProgressSnapshot = 2;
    const SteadyTime now = SteadyNow();
    const absl::Duration quiet_for = 2 * options.election_timeout;
    for (unsigned i = 0; i < raft.configuration.n; ++i) {
      const raft_id member = raft.configuration.servers[i].id;
      const raft_progress& progress = raft.leader_state.progress[i];
      if (member == raft.id) continue;
      if (progress.state == kProgressSnapshot) {
        catching_up[member] = CatchingUp{};
        continue;
      }
      const auto it = catching_up.find(member);
      if (it == catching_up.end()) continue;
      CatchingUp& follower = it->second;
      if (!progress.recent_recv) {
        if (!follower.quiet_since.has_value()) follower.quiet_since = now;
        if (absl::FromChrono(now - *follower.quiet_since) >= quiet_for) follower.restarted = true;
        continue;
      }
      follower.quiet_since.reset();
      if (follower.restarted &&
          progress.match_index + options.snapshot_trailing >= raft.last_stored) {
        catching_up.erase(it);
      }
    }
  }

  // Loop thread, as a snapshot through `index` is taken: how many entries libraft keeps behind
  // it, for the followers being caught up.
  unsigned TrailingFor(uint64_t index) {
    std::optional<uint64_t> slowest;
    if (raft_state(&raft) == RAFT_LEADER) {
      for (unsigned i = 0; i < raft.configuration.n; ++i) {
        if (!catching_up.contains(raft.configuration.servers[i].id)) continue;
        const uint64_t match = raft.leader_state.progress[i].match_index;
        slowest = std::min(slowest.value_or(match), match);
      }
    }
    return catch_up->TrailingFor(index, slowest);
  }

  // Loop thread, once per iteration: what Status() reports.
  void Refresh() {
    NoteCatchingUp();
    // Raft's own entries (barriers, the no-op of a new term) never reach the FSM: an entry after
    // them fills their positions, and so do these, so that a follower's mirror reaches what it
    // has applied even when a barrier (a read on the leader) was the last entry. Every position
    // up to last_applied that is not mirrored is one of them: an FSM entry that failed leaves
    // last_applied before it.
    if (awaiting_state_through == 0 && raft.last_applied > LastKnown()) FillTo(raft.last_applied);
    raft_id id = 0;
    const char* address = nullptr;
    raft_leader(&raft, &id, &address);
    MutexLock lock(&mu);
    status.leader = raft_state(&raft) == RAFT_LEADER;
    status.term = raft.current_term;
    status.leader_id = id;
    status.leader_address = address == nullptr ? "" : address;
    status.commit_position = raft.commit_index;
    status.applied_position = raft.last_applied;
    status.replicated.clear();
    status.log_kept_from = raft.log.offset + 1;
    status.sends_refused = io_guard.sends_refused();
    if (status.leader) {
      for (unsigned i = 0; i < raft.configuration.n; ++i) {
        const raft_id member = raft.configuration.servers[i].id;
        status.replicated.emplace_back(member, member == raft.id
                                                   ? raft.last_stored
                                                   : raft.leader_state.progress[i].match_index);
      }
    }
  }
};

namespace {

// Every id above 0 and none twice: what libraft's configuration needs.
absl::Status CheckPeerIds(const std::vector<RaftPeer>& peers) {
  absl::flat_hash_set<uint64_t> ids;
  for (const RaftPeer& peer : peers) {
    if (peer.id == 0) return absl::InvalidArgumentError("peer ids start at 1; 0 is not one");
    if (!ids.insert(peer.id).second) {
      return absl::InvalidArgumentError(absl::StrCat("peer id ", peer.id, " appears twice"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<RaftPeer>> ParseRaftPeers(absl::string_view text) {
  std::vector<RaftPeer> peers;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    const std::pair<absl::string_view, absl::string_view> parts =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    RaftPeer peer;
    if (!absl::SimpleAtoi(parts.first, &peer.id) || peer.id == 0 || parts.second.empty() ||
        parts.second.find(':') == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("a peer is ID=HOST:PORT with an ID above 0, not '", item, "'"));
    }
    peer.address = std::string(parts.second);
    peers.push_back(std::move(peer));
  }
  if (peers.empty()) return absl::InvalidArgumentError("no peers");
  if (absl::Status ids = CheckPeerIds(peers); !ids.ok()) return ids;
  return peers;
}

absl::StatusOr<std::unique_ptr<RaftLog>> RaftLog::Open(RaftLogOptions options) {
  if (options.node_id == 0) return absl::InvalidArgumentError("the node id must be above 0");
  if (absl::Status ids = CheckPeerIds(options.peers); !ids.ok()) return ids;
  std::string self_address;
  for (const RaftPeer& peer : options.peers) {
    if (peer.id == options.node_id) self_address = peer.address;
  }
  if (self_address.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("node ", options.node_id, " is not among the peers"));
  }
  if (options.bind_address.empty()) options.bind_address = self_address;

  // A peer that goes away mid-write must be a failed write, not the end of the process.
  std::signal(SIGPIPE, SIG_IGN);

  auto replica = std::make_unique<Replica>();
  Replica& r = *replica;
  r.options = std::move(options);
  r.catch_up.emplace(r.options.snapshot_trailing, r.options.snapshot_bytes);
  bool mirror_created = false;
  {
    std::error_code error;
    if (!std::filesystem::exists(r.options.log_dir, error)) {
      // A new replica: its mirror starts at Raft's first index.
      if (absl::Status created =
              LocalLog::Create(r.options.log_dir, 1, r.options.log_segment_bytes);
          !created.ok()) {
        return created;
      }
      mirror_created = true;
    }
    LocalLogOptions mirror_options;
    mirror_options.dir = r.options.log_dir;
    mirror_options.segment_bytes = r.options.log_segment_bytes;
    mirror_options.fault = r.options.mirror_fault;
    // libraft's own log has synced every entry before it counts (O_DSYNC), and at a restart it
    // applies again every entry after its last snapshot: so the mirror is written as entries
    // commit and synced only before something relies on it (a snapshot here, a checkpoint of
    // the store: Sync). One sync per commit instead of two.
    mirror_options.sync = false;
    absl::StatusOr<std::unique_ptr<LocalLog>> mirror = LocalLog::Open(mirror_options);
    if (!mirror.ok()) return mirror.status();
    r.mirror = std::move(*mirror);
    std::filesystem::create_directories(r.options.raft_dir, error);
    if (error) {
      return absl::InternalError(
          absl::StrCat("creating ", r.options.raft_dir, ": ", error.message()));
    }
  }

  if (int rv = uv_loop_init(&r.loop); rv != 0) {
    return absl::InternalError(absl::StrCat("uv_loop_init: ", uv_strerror(rv)));
  }
  if (int rv = raft_uv_tcp_init(&r.transport, &r.loop); rv != 0) {
    uv_loop_close(&r.loop);
    return RaftError("raft_uv_tcp_init", rv);
  }
  TurnNagleOff(r.nodelay);
  // raft/uv.h: the bind address goes between raft_uv_tcp_init and raft_init.
  if (int rv = raft_uv_tcp_set_bind_address(&r.transport, r.options.bind_address.c_str());
      rv != 0) {
    raft_uv_tcp_close(&r.transport);
    uv_loop_close(&r.loop);
    return RaftError(absl::StrCat("binding ", r.options.bind_address), rv);
  }
  if (int rv = raft_uv_init(&r.io, &r.loop, r.options.raft_dir.c_str(), &r.transport); rv != 0) {
    raft_uv_tcp_close(&r.transport);
    uv_loop_close(&r.loop);
    return absl::InternalError(absl::StrCat("raft_uv_init(", r.options.raft_dir,
                                            "): ", raft_strerror(rv), ": ", r.io.errmsg));
  }
  r.io_guard.Install([&r](int code) { r.OnLogWriteFailed(code); });
  // Until the loop thread runs, a failure must undo what was set up, in the order libraft
  // wants: raft_close (which closes the I/O) and then the I/O's and transport's memory.
  bool raft_initialized = false;
  const auto abandon = [&r, &raft_initialized](absl::Status failure) {
    if (raft_initialized) {
      raft_close(&r.raft, [](struct raft* raft) {
        auto* self = static_cast<Replica*>(raft->data);
        raft_uv_close(&self->io);
        raft_uv_tcp_close(&self->transport);
      });
      uv_run(&r.loop, UV_RUN_DEFAULT);
    } else {
      raft_uv_close(&r.io);
      raft_uv_tcp_close(&r.transport);
    }
    uv_loop_close(&r.loop);
    return failure;
  };
  // A snapshot is an 8-byte manifest: compressing it (libraft's default, LZ4 on libuv's pool)
  // buys nothing.
  if (int rv = raft_uv_set_snapshot_compression(&r.io, false); rv != 0) {
    return abandon(RaftError("raft_uv_set_snapshot_compression", rv));
  }
  raft_uv_set_segment_size(&r.io, static_cast<size_t>(r.options.libraft_segment_bytes));
  r.fsm.version = 1;
  r.fsm.data = &r;
  r.fsm.apply = [](raft_fsm* fsm, const raft_buffer* buf, void** result) {
    auto* self = static_cast<Replica*>(fsm->data);
    *result = nullptr;
    const std::optional<absl::string_view> payload = Unpad(*buf);
    if (!payload.has_value()) return RAFT_MALFORMED;
    // libraft applies in index order and sets last_applied after each entry (replication.c,
    // replicationApply), so the entry being applied is the one after it.
    return self->Commit(self->raft.last_applied + 1, *payload);
  };
  // A snapshot is a manifest: the index it covers, which the mirror is made to hold durably
  // first (it lets libraft drop those entries). libraft takes the buffers and raft_free()s them.
  r.fsm.snapshot = [](raft_fsm* fsm, raft_buffer* bufs[], unsigned* n_bufs) {
    auto* self = static_cast<Replica*>(fsm->data);
    // Not while committed entries wait for the mirror: a snapshot lets libraft drop entries the
    // mirror does not have yet. libraft tries again at its next apply.
    if (!self->unmirrored.empty()) return RAFT_BUSY;
    // Nor while it lacks the state a snapshot would claim.
    if (self->awaiting_state_through > 0) return RAFT_BUSY;
    if (!self->mirror->Sync().ok()) return RAFT_IOERR;
    *bufs = static_cast<raft_buffer*>(raft_malloc(sizeof(raft_buffer)));
    if (*bufs == nullptr) return RAFT_NOMEM;
    (*bufs)[0].len = sizeof(uint64_t);
    (*bufs)[0].base = raft_malloc(sizeof(uint64_t));
    if ((*bufs)[0].base == nullptr) {
      raft_free(*bufs);
      return RAFT_NOMEM;
    }
    const uint64_t index = self->raft.last_applied;
    std::memcpy((*bufs)[0].base, &index, sizeof index);
    // libraft reads it as it puts this snapshot and drops entries from memory behind it.
    raft_set_snapshot_trailing(&self->raft, self->TrailingFor(index));
    *n_bufs = 1;
    self->bytes_since_snapshot = 0;
    if (self->snapshot_asked) {
      raft_set_snapshot_threshold(&self->raft, self->options.snapshot_threshold);
      self->snapshot_asked = false;
    }
    return 0;
  };
  // On a restart, libraft restores this node's own last snapshot, which its mirror covers. A
  // snapshot for entries this node never mirrored leaves it waiting for the leader's state.
  r.fsm.restore = [](raft_fsm* fsm, raft_buffer* buf) {
    auto* self = static_cast<Replica*>(fsm->data);
    uint64_t index = 0;
    if (buf->len != sizeof index) return RAFT_MALFORMED;
    std::memcpy(&index, buf->base, sizeof index);
    if (self->mirror->last_position() < index) {
      // A snapshot (the leader's, or one it installed before a restart) through entries this
      // replica never mirrored. Refusing it would not help: libraft has already put it in place
      // of its log (installSnapshot replaces the log before it restores) and takes the next
      // InstallSnapshot of it as done, and a refusal at start stops raft_start. So it is taken,
      // and the replica waits for the state instead: Commit, Propose and snapshots refuse until
      // ledgerd has fetched it and opened the replica again (server/state_transfer.h).
      self->awaiting_state_through = std::max(self->awaiting_state_through, index);
      {
        MutexLock lock(&self->mu);
        self->status.needs_state_through = self->awaiting_state_through;
      }
      raft_free(buf->base);
      return 0;
    }
    raft_free(buf->base);
    return 0;
  };
  if (int rv = raft_init(&r.raft, &r.io, &r.fsm, r.options.node_id, self_address.c_str());
      rv != 0) {
    return abandon(absl::InternalError(absl::StrCat("raft_init: ", raft_errmsg(&r.raft))));
  }
  raft_initialized = true;
  r.raft.data = &r;

  raft_configuration configuration;
  raft_configuration_init(&configuration);
  for (const RaftPeer& peer : r.options.peers) {
    if (int rv = raft_configuration_add(&configuration, peer.id, peer.address.c_str(), RAFT_VOTER);
        rv != 0) {
      raft_configuration_close(&configuration);
      return abandon(RaftError("raft_configuration_add", rv));
    }
  }
  // On a directory that holds Raft state already this is RAFT_CANTBOOTSTRAP: the restart of a
  // replica, which keeps its log and configuration.
  const int bootstrapped = raft_bootstrap(&r.raft, &configuration);
  raft_configuration_close(&configuration);
  if (bootstrapped != 0 && bootstrapped != RAFT_CANTBOOTSTRAP) {
    return abandon(RaftError("raft_bootstrap", bootstrapped));
  }
  if (bootstrapped == RAFT_CANTBOOTSTRAP && mirror_created) {
    // Positions would no longer match Raft's indexes.
    return abandon(absl::DataLossError(
        absl::StrCat("the mirror of committed entries (", r.options.log_dir, ") is missing while ",
                     r.options.raft_dir, " holds a Raft log; restore both from a backup")));
  }
  raft_set_election_timeout(
      &r.raft, static_cast<unsigned>(absl::ToInt64Milliseconds(r.options.election_timeout)));
  raft_set_heartbeat_timeout(
      &r.raft, static_cast<unsigned>(absl::ToInt64Milliseconds(r.options.heartbeat_interval)));
  raft_set_snapshot_threshold(&r.raft, r.options.snapshot_threshold);
  // A snapshot here is an 8-byte manifest, so libraft's 30 s for sending one is only how long a
  // leader waits to send it again when the follower ignored it ("already taking or installing
  // snapshot", when it was taking its own): a replica behind waited 30 s for nothing.
  raft_set_install_snapshot_timeout(
      &r.raft, static_cast<unsigned>(std::max<int64_t>(
                   1000, 4 * absl::ToInt64Milliseconds(r.options.election_timeout))));
  raft_set_snapshot_trailing(&r.raft, r.options.snapshot_trailing);
  // Pre-vote (Raft thesis 9.6): a replica cut off for a while cannot depose a healthy leader
  // with a higher term when it returns.
  raft_set_pre_vote(&r.raft, r.options.pre_vote);
  if (int rv = raft_start(&r.raft); rv != 0) {
    // raft_errmsg can be empty (an error of the I/O's); its own message and the code say more.
    return abandon(absl::InternalError(absl::StrCat("raft_start: ", raft_strerror(rv), ": ",
                                                    raft_errmsg(&r.raft), " ", r.io.errmsg)));
  }

  uv_async_init(&r.loop, &r.wake,
                [](uv_async_t* handle) { static_cast<Replica*>(handle->data)->OnWake(); });
  r.wake.data = &r;
  uv_timer_init(&r.loop, &r.retry);
  r.retry.data = &r;
  uv_check_init(&r.loop, &r.check);
  r.check.data = &r;
  // Each iteration, after the I/O's callbacks: first what the guard holds and may now send
  // (never from inside those callbacks, storage/raft_io_guard.h), then the status.
  uv_check_start(&r.check, [](uv_check_t* handle) {
    auto* replica = static_cast<Replica*>(handle->data);
    replica->io_guard.SendHeld();
    replica->Refresh();
  });
  r.thread = std::thread([&r] {
    pthread_setname_np(pthread_self(), "ledger-raft");
    uv_run(&r.loop, UV_RUN_DEFAULT);
    uv_loop_close(&r.loop);
  });
  return std::unique_ptr<RaftLog>(new RaftLog(std::move(replica)));
}

RaftLog::RaftLog(std::unique_ptr<Replica> replica) : replica_(std::move(replica)) {}

RaftLog::~RaftLog() {
  {
    MutexLock lock(&replica_->mu);
    replica_->stopping = true;
  }
  uv_async_send(&replica_->wake);
  replica_->thread.join();
}

absl::StatusOr<uint64_t> RaftLog::Append(absl::string_view payload) {
  Outcome outcome;
  Propose(payload, outcome.Setter());
  return outcome.Wait();
}

void RaftLog::Propose(absl::string_view payload, Decided decided) {
  Replica& r = *replica_;
  absl::Status refused;
  {
    MutexLock lock(&r.mu);
    if (!r.poison.ok()) {
      refused = r.poison;
    } else if (r.stopping) {
      refused = absl::UnavailableError("the replica is stopping");
    } else {
      auto* proposal = new Proposal;
      proposal->payload = std::string(payload);
      // An entry whose outcome is unknown poisons the log on the loop thread, as it is decided,
      // so that no entry queued behind it is proposed (Replica::Propose).
      proposal->decided = [&r, decided = std::move(decided)](absl::StatusOr<uint64_t> outcome) {
        if (absl::IsUnavailable(outcome.status())) {
          MutexLock lock(&r.mu);
          if (r.poison.ok()) r.poison = outcome.status();
        }
        decided(std::move(outcome));
      };
      r.queued.push_back(proposal);
      // Under the lock: never after the destructor's wake, which closes the replica.
      uv_async_send(&r.wake);
      return;
    }
  }
  decided(std::move(refused));  // Refused at once, on this thread.
}

absl::StatusOr<uint64_t> RaftLog::Barrier() {
  Replica& r = *replica_;
  Outcome outcome;
  auto* proposal = new Proposal;
  proposal->barrier = true;
  proposal->decided = outcome.Setter();
  {
    MutexLock lock(&r.mu);
    if (r.stopping) {
      delete proposal;
      return absl::UnavailableError("the replica is stopping");
    }
    r.queued.push_back(proposal);
    uv_async_send(&r.wake);  // Under the lock, as in Propose.
  }
  return outcome.Wait();
}

absl::Status RaftLog::Repair() {
  MutexLock lock(&replica_->mu);
  replica_->poison = absl::OkStatus();
  return absl::OkStatus();
}

absl::Status RaftLog::poisoned() const {
  MutexLock lock(&replica_->mu);
  return replica_->poison;
}

absl::Status RaftLog::ReadFrom(
    uint64_t from,
    const std::function<absl::Status(uint64_t position, absl::string_view payload)>& read) const {
  return replica_->mirror->ReadFrom(from, read);
}

absl::Status RaftLog::Sync() { return replica_->mirror->Sync(); }

absl::StatusOr<std::unique_ptr<LogReader>> RaftLog::NewReader(uint64_t from) const {
  return replica_->mirror->NewReader(from);
}

absl::StatusOr<int> RaftLog::DropBefore(uint64_t position) {
  return replica_->mirror->DropBefore(position);
}

uint64_t RaftLog::first_position() const { return replica_->mirror->first_position(); }
uint64_t RaftLog::last_position() const { return replica_->mirror->last_position(); }
absl::Status RaftLog::PrepareAhead() { return replica_->mirror->PrepareAhead(); }
std::vector<std::string> RaftLog::SegmentPaths() const { return replica_->mirror->SegmentPaths(); }
size_t RaftLog::SegmentCount() const { return replica_->mirror->SegmentCount(); }
int64_t RaftLog::DiskBytes() const { return replica_->mirror->DiskBytes(); }

RaftStatus RaftLog::Status() const {
  MutexLock lock(&replica_->mu);
  return replica_->status;
}

}  // namespace ledger::storage
