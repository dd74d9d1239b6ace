// shape_bench: one replica of a three-node cluster running G Raft groups (libraft 0.15, libuv I/O,
// all groups on one loop thread), for issue 32's first deliverable: one Raft group per cluster
// (G = 1, one log for every shard, as the group commit is today) against one group per partition
// (G = 64, docs/replication.md 2.1), measured on ledgerd's real log entries.
//
// The entries come from a trace that bench/log_trace.cc makes of a ledgerd data directory: each
// record is one group commit as the journal thread encoded it, whole and split by partition.
// With G = 1 the proposer proposes the whole entry to the one group; with G > 1 it proposes each
// partition's part to group (partition mod G), and the group commit is done when every part has
// been applied, as the journal would release its answers. The trace is replayed in a loop.
//
// Modes:
//   --mode throughput  Replica 1 proposes. Every other replica hands each group it leads over to
//                      replica 1 (raft_transfer), so that one proposer leads every group; once
//                      it does, it warms up for --warmup-ms, then measures --seconds of group
//                      commits with --window of them in flight.
//   --mode failover    Every replica proposes a small entry on each group it leads, one in
//                      flight per group, for ever: leaders spread over the replicas as elections
//                      place them, as a cluster would run. The driver kills one and reads when
//                      each group it led committed again.
//
// Snapshots: each group takes one every --snapshot-threshold of its entries (libraft's trigger).
// As docs/replication.md 3.1 plans, what libraft stores and sends is a small manifest; the
// checkpoint it names is ledgerd's own, and its disk work (--checkpoint-mb / G per group,
// written and fdatasynced) runs inside the snapshot callback, on the loop thread that every
// group of the node shares: libraft 0.15's uv I/O cannot run snapshots asynchronously.
//
// Output lines (key=value words) on stdout, for run_shape.py:
//   leader id=N group=G term=T realtime_ns=...        this replica now leads group G
//   first_commit id=N group=G term=T realtime_ns=...  first entry of its term applied (failover)
//   lost_leadership id=N group=G realtime_ns=...
//   measure_start id=N realtime_ns=...
//   result id=N groups=G w=W seconds=... commits=... entries=... ops=... commits_per_s=...
//          ops_per_s=... p50_us=... p99_us=... max_us=... snapshots=... realtime_ns=...
// SIGTERM or SIGINT end the process at once: the driver owns the data directories.

// libraft 0.15's headers lack extern "C" guards.
extern "C" {
#include <raft.h>
#include <raft/uv.h>
}
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <charconv>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bench/replication/spike_util.h"
#include "storage/raft_nodelay.h"

