// nats_spike: candidate (b) of issue 17 (docs/replication.md), an external replicated log as
// ledgerd's journal. The journal is a NATS JetStream stream `LEDGER` (file storage, three
// replicas); a group-commit batch of K deposits becomes one message of K*48 bytes, and a batch
// counts as committed when its PubAck arrives, which JetStream sends only after the stream's Raft
// group has stored the entry on a quorum.
//
//   nats_spike setup    --servers U1,U2,U3            (re)create the stream, wait for a leader
//   nats_spike info     --servers U1,U2,U3            print stream leader and replica state
//   nats_spike bench    --servers ... --window W --ops K [--warmup-s 1] [--seconds 3]
//                       [--repeats 3]                 throughput and commit latency
//   nats_spike failover --servers ... --kill-file F [--pub-timeout-ms 250]
//                                                     W=1 publisher that times the gap around a
//                                                     leader kill (see run_nats.sh)
//   nats_spike stepdown --servers U1,U2,U3         ask the stream's leader to step down; wait
//                                                     for a successor with all replicas current
//   nats_spike kill PID FILE                          SIGKILL PID, write the CLOCK_REALTIME ns of
//                                                     the kill to FILE
//
// Output is `key=value` lines so that run_nats.sh can grep them into its table.
#include <nats/nats.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr const char* kStream = "LEDGER";
constexpr const char* kSubject = "ledger.journal";

// One journal operation, a deposit. 48 bytes as in the issue: what ledgerd's journal record
// carries for a deposit (account, idempotency key, amount, journal sequence) plus a checksum slot.
struct Deposit {
  uint64_t account_id;
  std::array<uint8_t, 16> request_id;
  int64_t amount_minor;
  uint64_t sequence;  // the first op of a message carries the message's index (see Bench)
  uint64_t checksum;
};
static_assert(sizeof(Deposit) == 48);

int64_t Nanos(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}
// Latency and windows use the monotonic clock; failover uses CLOCK_REALTIME because the kill
// happens in another process (and network namespace, which does not virtualise clocks).
int64_t MonoNs() { return Nanos(CLOCK_MONOTONIC); }
int64_t RealNs() { return Nanos(CLOCK_REALTIME); }

double CpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

[[noreturn]] void Die(const char* what, natsStatus s, jsErrCode jerr = static_cast<jsErrCode>(0)) {
  std::fprintf(stderr, "nats_spike: %s: %s (jerr=%d) %s\n", what, natsStatus_GetText(s),
               static_cast<int>(jerr), nats_GetLastError(nullptr));
  std::exit(1);
}

void Check(const char* what, natsStatus s, jsErrCode jerr = static_cast<jsErrCode>(0)) {
  if (s != NATS_OK) Die(what, s, jerr);
}

struct Args {
  std::string command;
  std::vector<std::string> servers;
  int window = 1;
  int ops = 1;
  double warmup_s = 1;
  double seconds = 3;
  int repeats = 3;
  std::string kill_file;
  int64_t pub_timeout_ms = 250;
};

// A whole, non-negative number or exit 2 naming the option: atoi's silent 0 would start a run
// that measures nothing.
template <typename T>
T ParseNumber(const std::string& key, const std::string& text) {
  T value{};
  const char* end = text.data() + text.size();
  auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || stop != end || value < T{0}) {
    std::fprintf(stderr, "nats_spike: %s wants a non-negative number, not '%s'\n", key.c_str(),
                 text.c_str());
    std::exit(2);
  }
  return value;
}

