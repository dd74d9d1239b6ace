// raft_spike: one replica of a three-voter Raft group built on canonical's libraft 0.15 and its
// libuv I/O, for the replication spike of issue 17 (candidate (a): Raft inside the process).
//
// Every replica runs the same program. Whichever one is leader proposes entries with raft_apply,
// keeping --window of them in flight, and times each from raft_apply to its apply callback. On
// the leader that callback means: committed (stored by a quorum, the leader's own disk counting
// only once its write is durable) and applied to the leader's FSM. An entry stands for one
// group-commit batch of the journal: --entry-ops deposits of 48 bytes each.
//
// Usage:
//   raft_spike --id N --data DIR --bind HOST:PORT --peers 1=H:P,2=H:P,3=H:P
//              [--entry-ops K=1] [--window W=1] [--warmup-ms 1000] [--seconds S=3]
//              [--election-ms 1000] [--heartbeat-ms 100] [--pre-vote 0|1]
//              [--snapshot-threshold 1024]
//   --bind   where this replica listens; --peers holds the addresses the replicas advertise
//            to each other (with the harness, a delay proxy in front of --bind).
//   --data   an existing directory; when it holds no Raft state the three-voter configuration
//            of --peers is bootstrapped into it.
//   --seconds 0  propose for ever and print no result (the failover runs).
//
// Output, one line per event on stdout, `key=value` words, for run_raft.sh to grep:
//   leader id=N term=T realtime_ns=...       this replica became leader
//   first_commit id=N term=T realtime_ns=... first entry it proposed as leader was applied
//   measure_start id=N                       warm-up over, counting from here
//   result id=N k=K w=W seconds=... entries=... commits_per_s=... ops_per_s=... p50_us=...
//          p99_us=... max_us=... cpu_ms=...
//   lost_leadership id=N ...                 stepped down (a result will not follow)
// SIGTERM or SIGINT end the process at once: the driver owns the data directories.

// libraft 0.15's headers lack extern "C" guards, so C++ must add them or fail to link.
extern "C" {
#include <raft.h>
#include <raft/uv.h>
}
#include <sys/resource.h>
#include <uv.h>

#include <algorithm>
#include <charconv>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

#include "bench/replication/spike_util.h"

namespace {

using spike::Die;
using spike::Emit;
using spike::NowNs;
using spike::ParseNumber;

// One journal operation, a deposit, as it would travel inside a replicated batch. The exact
// fields matter less than the size: 48 bytes, so an entry of K operations is K*48 bytes.
struct Deposit {
  uint64_t account_id;
  uint8_t request_id[16];
  int64_t amount_cents;
  uint64_t sequence;
  uint64_t shard_and_flags;
};
static_assert(sizeof(Deposit) == 48);

struct Options {
  raft_id id = 0;
  std::string data_dir;
  std::string bind;
  std::vector<std::pair<raft_id, std::string>> peers;
  unsigned entry_ops = 1;
  unsigned window = 1;
  unsigned warmup_ms = 1000;
  double seconds = 3;
  unsigned election_ms = 1000;
  unsigned heartbeat_ms = 100;
  bool pre_vote = false;  // libraft's default.
  unsigned snapshot_threshold = 1024;
};

int64_t CpuMs() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  auto ms = [](const timeval& tv) { return int64_t{tv.tv_sec} * 1000 + tv.tv_usec / 1000; };
  return ms(usage.ru_utime) + ms(usage.ru_stime);
}

// "1=10.99.0.1:7001,2=10.99.0.2:7002,3=10.99.0.3:7003"
std::vector<std::pair<raft_id, std::string>> ParsePeers(std::string_view text) {
  std::vector<std::pair<raft_id, std::string>> peers;
  while (!text.empty()) {
    std::string_view item = text.substr(0, text.find(','));
    text.remove_prefix(std::min(text.size(), item.size() + 1));
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) Die("bad --peers item: " + std::string(item));
    peers.emplace_back(ParseNumber<raft_id>("--peers", item.substr(0, eq)),
                       std::string(item.substr(eq + 1)));
  }
  return peers;
}