namespace {

using spike::Die;
using spike::Emit;
using spike::NowNs;
using spike::ParseNumber;

struct Peer {
  raft_id id;
  std::string host;
  unsigned port_base;  // Group g of this replica is reached at host:(port_base + g).
};

struct Options {
  raft_id id = 0;
  std::string data_dir;
  std::string bind_host = "127.0.0.1";
  unsigned local_port_base = 0;  // Group g binds bind_host:(local_port_base + g).
  std::vector<Peer> peers;
  unsigned groups = 1;
  std::string mode = "throughput";
  std::string trace;
  size_t trace_entries = 4000;
  unsigned window = 1;
  unsigned warmup_ms = 1000;
  double seconds = 3;
  unsigned election_ms = 300;
  unsigned heartbeat_ms = 50;
  bool pre_vote = true;
  unsigned snapshot_threshold = 1024;
  double checkpoint_mb = 0;
};

// "1=10.99.0.1:7100,2=10.99.0.2:7200,3=10.99.0.3:7300"
std::vector<Peer> ParsePeers(std::string_view text) {
  std::vector<Peer> peers;
  while (!text.empty()) {
    std::string_view item = text.substr(0, text.find(','));
    text.remove_prefix(std::min(text.size(), item.size() + 1));
    const size_t eq = item.find('=');
    const size_t colon = item.rfind(':');
    if (eq == std::string_view::npos || colon == std::string_view::npos || colon < eq) {
      Die("bad --peers item: " + std::string(item));
    }
    peers.push_back(Peer{ParseNumber<raft_id>("--peers", item.substr(0, eq)),
                         std::string(item.substr(eq + 1, colon - eq - 1)),
                         ParseNumber<unsigned>("--peers", item.substr(colon + 1))});
  }
  return peers;
}

Options ParseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (i + 1 >= argc) Die("missing value for " + std::string(flag));
    const std::string_view value = argv[++i];
    if (flag == "--id") {
      o.id = ParseNumber<raft_id>(flag, value);
    } else if (flag == "--data") {
      o.data_dir = value;
    } else if (flag == "--bind-host") {
      o.bind_host = value;
    } else if (flag == "--local-port-base") {
      o.local_port_base = ParseNumber<unsigned>(flag, value);
    } else if (flag == "--peers") {
      o.peers = ParsePeers(value);
    } else if (flag == "--groups") {
      o.groups = ParseNumber<unsigned>(flag, value);
    } else if (flag == "--mode") {
      o.mode = value;
    } else if (flag == "--trace") {
      o.trace = value;
    } else if (flag == "--trace-entries") {
      o.trace_entries = ParseNumber<size_t>(flag, value);
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
    } else if (flag == "--checkpoint-mb") {
      o.checkpoint_mb = ParseNumber<double>(flag, value);
    } else {
      Die("unknown flag " + std::string(flag));
    }
  }
  if (o.id == 0 || o.data_dir.empty() || o.local_port_base == 0 || o.peers.empty()) {
    Die("--id, --data, --local-port-base and --peers are required");
  }
  if (o.groups == 0 || o.groups > 1024 || o.window == 0) Die("--groups 1..1024, --window > 0");
  if (o.mode != "throughput" && o.mode != "failover") Die("--mode throughput or failover");
  if (o.mode == "throughput" && o.trace.empty()) Die("--mode throughput needs --trace");
  return o;
}

// One group commit of the trace: the whole entry, and its parts by partition.
struct TracedCommit {
  uint32_t operations = 0;
  std::string whole;
  std::vector<std::pair<uint16_t, std::string>> parts;
};

std::vector<TracedCommit> LoadTrace(const std::string& path, size_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Die("cannot read " + path);
  auto u32 = [&in]() {
    unsigned char b[4];
    if (!in.read(reinterpret_cast<char*>(b), 4)) return uint32_t{0xFFFFFFFF};
    return uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
  };
  auto bytes = [&in, &path](uint32_t n) {
    std::string s(n, '\0');
    if (!in.read(s.data(), n)) Die("truncated trace " + path);
    return s;
  };
  std::vector<TracedCommit> commits;
  while (commits.size() < limit) {
    TracedCommit c;
    c.operations = u32();
    if (!in) break;  // The end of the trace.
    c.whole = bytes(u32());
    const uint32_t parts = u32();
    for (uint32_t i = 0; i < parts; ++i) {
      unsigned char p[2];
      if (!in.read(reinterpret_cast<char*>(p), 2)) Die("truncated trace " + path);
      const auto partition = static_cast<uint16_t>(p[0] | p[1] << 8);
      c.parts.emplace_back(partition, bytes(u32()));
    }
    commits.push_back(std::move(c));
  }
  if (commits.empty()) Die("no entries in " + path);
  return commits;
}

class Node;

// One Raft group's replica on this node: its transport, I/O, state machine and raft instance.
struct Group {
  Node* node = nullptr;
  unsigned index = 0;
  std::string dir;
  // libraft's TCP transport with Nagle's algorithm off, as RaftLog runs it.
  ledger::storage::NodelayTransport nodelay;
  raft_uv_transport& transport = nodelay.transport;
  raft_io io{};
  raft_fsm fsm{};
  raft raft_{};
  uint64_t applied_bytes = 0;  // The state machine's state: what it has applied.
  uint64_t snapshots = 0;
  struct raft_transfer transfer {};
  bool transfer_pending = false;
  raft_term led_term = 0;  // The term this replica leads the group in; 0 when it does not.
  bool first_commit_logged = false;
  unsigned in_flight = 0;  // Failover mode's proposals.
};