Args Parse(int argc, char** argv) {
  Args a;
  if (argc < 2) {
    std::fprintf(stderr, "usage: see the comment at the top of nats_spike.cc\n");
    std::exit(2);
  }
  a.command = argv[1];
  if (argc % 2 != 0) {
    std::fprintf(stderr, "nats_spike: option %s has no value\n", argv[argc - 1]);
    std::exit(2);
  }
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--servers") {
      for (size_t start = 0; start <= value.size();) {
        const size_t comma = std::min(value.find(',', start), value.size());
        a.servers.push_back(value.substr(start, comma - start));
        start = comma + 1;
      }
    } else if (key == "--window") {
      a.window = ParseNumber<int>(key, value);
    } else if (key == "--ops") {
      a.ops = ParseNumber<int>(key, value);
    } else if (key == "--warmup-s") {
      a.warmup_s = ParseNumber<double>(key, value);
    } else if (key == "--seconds") {
      a.seconds = ParseNumber<double>(key, value);
    } else if (key == "--repeats") {
      a.repeats = ParseNumber<int>(key, value);
    } else if (key == "--kill-file") {
      a.kill_file = value;
    } else if (key == "--pub-timeout-ms") {
      a.pub_timeout_ms = ParseNumber<int64_t>(key, value);
    } else {
      std::fprintf(stderr, "nats_spike: unknown option %s\n", key.c_str());
      std::exit(2);
    }
  }
  if (a.window == 0 || a.ops == 0 || a.seconds == 0 || a.repeats == 0 || a.pub_timeout_ms == 0) {
    std::fprintf(stderr,
                 "nats_spike: --window, --ops, --seconds, --repeats and --pub-timeout-ms "
                 "must be positive\n");
    std::exit(2);
  }
  return a;
}

// Connection events, stamped with CLOCK_REALTIME for the failover timeline. The callbacks run on
// the library's own thread, hence the atomics.
std::atomic<int64_t> g_disconnected_ns{0};
std::atomic<int64_t> g_reconnected_ns{0};
void OnDisconnected(natsConnection*, void*) { g_disconnected_ns = RealNs(); }
void OnReconnected(natsConnection*, void*) { g_reconnected_ns = RealNs(); }

struct Client {
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
};

// All three URLs and aggressive reconnect settings, because the failover figure includes the
// client's own detection and reconnect when the killed server was the one it was connected to:
// - a kill -9 closes the server's sockets, the proxy forwards the FIN, so detection is immediate;
//   the 250 ms ping with 2 outstanding bounds detection to ~0.75 s if it were not;
// - reconnect jitter off and 50 ms wait: the library tries the other URLs at once and only waits
//   before retrying the same URL.
Client Connect(const Args& a, int64_t js_wait_ms, bool no_randomize = false) {
  natsOptions* opts = nullptr;
  Check("options", natsOptions_Create(&opts));
  std::vector<const char*> urls;
  for (const auto& s : a.servers) urls.push_back(s.c_str());
  Check("servers", natsOptions_SetServers(opts, urls.data(), static_cast<int>(urls.size())));
  natsOptions_SetName(opts, "nats_spike");
  natsOptions_SetNoRandomize(opts, no_randomize);
  natsOptions_SetTimeout(opts, 1000);  // connect timeout per URL
  natsOptions_SetMaxReconnect(opts, 1'000'000);
  natsOptions_SetReconnectWait(opts, 50);
  natsOptions_SetReconnectJitter(opts, 0, 0);
  natsOptions_SetPingInterval(opts, 250);
  natsOptions_SetMaxPingsOut(opts, 2);
  natsOptions_SetReconnectBufSize(opts, 64 * 1024 * 1024);
  natsOptions_SetDisconnectedCB(opts, OnDisconnected, nullptr);
  natsOptions_SetReconnectedCB(opts, OnReconnected, nullptr);
  Client c;
  Check("connect", natsConnection_Connect(&c.nc, opts));
  natsOptions_Destroy(opts);
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = js_wait_ms;
  Check("jetstream", natsConnection_JetStream(&c.js, c.nc, &jo));
  return c;
}

std::string ConnectedUrl(const Client& c) {
  char buf[256] = {0};
  if (natsConnection_GetConnectedUrl(c.nc, buf, sizeof buf) != NATS_OK) return "?";
  return buf;
}

// Stream leader and how many replicas (leader included) are current. The stream leader is the
// leader of the stream's own Raft group, which is what a kill must hit to interrupt commits; it is
// distinct from the JetStream meta leader (the cluster-wide group that places streams), which
// run_nats.sh reads from each server's /jsz.
struct StreamState {
  std::string leader;
  int current = 0;
  uint64_t msgs = 0;
  uint64_t bytes = 0;
};

bool GetState(const Client& c, StreamState* out) {
  jsStreamInfo* si = nullptr;
  jsErrCode jerr{};
  if (js_GetStreamInfo(&si, c.js, kStream, nullptr, &jerr) != NATS_OK) return false;
  out->msgs = si->State.Msgs;
  out->bytes = si->State.Bytes;
  if (si->Cluster != nullptr && si->Cluster->Leader != nullptr) {
    out->leader = si->Cluster->Leader;
    out->current = 1;
    for (int i = 0; i < si->Cluster->ReplicasLen; ++i) {
      const jsPeerInfo* p = si->Cluster->Replicas[i];
      if (p->Current && !p->Offline) ++out->current;
    }
  }
  jsStreamInfo_Destroy(si);
  return !out->leader.empty();
}

