#!/usr/bin/env python3
"""The leader's memory while one follower is cut off under load (issue 32; docs/benchmarks.md,
docs/replication.md 9.2 item 3). Three replicas on --server_cpu, each reached through its own
delay relay (bench/cluster_bench.py's Cluster, 500 µs each way); ledger-loadtest on --client_cpu
sends --rate durable Deposits/s to all three. After --warmup_seconds one follower is cut off for
--cut_seconds: --cut=drop (default, as root) drops every packet to and from its relay's port
(iptables on loopback), a silent network cut; --cut=stop stops its relay (SIGSTOP), a peer that
is up but reads nothing (its kernel still accepts connections and answers with a zero window);
--cut=none, the same run without a cut.
What libraft sends the follower waits in the leader (the kernel's buffers, then libuv's write
queue) until the connection is given up. Prints the leader's RSS every --every seconds and at
the end, once the cut is healed and the load test has verified its run.

  python3 bench/cluster_cutoff_memory.py --build build/release --cut_seconds 120
  python3 bench/cluster_cutoff_memory.py --build build/release --ledgerd /tmp/other/ledgerd
"""
import argparse
import atexit
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import log, read_loadtest_report, ledgerd_scratch  # noqa: E402
from cluster_bench import Cluster, scratch_dir  # noqa: E402


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def leader_index(args, cluster):
    """The index of the replica that leads, from `ledgerctl cluster status --json`."""
    out = subprocess.run(
        [os.path.join(args.build, "client", "ledgerctl"), f"--target={cluster.targets}",
         "--json", "cluster", "status"], capture_output=True, text=True, timeout=30).stdout
    for line in out.splitlines():
        try:
            member = json.loads(line)
        except json.JSONDecodeError:
            continue
        if str(member.get("role", "")).lower() == "leader":
            return int(member.get("nodeId", member.get("node_id"))) - 1
    raise RuntimeError(f"no leader in: {out}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", required=True)
    parser.add_argument("--ledgerd", default=None, help="another ledgerd binary to measure")
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--warmup_seconds", type=int, default=10)
    parser.add_argument("--cut_seconds", type=int, default=120)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--server_cpu", default="0")
    parser.add_argument("--client_cpu", default="1")
    parser.add_argument("--scratch", default=None)
    parser.add_argument("--cut", choices=["drop", "stop", "none"], default="drop",
                        help="none: the same run without a cut, for comparison")
    args = parser.parse_args()
    root = scratch_dir(args, "cluster-cutoff-")
    cluster = Cluster(args.build, root, 4, args.server_cpu, relay_us=500,
                      relay_cpu=args.client_cpu, ledgerd=args.ledgerd)
    json_path = os.path.join(root, "loadtest.json")
    duration = args.warmup_seconds + args.cut_seconds + 20
    loadtest = subprocess.Popen(
        ["taskset", "-c", args.client_cpu, os.path.join(args.build, "client", "ledger-loadtest"),
         f"--target={cluster.targets}", "--accounts=10000", "--mix=deposit=1",
         f"--rate={args.rate}", "--concurrency=32", "--warmup=0s", f"--duration={duration}s",
         f"--json_file={json_path}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    try:
        time.sleep(args.warmup_seconds)
        leader = leader_index(args, cluster)
        follower = (leader + 1) % 3
        pid = cluster.processes[leader].pid
        print(f"leader node {leader + 1}; cutting off node {follower + 1} ({args.cut}) for "
              f"{args.cut_seconds} s at {args.rate} Deposits/s")
        print("| seconds into the cut | leader RSS, MiB |")
        print("|---:|---:|")
        print(f"| 0 | {rss_mib(pid):.0f} |")
        relay = cluster.relays[follower]
        port = cluster.relay_ports[follower]
        rules = [["INPUT", "-i", "lo", "-p", "tcp", "--dport", str(port), "-j", "DROP"],
                 ["INPUT", "-i", "lo", "-p", "tcp", "--sport", str(port), "-j", "DROP"]]

        healed = []

        def heal():
            if healed:
                return
            healed.append(True)
            if args.cut == "none":
                return
            if args.cut == "stop":
                relay.send_signal(signal.SIGCONT)
                return
            for rule in rules:
                subprocess.run(["iptables", "-D"] + rule, check=False)

        if args.cut == "stop":
            relay.send_signal(signal.SIGSTOP)
        elif args.cut == "drop":
            atexit.register(heal)
            for rule in rules:
                subprocess.run(["iptables", "-I"] + rule, check=True)
        started = time.monotonic()
        peak = 0.0
        while time.monotonic() - started < args.cut_seconds:
            time.sleep(1)
            peak = max(peak, rss_mib(pid))
            elapsed = int(time.monotonic() - started)
            if elapsed % args.every == 0:
                print(f"| {elapsed} | {rss_mib(pid):.0f} |", flush=True)
        heal()
        print(f"peak during the cut: {peak:.0f} MiB")
        _, stderr = loadtest.communicate(timeout=duration + 120)
        report = read_loadtest_report(json_path)
        print(f"load test: {report['verification']}, {report['ops_per_second']:.0f} ops/s; "
              f"leader RSS after: {rss_mib(pid):.0f} MiB")
        if report["verification"] != "PASS":
            raise RuntimeError(stderr[-2000:])
    finally:
        if loadtest.poll() is None:
            loadtest.kill()
        cluster.stop()


if __name__ == "__main__":
    main()