// One group commit in flight: how many of its parts are still to be applied.
struct Commit {
  int64_t start_ns = 0;
  uint32_t operations = 0;
  unsigned parts_left = 0;
  bool failed = false;
};

struct Proposal {
  struct raft_apply req;
  Group* group;
  std::shared_ptr<Commit> commit;  // Null in failover mode.
  raft_term term;
};

int FsmApply(raft_fsm* fsm, const raft_buffer* buf, void** result) {
  auto* group = static_cast<Group*>(fsm->data);
  group->applied_bytes += buf->len;
  *result = nullptr;
  return 0;
}

int WriteCheckpoint(const Group& group);

// The manifest libraft stores and sends: which checkpoint, and how much was applied.
int FsmSnapshot(raft_fsm* fsm, raft_buffer* bufs[], unsigned* n_bufs) {
  auto* group = static_cast<Group*>(fsm->data);
  *bufs = static_cast<raft_buffer*>(std::malloc(sizeof(raft_buffer)));
  if (*bufs == nullptr) return RAFT_NOMEM;
  (*bufs)[0].len = sizeof(uint64_t);
  (*bufs)[0].base = std::malloc(sizeof(uint64_t));
  if ((*bufs)[0].base == nullptr) return RAFT_NOMEM;
  std::memcpy((*bufs)[0].base, &group->applied_bytes, sizeof(uint64_t));
  *n_bufs = 1;
  ++group->snapshots;
  return WriteCheckpoint(*group);
}

int FsmSnapshotFinalize(raft_fsm* /*fsm*/, raft_buffer* bufs[], unsigned* n_bufs) {
  for (unsigned i = 0; i < *n_bufs; ++i) std::free((*bufs)[i].base);
  std::free(*bufs);
  *bufs = nullptr;
  *n_bufs = 0;
  return 0;
}

int FsmRestore(raft_fsm* fsm, raft_buffer* buf) {
  if (buf->len != sizeof(uint64_t)) return RAFT_MALFORMED;
  std::memcpy(&static_cast<Group*>(fsm->data)->applied_bytes, buf->base, sizeof(uint64_t));
  raft_free(buf->base);
  return 0;
}

class Node {
 public:
  explicit Node(Options options) : o_(std::move(options)) {
    if (!o_.trace.empty()) trace_ = LoadTrace(o_.trace, o_.trace_entries);
    checkpoint_bytes_ = static_cast<size_t>(o_.checkpoint_mb * 1048576.0 / o_.groups);
  }

  size_t checkpoint_bytes() const { return checkpoint_bytes_; }

  void Run() {
    std::signal(SIGPIPE, SIG_IGN);
    if (uv_loop_init(&loop_) != 0) Die("uv_loop_init");
    groups_.reserve(o_.groups);
    for (unsigned g = 0; g < o_.groups; ++g) groups_.push_back(std::make_unique<Group>());
    for (unsigned g = 0; g < o_.groups; ++g) StartGroup(*groups_[g], g);

    uv_check_init(&loop_, &check_);
    check_.data = this;
    uv_check_start(&check_, [](uv_check_t* h) { static_cast<Node*>(h->data)->OnIteration(); });
    uv_timer_init(&loop_, &timer_);
    timer_.data = this;
    uv_timer_start(
        &timer_, [](uv_timer_t* h) { static_cast<Node*>(h->data)->OnIteration(); }, 10, 10);
    for (uv_signal_t* s : {&sigterm_, &sigint_}) {
      uv_signal_init(&loop_, s);
      uv_signal_start(
          s,
          [](uv_signal_t*, int) {
            std::fflush(stdout);
            std::_Exit(0);
          },
          s == &sigterm_ ? SIGTERM : SIGINT);
    }
    uv_run(&loop_, UV_RUN_DEFAULT);
  }