Options ParseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i];
    if (i + 1 >= argc) Die("missing value for " + std::string(flag));
    std::string_view value = argv[++i];
    if (flag == "--id") {
      o.id = ParseNumber<raft_id>(flag, value);
    } else if (flag == "--data") {
      o.data_dir = value;
    } else if (flag == "--bind") {
      o.bind = value;
    } else if (flag == "--peers") {
      o.peers = ParsePeers(value);
    } else if (flag == "--entry-ops") {
      o.entry_ops = ParseNumber<unsigned>(flag, value);
    } else if (flag == "--window") {
      o.window = ParseNumber<unsigned>(flag, value);
    } else if (flag == "--warmup-ms") {
      o.warmup_ms = ParseNumber<unsigned>(flag, value);
    } else if (flag == "--seconds") {
      o.seconds = ParseNumber<double>(flag, value);
    } else if (flag == "--election-ms") {
      o.election_ms = ParseNumber<unsigned>(flag, value);
    } else if (flag == "--heartbeat-ms") {
      o.heartbeat_ms = ParseNumber<unsigned>(flag, value);
    } else if (flag == "--pre-vote") {
      o.pre_vote = ParseNumber<unsigned>(flag, value) != 0;
    } else if (flag == "--snapshot-threshold") {
      o.snapshot_threshold = ParseNumber<unsigned>(flag, value);
    } else {
      Die("unknown flag " + std::string(flag));
    }
  }
  if (o.id == 0 || o.data_dir.empty() || o.bind.empty() || o.peers.empty()) {
    Die("--id, --data, --bind and --peers are required");
  }
  if (o.entry_ops == 0 || o.window == 0) Die("--entry-ops and --window must be positive");
  return o;
}

// The state machine: a stand-in for the shards applying a batch. It walks every deposit so the
// apply cost grows with the entry as the real one would, and keeps a checksum that a snapshot
// carries (libraft snapshots every --snapshot-threshold entries, so the FSM must support it).
struct Counters {
  uint64_t entries = 0;
  uint64_t ops = 0;
  uint64_t checksum = 0;
};

int FsmApply(raft_fsm* fsm, const raft_buffer* buf, void** result) {
  auto* c = static_cast<Counters*>(fsm->data);
  if (buf->len % sizeof(Deposit) != 0) return RAFT_MALFORMED;
  const auto* bytes = static_cast<const unsigned char*>(buf->base);
  for (size_t off = 0; off < buf->len; off += sizeof(Deposit)) {
    Deposit d;
    std::memcpy(&d, bytes + off, sizeof d);  // The batch may not be 8-byte aligned.
    c->checksum =
        (c->checksum ^ (d.account_id + static_cast<uint64_t>(d.amount_cents) + d.sequence)) *
        0x100000001b3ULL;
    ++c->ops;
  }
  ++c->entries;
  *result = nullptr;
  return 0;
}

int FsmSnapshot(raft_fsm* fsm, raft_buffer* bufs[], unsigned* n_bufs) {
  // Version-1 FSM: libraft takes ownership of both allocations and raft_free()s them.
  *bufs = static_cast<raft_buffer*>(raft_malloc(sizeof(raft_buffer)));
  if (*bufs == nullptr) return RAFT_NOMEM;
  (*bufs)[0].len = sizeof(Counters);
  (*bufs)[0].base = raft_malloc(sizeof(Counters));
  if ((*bufs)[0].base == nullptr) return RAFT_NOMEM;
  std::memcpy((*bufs)[0].base, fsm->data, sizeof(Counters));
  *n_bufs = 1;
  return 0;
}

int FsmRestore(raft_fsm* fsm, raft_buffer* buf) {
  if (buf->len != sizeof(Counters)) return RAFT_MALFORMED;
  std::memcpy(fsm->data, buf->base, sizeof(Counters));
  raft_free(buf->base);  // Ours on success, says raft.h.
  return 0;
}

class Replica;

// One raft_apply in flight. libraft needs the request to live until its callback.
struct Proposal {
  struct raft_apply req;  // "struct": the function raft_apply hides the type name in C++.
  Replica* replica;
  int64_t start_ns;  // CLOCK_MONOTONIC at raft_apply.
  raft_term term;    // Term it was proposed in, to spot the first commit of a term.
};

class Replica {
 public:
  explicit Replica(Options options) : o_(std::move(options)) {}

