#!/usr/bin/env python3
"""Issue 32's first deliverable: one Raft group per cluster or one per partition, on numbers.

Runs shape_bench (three replicas, libraft 0.15, each in its own network namespace with a 1 ms
round trip between them through delay_proxy) on traces of ledgerd's real log entries
(bench/log_trace.cc), for G = 1 group and G = 64 groups, side by side in one run, and prints
markdown tables on stdout (progress on stderr):

  1. throughput and latency per trace and window: group commits/s, operations/s, p50/p99/max of
     a group commit (proposal to the last part applied on the leader), CPU of the replicas and of
     the relays per operation, snapshots taken and elections during the measured window (every
     group is led by replica 1 before it starts, so any election in it is spurious), and the
     group commits that failed because a group's leadership moved (summed over the repeats);
  2. failover: replicas propose on the groups they lead (leaders spread as elections put them);
     the one leading the most groups is killed with SIGKILL; time from the kill to the first
     commit of the new leader of each group it led: the first, the median and the last of them
     (the last is when every partition takes writes again).

  sudo python3 bench/replication/run_shape.py --traces unary=U.trace,apply=A.trace
      [--groups 1,64] [--windows 1,8,32] [--repeats 3] [--seconds 3] [--failovers 10]
      [--checkpoint_mb 32] [--election_ms 300] [--heartbeat_ms 50] [--network relay|direct]

As root: it makes network namespaces (netns.sh). `make bench-raft-shape` makes the traces from a
real ledgerd first and runs this.
"""
import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HOSTS = {1: "10.99.0.1", 2: "10.99.0.2", 3: "10.99.0.3"}
PUBLIC_BASE = {1: 7100, 2: 7300, 3: 7500}  # Group g of replica i: PUBLIC_BASE[i] + g.
LOCAL_BASE = {1: 9100, 2: 9300, 3: 9500}
MAX_GROUPS = 128


def log(message):
    print(f"[run_shape {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def realtime_ns(line):
    m = re.search(r"realtime_ns=(\d+)", line)
    return int(m.group(1)) if m else 0


def field(line, name):
    m = re.search(rf"\b{name}=(\S+)", line)
    return m.group(1) if m else None


def cpu_ticks(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError):
            pass
    return total


class Cluster:
    def __init__(self, args, run_dir):
        self.args = args
        self.run_dir = run_dir
        self.procs = {}
        self.logs = {}

    def start(self, tag, groups, extra):
        peers = ",".join(f"{i}={HOSTS[i]}:{PUBLIC_BASE[i]}" for i in (1, 2, 3))
        for i in (1, 2, 3):
            data = os.path.join(self.run_dir, f"shape-r{i}")
            shutil.rmtree(data, ignore_errors=True)
            os.makedirs(data)
            self.logs[i] = os.path.join(self.run_dir, f"{tag}.r{i}.log")
            # Through the relays, each replica listens on loopback behind its relay; directly, on
            # its namespace's address, where the others reach it over the bridge.
            direct = self.args.network == "direct"
            cmd = ["ip", "netns", "exec", f"lrep-r{i}", os.path.join(self.args.build, "shape_bench"),
                   "--id", str(i), "--data", data,
                   "--bind-host", HOSTS[i] if direct else "127.0.0.1",
                   "--local-port-base", str(PUBLIC_BASE[i] if direct else LOCAL_BASE[i]),
                   "--peers", peers, "--groups", str(groups),
                   "--election-ms", str(self.args.election_ms),
                   "--heartbeat-ms", str(self.args.heartbeat_ms),
                   "--checkpoint-mb", str(self.args.checkpoint_mb)] + extra
            with open(self.logs[i], "w") as out:
                self.procs[i] = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)

    def lines(self, i):
        try:
            with open(self.logs[i]) as f:
                return f.read().splitlines()
        except OSError:
            return []

    def wait_for(self, seconds, predicate):
        deadline = time.time() + seconds
        while time.time() < deadline:
            value = predicate()
            if value:
                return value
            if any(p.poll() is not None and p.returncode not in (0, -9) for p in self.procs.values()):
                raise RuntimeError("a replica died: " + " | ".join(
                    f"r{i} exit {p.returncode}: " + " ".join(self.lines(i)[-3:])
                    for i, p in self.procs.items()))
            time.sleep(0.02)
        return None

    def kill(self, i):
        p = self.procs.pop(i, None)
        if p is not None:
            p.send_signal(signal.SIGKILL)
            p.wait()

    def stop(self):
        for i in list(self.procs):
            self.kill(i)


def measure(args, cluster, trace_name, trace, groups, window, proxy_pids):
    try:
        return measure_once(args, cluster, trace_name, trace, groups, window, proxy_pids)
    except RuntimeError as e:
        log(f"{trace_name} g{groups} w{window}: {e}; the run is left out")
        return None