 private:
  enum class Phase { kGathering, kWarmup, kMeasuring, kDone };

  static void Check(int rv, const char* what) {
    if (rv != 0) Die(std::string(what) + ": " + raft_strerror(rv));
  }

  std::string Address(const Peer& peer, unsigned group) const {
    return peer.host + ":" + std::to_string(peer.port_base + group);
  }

  void StartGroup(Group& group, unsigned g) {
    group.node = this;
    group.index = g;
    group.dir = o_.data_dir + "/g" + std::to_string(g);
    mkdir(group.dir.c_str(), 0755);
    const std::string bind = o_.bind_host + ":" + std::to_string(o_.local_port_base + g);
    Check(raft_uv_tcp_init(&group.transport, &loop_), "raft_uv_tcp_init");
    ledger::storage::TurnNagleOff(group.nodelay);
    Check(raft_uv_tcp_set_bind_address(&group.transport, bind.c_str()), "bind address");
    Check(raft_uv_init(&group.io, &loop_, group.dir.c_str(), &group.transport), "raft_uv_init");
    group.fsm.version = 2;
    group.fsm.data = &group;
    group.fsm.apply = FsmApply;
    group.fsm.snapshot = FsmSnapshot;
    group.fsm.restore = FsmRestore;
    group.fsm.snapshot_finalize = FsmSnapshotFinalize;
    std::string self;
    for (const Peer& peer : o_.peers) {
      if (peer.id == o_.id) self = Address(peer, g);
    }
    if (self.empty()) Die("--id is not in --peers");
    if (const int rv = raft_init(&group.raft_, &group.io, &group.fsm, o_.id, self.c_str())) {
      Die("raft_init: " + std::to_string(rv) + " " + raft_errmsg(&group.raft_));
    }
    raft_configuration conf;
    raft_configuration_init(&conf);
    for (const Peer& peer : o_.peers) {
      Check(raft_configuration_add(&conf, peer.id, Address(peer, g).c_str(), RAFT_VOTER),
            "raft_configuration_add");
    }
    const int rv = raft_bootstrap(&group.raft_, &conf);
    if (rv != 0 && rv != RAFT_CANTBOOTSTRAP) Check(rv, "raft_bootstrap");
    raft_configuration_close(&conf);
    raft_set_election_timeout(&group.raft_, o_.election_ms);
    raft_set_heartbeat_timeout(&group.raft_, o_.heartbeat_ms);
    raft_set_snapshot_threshold(&group.raft_, o_.snapshot_threshold);
    raft_set_pre_vote(&group.raft_, o_.pre_vote);
    Check(raft_start(&group.raft_), "raft_start");
  }

  void OnIteration() {
    const int64_t now = NowNs(CLOCK_MONOTONIC);
    unsigned led = 0;
    for (auto& g : groups_) {
      Group& group = *g;
      const bool leader = raft_state(&group.raft_) == RAFT_LEADER;
      if (leader && group.led_term != group.raft_.current_term) {
        group.led_term = group.raft_.current_term;
        group.first_commit_logged = false;
        Emit("leader id=%llu group=%u term=%llu realtime_ns=%lld\n", o_.id, group.index,
             group.led_term, static_cast<long long>(NowNs(CLOCK_REALTIME)));
      } else if (!leader && group.led_term != 0) {
        group.led_term = 0;
        Emit("lost_leadership id=%llu group=%u realtime_ns=%lld\n", o_.id, group.index,
             static_cast<long long>(NowNs(CLOCK_REALTIME)));
      }
      if (group.led_term != 0) ++led;
      if (o_.mode == "throughput" && o_.id != 1 && group.led_term != 0 && !group.transfer_pending) {
        group.transfer.data = &group;
        if (raft_transfer(&group.raft_, &group.transfer, 1, [](struct raft_transfer* req) {
              static_cast<Group*>(req->data)->transfer_pending = false;
            }) == 0) {
          group.transfer_pending = true;
        }
      }
      if (o_.mode == "failover" && group.led_term != 0) {
        while (group.in_flight < 1 && ProposeSmall(group, now)) {
        }
      }
    }
    if (o_.mode != "throughput" || o_.id != 1) return;
    if (phase_ == Phase::kGathering && led == o_.groups) {
      phase_ = Phase::kWarmup;
      measure_start_ns_ = now + int64_t{o_.warmup_ms} * 1'000'000;
    }
    if (phase_ == Phase::kWarmup && now >= measure_start_ns_) StartMeasuring(now);
    if (phase_ == Phase::kMeasuring && now >= measure_end_ns_) FinishMeasuring(now);
    if (phase_ == Phase::kWarmup || phase_ == Phase::kMeasuring) {
      while (in_flight_ < o_.window && ProposeCommit(now)) {
      }
    }
  }