  void Run() {
    // A dead peer's socket must not kill us with SIGPIPE mid-failover.
    std::signal(SIGPIPE, SIG_IGN);
    Check(uv_loop_init(&loop_), "uv_loop_init");

    // The transport listens on --bind but tells peers the --peers address, which is the proxy.
    // raft.h: set the bind address after raft_uv_tcp_init and before raft_init.
    Check(raft_uv_tcp_init(&transport_, &loop_), "raft_uv_tcp_init");
    Check(raft_uv_tcp_set_bind_address(&transport_, o_.bind.c_str()),
          "raft_uv_tcp_set_bind_address");
    Check(raft_uv_init(&io_, &loop_, o_.data_dir.c_str(), &transport_), "raft_uv_init");

    fsm_.version = 1;
    fsm_.data = &counters_;
    fsm_.apply = FsmApply;
    fsm_.snapshot = FsmSnapshot;
    fsm_.restore = FsmRestore;

    std::string self;
    for (const auto& [id, address] : o_.peers) {
      if (id == o_.id) self = address;
    }
    if (self.empty()) Die("--id is not in --peers");
    Check(raft_init(&raft_, &io_, &fsm_, o_.id, self.c_str()), "raft_init");
    raft_.data = this;

    // Every replica bootstraps the same configuration; on a data dir that already holds state
    // this fails with RAFT_CANTBOOTSTRAP, which is how a restart keeps its log.
    raft_configuration conf;
    raft_configuration_init(&conf);
    for (const auto& [id, address] : o_.peers) {
      Check(raft_configuration_add(&conf, id, address.c_str(), RAFT_VOTER),
            "raft_configuration_add");
    }
    int rv = raft_bootstrap(&raft_, &conf);
    if (rv != 0 && rv != RAFT_CANTBOOTSTRAP) Check(rv, "raft_bootstrap");
    raft_configuration_close(&conf);

    // Timeouts before raft_start. The election timeout is a base: libraft draws each follower's
    // and candidate's actual timeout at random in [E, 2E) (raft.h: "randomized between 1x and
    // 2x"), and a leader steps down after E without hearing from a majority.
    raft_set_election_timeout(&raft_, o_.election_ms);
    raft_set_heartbeat_timeout(&raft_, o_.heartbeat_ms);
    raft_set_snapshot_threshold(&raft_, o_.snapshot_threshold);
    // Pre-vote (Raft thesis 9.6): a candidate first asks whether it could win, so a replica cut
    // off for a while cannot raise the term and depose a healthy leader when it returns.
    raft_set_pre_vote(&raft_, o_.pre_vote);
    Check(raft_start(&raft_), "raft_start");

    // A check handle runs once per loop iteration, after the I/O callbacks. Topping the window
    // up there, rather than inside the apply callback, keeps raft_apply out of libraft's own
    // callback stack and lets every completion of one iteration refill together.
    uv_check_init(&loop_, &check_);
    check_.data = this;
    uv_check_start(&check_, [](uv_check_t* h) { static_cast<Replica*>(h->data)->OnIteration(); });

    // The phases (warm-up, measuring) are time-based; a timer makes sure they advance even if
    // commits stall.
    uv_timer_init(&loop_, &timer_);
    timer_.data = this;
    uv_timer_start(
        &timer_, [](uv_timer_t* h) { static_cast<Replica*>(h->data)->OnIteration(); }, 10, 10);

    for (int signum : {SIGTERM, SIGINT}) {
      uv_signal_t* s = signum == SIGTERM ? &sigterm_ : &sigint_;
      uv_signal_init(&loop_, s);
      uv_signal_start(
          s,
          [](uv_signal_t*, int) {
            // No graceful raft_close: the driver discards the data dirs, and an abrupt end is
            // what a crash looks like anyway.
            std::fflush(stdout);
            std::_Exit(0);
          },
          signum);
    }
    uv_run(&loop_, UV_RUN_DEFAULT);
  }

 private:
  enum class Phase { kFollower, kWarmup, kMeasuring, kDone };

  static void Check(int rv, const char* what) {
    if (rv != 0) Die(std::string(what) + ": " + raft_strerror(rv));
  }

  void OnIteration() {
    const bool leader = raft_state(&raft_) == RAFT_LEADER;
    const int64_t now = NowNs(CLOCK_MONOTONIC);
    if (leader && phase_ == Phase::kFollower) {
      BecomeLeader(now);
    } else if (!leader && phase_ != Phase::kFollower) {
      Emit("lost_leadership id=%llu term=%llu realtime_ns=%lld\n", o_.id, raft_.current_term,
           static_cast<long long>(NowNs(CLOCK_REALTIME)));
      phase_ = Phase::kFollower;
    }
    if (phase_ == Phase::kWarmup && o_.seconds > 0 && now >= measure_start_ns_) {
      StartMeasuring(now);
    }
    if (phase_ == Phase::kMeasuring && now >= measure_end_ns_) FinishMeasuring(now);
    if (phase_ == Phase::kWarmup || phase_ == Phase::kMeasuring) {
      while (in_flight_ < o_.window && Propose(now)) {
      }
    }
  }

  void BecomeLeader(int64_t now) {
    leader_term_ = raft_.current_term;
    first_commit_logged_ = false;
    Emit("leader id=%llu term=%llu realtime_ns=%lld\n", o_.id, leader_term_,
         static_cast<long long>(NowNs(CLOCK_REALTIME)));
    phase_ = Phase::kWarmup;
    measure_start_ns_ = now + int64_t{o_.warmup_ms} * 1'000'000;
  }

  void StartMeasuring(int64_t now) {
    phase_ = Phase::kMeasuring;
    measure_end_ns_ = now + static_cast<int64_t>(o_.seconds * 1e9);
    measured_start_ns_ = now;
    measured_cpu_ms_ = CpuMs();
    latencies_ns_.clear();
    latencies_ns_.reserve(1 << 20);
    Emit("measure_start id=%llu\n", o_.id);
  }