def measure_once(args, cluster, trace_name, trace, groups, window, proxy_pids):
    tag = f"m-{trace_name}-g{groups}-w{window}"
    cluster.start(tag, groups, ["--mode", "throughput", "--trace", trace, "--window", str(window),
                                "--seconds", str(args.seconds), "--warmup-ms", "1000",
                                "--trace-entries", str(args.trace_entries)])
    try:
        if not cluster.wait_for(60, lambda: any(l.startswith("measure_start")
                                                for l in cluster.lines(1))):
            log(f"{tag}: replica 1 never led every group")
            return None
        start_line = next(l for l in cluster.lines(1) if l.startswith("measure_start"))
        pids = [p.pid for p in cluster.procs.values()]
        t0, r0, p0 = time.time(), cpu_ticks(pids), cpu_ticks(proxy_pids)
        result = cluster.wait_for(args.seconds + 30, lambda: next(
            (l for l in cluster.lines(1) if l.startswith("result")), None))
        t1, r1, p1 = time.time(), cpu_ticks(pids), cpu_ticks(proxy_pids)
        if not result:
            log(f"{tag}: no result")
            return None
        begin, end = realtime_ns(start_line), realtime_ns(result)
        elections = sum(1 for i in (1, 2, 3) for l in cluster.lines(i)
                        if l.startswith("leader") and begin <= realtime_ns(l) <= end)
        hz = os.sysconf("SC_CLK_TCK")
        ops = float(field(result, "ops")) or 1.0
        seconds = float(field(result, "seconds"))
        row = {
            "commits_per_s": float(field(result, "commits_per_s")),
            "ops_per_s": float(field(result, "ops_per_s")),
            "entries_per_commit": float(field(result, "entries")) / max(1.0, float(field(result, "commits"))),
            "p50_ms": float(field(result, "p50_us")) / 1e3,
            "p99_ms": float(field(result, "p99_us")) / 1e3,
            "max_ms": float(field(result, "max_us")) / 1e3,
            "replicas_pct": (r1 - r0) / hz / (t1 - t0) * 100,
            "proxies_pct": (p1 - p0) / hz / (t1 - t0) * 100,
            "replica_us_per_op": (r1 - r0) / hz / (t1 - t0) * seconds / ops * 1e6,
            "snapshots": int(field(result, "snapshots")),
            "elections": elections,
            "failed": int(field(result, "failed")),
        }
        log(f"{tag}: {result.strip()} replicas={row['replicas_pct']:.0f}% "
            f"proxies={row['proxies_pct']:.0f}% elections={elections}")
        return row
    finally:
        cluster.stop()


def failover(args, cluster, groups, rep):
    try:
        return failover_once(args, cluster, groups, rep)
    except RuntimeError as e:
        log(f"failover g{groups}: {e}; the kill is left out")
        return None