  void StartMeasuring(int64_t now) {
    phase_ = Phase::kMeasuring;
    measure_end_ns_ = now + static_cast<int64_t>(o_.seconds * 1e9);
    measured_start_ns_ = now;
    latencies_ns_.clear();
    measured_ops_ = 0;
    measured_entries_ = 0;
    snapshots_at_start_ = Snapshots();
    Emit("measure_start id=%llu realtime_ns=%lld\n", o_.id,
         static_cast<long long>(NowNs(CLOCK_REALTIME)));
  }

  uint64_t Snapshots() const {
    uint64_t n = 0;
    for (const auto& g : groups_) n += g->snapshots;
    return n;
  }

  void FinishMeasuring(int64_t now) {
    phase_ = Phase::kDone;
    const double secs = static_cast<double>(now - measured_start_ns_) / 1e9;
    const size_t n = latencies_ns_.size();
    auto percentile_us = [&](double p) {
      if (n == 0) return 0.0;
      const size_t k = std::min(n - 1, static_cast<size_t>(p * static_cast<double>(n)));
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
        "result id=%llu groups=%u w=%u seconds=%.3f commits=%zu entries=%llu ops=%llu "
        "commits_per_s=%.0f ops_per_s=%.0f p50_us=%.0f p99_us=%.0f max_us=%.0f snapshots=%llu "
        "failed=%llu realtime_ns=%lld\n",
        o_.id, o_.groups, o_.window, secs, n, static_cast<unsigned long long>(measured_entries_),
        static_cast<unsigned long long>(measured_ops_), static_cast<double>(n) / secs,
        static_cast<double>(measured_ops_) / secs, p50, p99, max_us,
        static_cast<unsigned long long>(Snapshots() - snapshots_at_start_),
        static_cast<unsigned long long>(failed_), static_cast<long long>(NowNs(CLOCK_REALTIME)));
  }

  // raft_apply takes ownership of the buffer, which must come from raft_malloc.
  bool Apply(Group& group, std::string_view bytes, std::shared_ptr<Commit> commit) {
    raft_buffer buf;
    buf.len = std::max<size_t>(bytes.size(), 1);
    buf.base = raft_malloc(buf.len);
    if (buf.base == nullptr) Die("out of memory");
    std::memcpy(buf.base, bytes.data(), bytes.size());
    auto* p = new Proposal{};
    p->req.data = p;
    p->group = &group;
    p->commit = std::move(commit);
    p->term = group.led_term;
    const int rv = raft_apply(&group.raft_, &p->req, &buf, 1, OnApplied);
    if (rv != 0) {
      raft_free(buf.base);
      delete p;
      if (rv != RAFT_NOTLEADER && rv != RAFT_LEADERSHIPLOST) {
        Die(std::string("raft_apply: ") + raft_strerror(rv));
      }
      return false;
    }
    return true;
  }