// Waits until the stream has a leader and all three replicas are current, so that every
// measurement starts from a healthy R3 group (after setup, and after a killed server restarts).
bool WaitHealthy(const Client& c, StreamState* st, double timeout_s) {
  const int64_t deadline = MonoNs() + static_cast<int64_t>(timeout_s * 1e9);
  while (MonoNs() < deadline) {
    *st = {};
    if (GetState(c, st) && st->current == 3) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

int Setup(const Args& a) {
  Client c = Connect(a, 10'000);
  jsErrCode jerr{};
  js_DeleteStream(c.js, kStream, nullptr, &jerr);  // a clean stream per run; absent is fine
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  cfg.Name = kStream;
  const char* subjects[] = {kSubject};
  cfg.Subjects = subjects;
  cfg.SubjectsLen = 1;
  cfg.Storage = js_FileStorage;
  cfg.Replicas = 3;
  // Bounded so a long run cannot fill the disk; the oldest entries go first, as a journal that is
  // checkpointed elsewhere would allow.
  cfg.MaxBytes = int64_t{4} << 30;
  cfg.Discard = js_DiscardOld;
  jsStreamInfo* si = nullptr;
  Check("add stream", js_AddStream(&si, c.js, &cfg, nullptr, &jerr), jerr);
  jsStreamInfo_Destroy(si);
  StreamState st;
  const bool ok = WaitHealthy(c, &st, 30);
  std::printf("setup=%s leader=%s current=%d connected=%s\n", ok ? "ok" : "unhealthy",
              st.leader.c_str(), st.current, ConnectedUrl(c).c_str());
  return ok ? 0 : 1;
}

int Info(const Args& a) {
  Client c = Connect(a, 2'000);
  StreamState st;
  const bool ok = WaitHealthy(c, &st, 30);
  std::printf("healthy=%d leader=%s current=%d msgs=%" PRIu64 " bytes=%" PRIu64 "\n", ok,
              st.leader.c_str(), st.current, st.msgs, st.bytes);
  return ok ? 0 : 1;
}

std::vector<uint8_t> MakeEntry(int ops) {
  std::vector<uint8_t> buf(static_cast<size_t>(ops) * sizeof(Deposit));
  for (int i = 0; i < ops; ++i) {
    Deposit d{};
    d.account_id = 1000 + i;
    for (size_t b = 0; b < d.request_id.size(); ++b) d.request_id[b] = static_cast<uint8_t>(i + b);
    d.amount_minor = int64_t{100} * (i + 1);
    d.sequence = i;
    d.checksum = 0x9e3779b97f4a7c15ULL ^ i;
    std::memcpy(buf.data() + i * sizeof(Deposit), &d, sizeof d);
  }
  return buf;
}

void StampIndex(std::vector<uint8_t>* entry, uint64_t index) {
  std::memcpy(entry->data() + offsetof(Deposit, sequence), &index, sizeof index);
}

// Results of one timed window.
struct Sample {
  double commits_per_s = 0;
  double ops_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
  double client_cpu = 0;  // client CPU seconds per wall second
};

double Percentile(std::vector<int64_t>* v, double q) {
  if (v->empty()) return 0;
  const size_t k = std::min(v->size() - 1, static_cast<size_t>(q * static_cast<double>(v->size())));
  std::nth_element(v->begin(), v->begin() + static_cast<std::ptrdiff_t>(k), v->end());
  return static_cast<double>((*v)[k]) / 1e3;
}

// Shared between the publishing thread and the library thread that delivers async PubAcks.
struct Window {
  int64_t t0 = 0, t1 = 0;  // the measured interval; acks before t0 are warm-up
  std::mutex mu;
  std::vector<int64_t> latencies_ns;  // of acks inside [t0, t1)
  std::vector<int64_t> sent_ns;       // by message index modulo its size
  uint64_t errors = 0;
};

void Record(Window* w, int64_t sent, int64_t now) {
  if (now < w->t0 || now >= w->t1) return;
  w->latencies_ns.push_back(now - sent);
}

void OnAsyncAck(jsCtx*, natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae, void* closure) {
  auto* w = static_cast<Window*>(closure);
  const int64_t now = MonoNs();
  uint64_t index = 0;
  std::memcpy(&index, natsMsg_GetData(msg) + offsetof(Deposit, sequence), sizeof index);
  {
    std::lock_guard<std::mutex> lock(w->mu);
    if (pa != nullptr) {
      Record(w, w->sent_ns[index % w->sent_ns.size()], now);
    } else if (pae != nullptr) {
      ++w->errors;
    }
  }
  natsMsg_Destroy(msg);
}

Sample RunWindow(const Args& a, const Client& c, Window* w) {
  std::vector<uint8_t> entry = MakeEntry(a.ops);
  const int64_t start = MonoNs();
  w->t0 = start + static_cast<int64_t>(a.warmup_s * 1e9);
  w->t1 = w->t0 + static_cast<int64_t>(a.seconds * 1e9);
  w->latencies_ns.clear();
  w->latencies_ns.reserve(1 << 20);
  w->errors = 0;
  double cpu0 = 0;
  bool cpu_started = false;
  uint64_t index = 0;
  for (;;) {
    const int64_t now = MonoNs();
    if (now >= w->t1) break;
    if (!cpu_started && now >= w->t0) {
      cpu0 = CpuSeconds();
      cpu_started = true;
    }
    StampIndex(&entry, index);
    if (a.window == 1) {
      // Closed loop: the next batch is sent only after the previous one committed.
      jsPubAck* pa = nullptr;
      jsErrCode jerr{};
      const natsStatus s = js_Publish(&pa, c.js, kSubject, entry.data(),
                                      static_cast<int>(entry.size()), nullptr, &jerr);
      const int64_t done = MonoNs();
      if (s == NATS_OK) {
        Record(w, now, done);
      } else {
        ++w->errors;
      }
      jsPubAck_Destroy(pa);
    } else {
      // W batches in flight: js_PublishAsync blocks (up to StallWait) once MaxPending acks are
      // outstanding, so the window stays full without a thread per slot.
      {
        std::lock_guard<std::mutex> lock(w->mu);
        w->sent_ns[index % w->sent_ns.size()] = MonoNs();
      }
      const natsStatus s =
          js_PublishAsync(c.js, kSubject, entry.data(), static_cast<int>(entry.size()), nullptr);
      if (s != NATS_OK) {
        std::lock_guard<std::mutex> lock(w->mu);
        ++w->errors;
      }
    }
    ++index;
  }
  const double cpu1 = CpuSeconds();
  if (a.window > 1) {
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = 10'000;
    js_PublishAsyncComplete(c.js, &po);
  }
  std::lock_guard<std::mutex> lock(w->mu);
  Sample s;
  s.commits_per_s = static_cast<double>(w->latencies_ns.size()) / a.seconds;
  s.ops_per_s = s.commits_per_s * a.ops;
  s.p50_us = Percentile(&w->latencies_ns, 0.50);
  s.p99_us = Percentile(&w->latencies_ns, 0.99);
  s.client_cpu = (cpu1 - cpu0) / a.seconds;
  return s;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int Bench(const Args& a) {
  Window w;
  w.sent_ns.assign(1 << 16, 0);  // far larger than any window, so indices never collide
  // Connect to the stream leader, as ledgerd would if co-located with it: through a follower
  // every commit pays one more client->server hop (about +1 ms here), and which server the
  // library picks at random would otherwise differ between rows. Servers are listed r1,r2,r3.
  Client c = Connect(a, 5'000);
  StreamState st;
  std::string via = "random";
  if (WaitHealthy(c, &st, 30) && st.leader.size() == 2 && st.leader[0] == 'r') {
    const size_t n = static_cast<size_t>(st.leader[1] - '1');
    if (n < a.servers.size()) {
      Args leader_first = a;
      std::swap(leader_first.servers[0], leader_first.servers[n]);
      natsConnection_Destroy(c.nc);
      jsCtx_Destroy(c.js);
      c = Connect(leader_first, 5'000, /*no_randomize=*/true);
      via = st.leader;
    }
  }
  std::printf("leader=%s connected=%s via=%s\n", st.leader.c_str(), ConnectedUrl(c).c_str(),
              via.c_str());
  // The async window lives in the JetStream context, so it is configured at connect time.
  if (a.window > 1) {
    jsCtx_Destroy(c.js);
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = 5'000;
    jo.PublishAsync.MaxPending = a.window;
    jo.PublishAsync.StallWait = 5'000;
    jo.PublishAsync.AckHandler = OnAsyncAck;
    jo.PublishAsync.AckHandlerClosure = &w;
    Check("jetstream", natsConnection_JetStream(&c.js, c.nc, &jo));
  }
  std::vector<double> commits, ops, p50, p99, cpu;
  for (int r = 0; r < a.repeats; ++r) {
    const Sample s = RunWindow(a, c, &w);
    std::printf(
        "repeat=%d W=%d K=%d commits_per_s=%.0f ops_per_s=%.0f p50_us=%.0f p99_us=%.0f "
        "client_cpu=%.2f errors=%" PRIu64 "\n",
        r, a.window, a.ops, s.commits_per_s, s.ops_per_s, s.p50_us, s.p99_us, s.client_cpu,
        w.errors);
    std::fflush(stdout);
    commits.push_back(s.commits_per_s);
    ops.push_back(s.ops_per_s);
    p50.push_back(s.p50_us);
    p99.push_back(s.p99_us);
    cpu.push_back(s.client_cpu);
  }
  std::printf(
      "median W=%d K=%d bytes=%zu commits_per_s=%.0f ops_per_s=%.0f p50_us=%.0f p99_us=%.0f "
      "client_cpu=%.2f\n",
      a.window, a.ops, a.ops * sizeof(Deposit), Median(commits), Median(ops), Median(p50),
      Median(p99), Median(cpu));
  natsConnection_Destroy(c.nc);
  return 0;
}

bool ReadKillTime(const std::string& path, int64_t* ns) {
  std::ifstream in(path);
  return static_cast<bool>(in >> *ns);
}

// Closed-loop publisher for the failover test. run_nats.sh kills the stream leader while this
// runs and writes the kill's CLOCK_REALTIME ns to --kill-file; we stop one second after the first
// ack that follows it (or after 30 s). The per-publish timeout bounds how stale a publish sent to
// the dead leader can get before it is retried: the figure is at most election + timeout late.
int Failover(const Args& a) {
  Client c = Connect(a, a.pub_timeout_ms);
  StreamState st;
  if (!WaitHealthy(c, &st, 30)) {
    std::printf("failover=unhealthy\n");
    return 1;
  }
  std::vector<uint8_t> entry = MakeEntry(1);
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MaxWait = a.pub_timeout_ms;
  std::printf("leader=%s connected=%s\n", st.leader.c_str(), ConnectedUrl(c).c_str());
  std::fflush(stdout);  // run_nats.sh waits for this line before it kills the leader
  int64_t kill_ns = 0, last_ack_before = 0, first_ack_after = 0, last_ack = 0, max_gap = 0;
  uint64_t acks = 0, timeouts = 0, no_responders = 0, other_errors = 0, index = 0;
  int last_error = NATS_OK;
  const int64_t deadline = MonoNs() + 30'000'000'000;
  int64_t stop_at = deadline;
  while (MonoNs() < stop_at) {
    if (kill_ns == 0) ReadKillTime(a.kill_file, &kill_ns);
    // Only a publish issued after the kill counts as "after": acks already in flight (the proxy
    // holds them 0.5 ms) would otherwise make failover look instant.
    const bool after_kill = kill_ns != 0;
    StampIndex(&entry, index++);
    jsPubAck* pa = nullptr;
    jsErrCode jerr{};
    const natsStatus s =
        js_Publish(&pa, c.js, kSubject, entry.data(), static_cast<int>(entry.size()), &po, &jerr);
    const int64_t now = RealNs();
    jsPubAck_Destroy(pa);
    if (s == NATS_OK) {
      ++acks;
      if (last_ack != 0) max_gap = std::max(max_gap, now - last_ack);
      last_ack = now;
      if (!after_kill) {
        last_ack_before = now;
      } else if (first_ack_after == 0) {
        first_ack_after = now;
        stop_at = std::min(deadline, MonoNs() + 1'000'000'000);
      }
      continue;
    }
    last_error = s;
    if (s == NATS_TIMEOUT) {
      ++timeouts;
    } else if (s == NATS_NO_RESPONDERS) {
      ++no_responders;  // nobody leads the stream right now: the server answers at once
    } else {
      ++other_errors;  // e.g. NATS_CONNECTION_CLOSED while reconnecting
    }
    // Without a leader publishes fail in ~1 RTT; a short pause keeps the loop from stealing the
    // two cores the electing servers need. It adds at most 1 ms to the figure.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  StreamState after;
  GetState(c, &after);
  const auto ms = [](int64_t d) { return static_cast<double>(d) / 1e6; };
  std::printf("kill_ns=%" PRId64 " first_ack_after_ns=%" PRId64
              " kill_to_first_ack_ms=%.1f "
              "last_ack_before_to_kill_ms=%.1f max_gap_ms=%.1f acks=%" PRIu64 " timeouts=%" PRIu64
              " no_responders=%" PRIu64 " other_errors=%" PRIu64
              " last_error=%s disconnected_ms=%.1f reconnected_ms=%.1f old_leader=%s new_leader=%s "
              "connected=%s\n",
              kill_ns, first_ack_after, first_ack_after ? ms(first_ack_after - kill_ns) : -1.0,
              ms(kill_ns - last_ack_before), ms(max_gap), acks, timeouts, no_responders,
              other_errors, natsStatus_GetText(static_cast<natsStatus>(last_error)),
              g_disconnected_ns ? ms(g_disconnected_ns - kill_ns) : -1.0,
              g_reconnected_ns ? ms(g_reconnected_ns - kill_ns) : -1.0, st.leader.c_str(),
              after.leader.c_str(), ConnectedUrl(c).c_str());
  natsConnection_Destroy(c.nc);
  return first_ack_after ? 0 : 1;
}

// Moves the stream's leadership elsewhere (JetStream's own API: the leader steps down and the
// stream's Raft group elects another member), so run_nats.sh can choose whether the server it
// kills also leads the cluster's meta group.
int StepDown(const Args& a) {
  Client c = Connect(a, 5'000);
  StreamState before;
  if (!WaitHealthy(c, &before, 30)) return 1;
  natsMsg* reply = nullptr;
  const std::string subject = std::string("$JS.API.STREAM.LEADER.STEPDOWN.") + kStream;
  Check("stepdown", natsConnection_Request(&reply, c.nc, subject.c_str(), nullptr, 0, 5'000));
  natsMsg_Destroy(reply);
  StreamState after;
  const int64_t deadline = MonoNs() + 30'000'000'000;
  while (MonoNs() < deadline) {
    if (WaitHealthy(c, &after, 5) && after.leader != before.leader) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::printf("stepdown old_leader=%s new_leader=%s current=%d\n", before.leader.c_str(),
              after.leader.c_str(), after.current);
  natsConnection_Destroy(c.nc);
  return after.leader != before.leader && after.current == 3 ? 0 : 1;
}

// The kill itself, so that its timestamp is taken immediately before kill(2) rather than by a
// shell that forks `date` first.
int Kill(int argc, char** argv) {
  if (argc != 4) return 2;
  const pid_t pid = static_cast<pid_t>(std::atoll(argv[2]));
  const std::string path = argv[3];
  const int64_t t = RealNs();
  if (kill(pid, SIGKILL) != 0) {
    std::perror("kill");
    return 1;
  }
  // Written to a temporary file and renamed, so the publisher never reads half a number.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << t << "\n";
  }
  std::rename(tmp.c_str(), path.c_str());
  std::printf("killed=%d kill_ns=%" PRId64 "\n", static_cast<int>(pid), t);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "kill") == 0) return Kill(argc, argv);
  const Args a = Parse(argc, argv);
  if (a.servers.empty()) {
    std::fprintf(stderr, "nats_spike: --servers is required\n");
    return 2;
  }
  int rc = 2;
  if (a.command == "setup") {
    rc = Setup(a);
  } else if (a.command == "info") {
    rc = Info(a);
  } else if (a.command == "bench") {
    rc = Bench(a);
  } else if (a.command == "failover") {
    rc = Failover(a);
  } else if (a.command == "stepdown") {
    rc = StepDown(a);
  } else {
    std::fprintf(stderr, "nats_spike: unknown command '%s' (see the top of nats_spike.cc)\n",
                 a.command.c_str());
  }
  std::fflush(stdout);
  nats_Close();
  return rc;
}