def failover_once(args, cluster, groups, rep):
    tag = f"f-g{groups}-{rep}"
    cluster.start(tag, groups, ["--mode", "failover"])
    try:
        def all_committing():
            seen = set()
            for i in (1, 2, 3):
                seen |= {field(l, "group") for l in cluster.lines(i) if l.startswith("first_commit")}
            return len(seen) >= groups
        if not cluster.wait_for(60, all_committing):
            log(f"{tag}: not every group elected a leader")
            return None
        time.sleep(1.5)  # Steady state.
        leader_of = {}
        for i in (1, 2, 3):
            for l in cluster.lines(i):
                if l.startswith("leader"):
                    g = field(l, "group")
                    if g not in leader_of or realtime_ns(l) > leader_of[g][1]:
                        leader_of[g] = (i, realtime_ns(l))
        counts = {i: sum(1 for v in leader_of.values() if v[0] == i) for i in (1, 2, 3)}
        victim = max(counts, key=counts.get)
        led = {g for g, v in leader_of.items() if v[0] == victim}
        kill_ns = time.time_ns()
        cluster.kill(victim)

        def recovered():
            done = {}
            for i in cluster.procs:
                for l in cluster.lines(i):
                    if l.startswith("first_commit") and realtime_ns(l) > kill_ns:
                        g = field(l, "group")
                        if g in led and g not in done:
                            done[g] = realtime_ns(l)
            return done if len(done) == len(led) else None
        done = cluster.wait_for(20, recovered)
        if not done:
            log(f"{tag}: not every group the killed replica led committed again within 20 s")
            return None
        delays = sorted((t - kill_ns) / 1e6 for t in done.values())
        row = {"led": len(led), "first_ms": delays[0], "median_ms": statistics.median(delays),
               "last_ms": delays[-1]}
        log(f"{tag}: killed replica {victim} leading {len(led)} groups: first {delays[0]:.0f} ms, "
            f"median {row['median_ms']:.0f} ms, last {delays[-1]:.0f} ms")
        return row
    finally:
        cluster.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.environ.get("LREP_BUILD", os.path.join(
        HERE, "..", "..", "build", "replication")))
    parser.add_argument("--run_dir", default=os.environ.get("LREP_RUN_DIR", "/tmp/lrep"))
    parser.add_argument("--traces", required=True, help="name=path,...")
    parser.add_argument("--trace_entries", type=int, default=4000)
    parser.add_argument("--groups", default="1,64")
    parser.add_argument("--windows", default="1,8,32")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--failovers", type=int, default=10)
    parser.add_argument("--checkpoint_mb", type=float, default=32)
    parser.add_argument("--election_ms", type=int, default=300)
    parser.add_argument("--heartbeat_ms", type=int, default=50)
    parser.add_argument("--delay_us", type=int, default=500)
    parser.add_argument("--network", choices=["relay", "direct"], default="relay",
                        help="relay: through delay_proxy, --delay_us each way (the 1 ms round "
                        "trip); direct: over the namespaces' bridge, no delay and no relay CPU")
    args = parser.parse_args()
    args.build = os.path.abspath(args.build)
    traces = dict(item.split("=", 1) for item in args.traces.split(","))
    group_counts = [int(g) for g in args.groups.split(",")]
    windows = [int(w) for w in args.windows.split(",")]
    if max(group_counts) > MAX_GROUPS:
        sys.exit(f"run_shape.py: at most {MAX_GROUPS} groups")

    env = dict(os.environ, LREP_BUILD=args.build, LREP_RUN_DIR=args.run_dir)
    netns = os.path.join(HERE, "netns.sh")
    subprocess.run(["bash", netns, "up"], check=True, env=env, stdout=subprocess.DEVNULL)
    cluster = Cluster(args, args.run_dir)
    proxy_pids = []
    try:
        for i in (1, 2, 3) if args.network == "relay" else ():
            subprocess.run(["bash", netns, "proxy", str(i), str(PUBLIC_BASE[i]),
                                  str(LOCAL_BASE[i]), str(args.delay_us), str(MAX_GROUPS)],
                                 check=True, env=env, capture_output=True, text=True)
            with open(os.path.join(args.run_dir, f"proxy-{i}-{PUBLIC_BASE[i]}.pid")) as f:
                proxy_pids.append(int(f.read()))
        rows = {}
        # Interleaved: each repeat runs every shape once, so drift of the shared machine falls on
        # both shapes alike.
        for rep in range(args.repeats):
            for name, path in traces.items():
                for window in windows:
                    for groups in group_counts:
                        row = measure(args, cluster, name, path, groups, window, proxy_pids)
                        if row:
                            rows.setdefault((name, window, groups), []).append(row)
        fails = {}
        for rep in range(args.failovers):
            for groups in group_counts:
                row = failover(args, cluster, groups, rep)
                if row:
                    fails.setdefault(groups, []).append(row)
    finally:
        cluster.stop()
        subprocess.run(["bash", netns, "down"], env=env, stdout=subprocess.DEVNULL)

    med = lambda rs, k: statistics.median(r[k] for r in rs)
    print(f"## Throughput and latency, network {args.network} (medians of {args.repeats}; election timeout "
          f"{args.election_ms} ms, heartbeat {args.heartbeat_ms} ms, pre-vote on, checkpoint "
          f"{args.checkpoint_mb} MiB per snapshot across the groups)\n")
    print("| trace | window | groups | group commits/s | ops/s | Raft entries per commit | "
          "p50 ms | p99 ms | max ms | replicas % CPU | relays % CPU | replica CPU us/op | "
          "snapshots | elections | commits failed |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (name, window, groups), rs in sorted(rows.items()):
        print(f"| {name} | {window} | {groups} | {med(rs, 'commits_per_s'):,.0f} | "
              f"{med(rs, 'ops_per_s'):,.0f} | {med(rs, 'entries_per_commit'):.1f} | "
              f"{med(rs, 'p50_ms'):.2f} | {med(rs, 'p99_ms'):.2f} | {med(rs, 'max_ms'):.1f} | "
              f"{med(rs, 'replicas_pct'):.0f} | {med(rs, 'proxies_pct'):.0f} | "
              f"{med(rs, 'replica_us_per_op'):.2f} | {sum(r['snapshots'] for r in rs)} | "
              f"{sum(r['elections'] for r in rs)} | {sum(r['failed'] for r in rs)} |")
    print(f"\n## Failover: SIGKILL of the replica leading the most groups ({args.failovers} kills)\n")
    print("| groups | groups it led | first group back, ms | median group, ms | last group, ms "
          "(median / worst) |")
    print("|---:|---|---:|---:|---|")
    for groups, rs in sorted(fails.items()):
        print(f"| {groups} | {', '.join(str(r['led']) for r in rs)} | {med(rs, 'first_ms'):.0f} | "
              f"{med(rs, 'median_ms'):.0f} | {med(rs, 'last_ms'):.0f} / "
              f"{max(r['last_ms'] for r in rs):.0f} |")


if __name__ == "__main__":
    main()