  bool ProposeCommit(int64_t now) {
    const TracedCommit& traced = trace_[next_commit_++ % trace_.size()];
    auto commit = std::make_shared<Commit>();
    commit->start_ns = now;
    commit->operations = traced.operations;
    if (o_.groups == 1) {
      commit->parts_left = 1;
      if (!Apply(*groups_[0], traced.whole, commit)) return false;
    } else {
      commit->parts_left = static_cast<unsigned>(traced.parts.size());
      for (const auto& [partition, bytes] : traced.parts) {
        if (!Apply(*groups_[partition % o_.groups], bytes, commit)) {
          // Leadership lost mid-commit: the parts already proposed finish on their own.
          commit->failed = true;
          commit->parts_left = 0;
          return false;
        }
      }
    }
    ++in_flight_;
    return true;
  }

  bool ProposeSmall(Group& group, int64_t /*now*/) {
    static const std::string kSmall(256, 'x');  // About one unary Deposit's part.
    if (!Apply(group, kSmall, nullptr)) return false;
    ++group.in_flight;
    return true;
  }

  static void OnApplied(struct raft_apply* req, int status, void* /*result*/) {
    auto* p = static_cast<Proposal*>(req->data);
    Group& group = *p->group;
    Node* self = group.node;
    const int64_t now = NowNs(CLOCK_MONOTONIC);
    if (status == 0 && !group.first_commit_logged && p->term == group.led_term) {
      group.first_commit_logged = true;
      Emit("first_commit id=%llu group=%u term=%llu realtime_ns=%lld\n", self->o_.id, group.index,
           p->term, static_cast<long long>(NowNs(CLOCK_REALTIME)));
    }
    if (p->commit == nullptr) {
      --group.in_flight;
    } else {
      Commit& c = *p->commit;
      if (status != 0) c.failed = true;
      if (self->phase_ == Phase::kMeasuring) ++self->measured_entries_;
      if (c.parts_left > 0 && --c.parts_left == 0) {
        --self->in_flight_;
        if (c.failed) {
          ++self->failed_;
        } else if (self->phase_ == Phase::kMeasuring && c.start_ns >= self->measured_start_ns_) {
          self->latencies_ns_.push_back(now - c.start_ns);
          self->measured_ops_ += c.operations;
        }
      }
    }
    delete p;
  }

  Options o_;
  std::vector<TracedCommit> trace_;
  size_t checkpoint_bytes_ = 0;
  uv_loop_t loop_{};
  std::vector<std::unique_ptr<Group>> groups_;
  uv_check_t check_{};
  uv_timer_t timer_{};
  uv_signal_t sigterm_{};
  uv_signal_t sigint_{};

  Phase phase_ = Phase::kGathering;
  unsigned in_flight_ = 0;
  size_t next_commit_ = 0;
  int64_t measure_start_ns_ = 0;
  int64_t measure_end_ns_ = 0;
  int64_t measured_start_ns_ = 0;
  uint64_t measured_ops_ = 0;
  uint64_t measured_entries_ = 0;
  uint64_t snapshots_at_start_ = 0;
  uint64_t failed_ = 0;
  std::vector<int64_t> latencies_ns_;
};

// The checkpoint a snapshot names: the group's share of --checkpoint-mb written to a file and
// fdatasynced, as a RocksDB checkpoint's flush would. On the loop thread: libraft 0.15's uv I/O
// is version 1, without the async_work that asynchronous snapshots (raft_fsm version 3) need
// (raft_init refuses them: "async snapshot requires io->version > 1").
int WriteCheckpoint(const Group& group) {
  const size_t bytes = group.node->checkpoint_bytes();
  if (bytes == 0) return 0;
  const std::string path = group.dir + "/checkpoint";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return RAFT_IOERR;
  static const std::string kBlock(1 << 20, 'c');
  size_t written = 0;
  while (written < bytes) {
    const size_t n = std::min(kBlock.size(), bytes - written);
    if (write(fd, kBlock.data(), n) != static_cast<ssize_t>(n)) {
      close(fd);
      return RAFT_IOERR;
    }
    written += n;
  }
  const int synced = fdatasync(fd);
  close(fd);
  return synced == 0 ? 0 : RAFT_IOERR;
}

}  // namespace

int main(int argc, char** argv) {
  Node node(ParseOptions(argc, argv));
  node.Run();
  return 0;
}