  void FinishMeasuring(int64_t now) {
    phase_ = Phase::kDone;
    const double secs = static_cast<double>(now - measured_start_ns_) / 1e9;
    const size_t n = latencies_ns_.size();
    auto percentile_us = [&](double p) {
      if (n == 0) return 0.0;
      size_t k = std::min(n - 1, static_cast<size_t>(p * static_cast<double>(n)));
      std::nth_element(latencies_ns_.begin(), latencies_ns_.begin() + static_cast<long>(k),
                       latencies_ns_.end());
      return static_cast<double>(latencies_ns_[k]) / 1e3;
    };
    const double p50 = percentile_us(0.50);
    const double p99 = percentile_us(0.99);
    const double max_us =
        n == 0
            ? 0.0
            : static_cast<double>(*std::max_element(latencies_ns_.begin(), latencies_ns_.end())) /
                  1e3;
    Emit(
        "result id=%llu k=%u w=%u seconds=%.3f entries=%zu commits_per_s=%.0f ops_per_s=%.0f "
        "p50_us=%.0f p99_us=%.0f max_us=%.0f cpu_ms=%lld fsm_entries=%llu fsm_checksum=%llx\n",
        o_.id, o_.entry_ops, o_.window, secs, n, static_cast<double>(n) / secs,
        static_cast<double>(n) * o_.entry_ops / secs, p50, p99, max_us,
        static_cast<long long>(CpuMs() - measured_cpu_ms_),
        static_cast<unsigned long long>(counters_.entries),
        static_cast<unsigned long long>(counters_.checksum));
  }

  bool Propose(int64_t now) {
    // raft_apply takes ownership of buf.base, which must come from raft_malloc.
    raft_buffer buf;
    buf.len = size_t{o_.entry_ops} * sizeof(Deposit);
    buf.base = raft_malloc(buf.len);
    if (buf.base == nullptr) Die("out of memory");
    auto* ops = static_cast<Deposit*>(buf.base);
    for (unsigned i = 0; i < o_.entry_ops; ++i) {
      Deposit& d = ops[i];
      d.account_id = next_sequence_ % 100'000;
      std::memset(d.request_id, 0, sizeof d.request_id);
      std::memcpy(d.request_id, &next_sequence_, sizeof next_sequence_);
      d.amount_cents = 100;
      d.sequence = next_sequence_++;
      d.shard_and_flags = 0;
    }
    auto* p = new Proposal{};
    p->req.data = p;
    p->replica = this;
    p->start_ns = now;
    p->term = leader_term_;
    int rv = raft_apply(&raft_, &p->req, &buf, 1, OnApplied);
    if (rv != 0) {
      // NOTLEADER here just means we lost leadership since the last check.
      raft_free(buf.base);
      delete p;
      if (rv != RAFT_NOTLEADER) Die(std::string("raft_apply: ") + raft_strerror(rv));
      return false;
    }
    ++in_flight_;
    return true;
  }

  static void OnApplied(struct raft_apply* req, int status, void* /*result*/) {
    auto* p = static_cast<Proposal*>(req->data);
    Replica* self = p->replica;
    --self->in_flight_;
    if (status == 0) {
      const int64_t now = NowNs(CLOCK_MONOTONIC);
      if (!self->first_commit_logged_ && p->term == self->leader_term_) {
        self->first_commit_logged_ = true;
        Emit("first_commit id=%llu term=%llu realtime_ns=%lld latency_us=%lld\n", self->o_.id,
             p->term, static_cast<long long>(NowNs(CLOCK_REALTIME)),
             static_cast<long long>((now - p->start_ns) / 1000));
      }
      if (self->phase_ == Phase::kMeasuring) self->latencies_ns_.push_back(now - p->start_ns);
    }
    // On failure (RAFT_LEADERSHIPLOST, RAFT_SHUTDOWN) libraft has already released the buffer.
    delete p;
  }

  Options o_;
  uv_loop_t loop_{};
  raft_uv_transport transport_{};
  raft_io io_{};
  raft_fsm fsm_{};
  raft raft_{};
  uv_check_t check_{};
  uv_timer_t timer_{};
  uv_signal_t sigterm_{};
  uv_signal_t sigint_{};
  Counters counters_;

  Phase phase_ = Phase::kFollower;
  raft_term leader_term_ = 0;
  bool first_commit_logged_ = false;
  unsigned in_flight_ = 0;
  uint64_t next_sequence_ = 1;
  int64_t measure_start_ns_ = 0;
  int64_t measure_end_ns_ = 0;
  int64_t measured_start_ns_ = 0;
  int64_t measured_cpu_ms_ = 0;
  std::vector<int64_t> latencies_ns_;
};

}  // namespace

int main(int argc, char** argv) {
  Replica replica(ParseOptions(argc, argv));
  replica.Run();
  return 0;
}
