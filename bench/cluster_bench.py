#!/usr/bin/env python3
"""One ledgerd against a cluster of three replicas on this machine, side by side (issue 32's
goal rows, docs/benchmarks.md): durable Deposits as Apply calls of --batch operations, unary
Deposits at capacity, and unary Deposits at half of the cluster's capacity (its p99). Every
server process (the single node, or all three replicas) on --server_cpu, the load test on
--client_cpu; every load test runs on a fresh setup (new data directories), the two setups in
turn, in rotated order each round. The replicas talk over loopback through bench/replication's
delay relay (delay_proxy), --relay_us each way (default 500: a 1 ms round trip between any two
replicas, as issue 32's goal asks); --relay_us=0 connects them directly. Each replica's relay
runs on --relay_cpu (default: the client's), since a real network costs the servers no CPU. The
clients reach the replicas directly. Each run's verification must PASS. Prints a markdown
table: medians over --rounds, and the per-round ratios.

  python3 bench/cluster_bench.py --build build/release --rounds 3
"""
import argparse
import atexit
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import (cpu_seconds, log, read_loadtest_report, raise_keyboard_interrupt,
                        rotated, start_ledgerd, wait_for_ports, ledgerd_scratch)


def scratch_dir(args, prefix):
    """A new directory for data directories, removed when the script exits."""
    path = tempfile.mkdtemp(prefix=prefix, dir=args.scratch)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_listener(port, process, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the relay on port {port} exited ({process.returncode})")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {timeout} s")


def start_relay(build, cpu, listen_port, target_port, delay_us):
    """tests/relay's delay_proxy on `cpu`, from 127.0.0.1:listen_port to target_port, holding
    every byte `delay_us` each way; returns once it listens."""
    relay = subprocess.Popen(
        ["taskset", "-c", cpu, os.path.join(build, "tests", "delay_proxy"),
         f"127.0.0.1:{listen_port}", f"127.0.0.1:{target_port}", str(delay_us)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    atexit.register(relay.kill)
    wait_for_listener(listen_port, relay)
    return relay


class Cluster:
    """Three replicas on loopback, pinned to `cpus`; `targets` lists their gRPC addresses. With
    `relay_us`, each replica's Raft port is reached through a delay relay (pinned to
    `relay_cpu`): it listens on a port of its own (--raft_listen) and the cluster knows it by the
    relay's (--peers). `flags`: more ledgerd flags, for every replica."""

    def __init__(self, build, root, shards, cpus, relay_us=0, relay_cpu="1", ledgerd=None,
                 flags=()):
        ledgerd = ledgerd or os.path.join(build, "server", "ledgerd")
        grpc_ports = [free_port() for _ in range(3)]
        raft_ports = [free_port() for _ in range(3)]
        relay_ports = [free_port() for _ in range(3)] if relay_us else raft_ports
        peers = ",".join(f"{i + 1}=127.0.0.1:{relay_ports[i]}" for i in range(3))
        clients = ",".join(f"{i + 1}=127.0.0.1:{grpc_ports[i]}" for i in range(3))
        self.processes = []
        self.relays = []
        self.relay_ports = relay_ports
        if relay_us:
            for i in range(3):
                self.relays.append(
                    start_relay(build, relay_cpu, relay_ports[i], raft_ports[i], relay_us))
        self.targets = ",".join(f"127.0.0.1:{port}" for port in grpc_ports)
        ledger_id = secrets.token_hex(16)  # One ledger: ledgerd refuses a replica of another.
        for i in range(3):
            data_dir = os.path.join(root, f"node{i + 1}")
            subprocess.run([ledgerd, "init", f"--data_dir={data_dir}",
                            f"--ledger_id={ledger_id}"], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            ports_file = os.path.join(ledgerd_scratch(), "ports.json")
            process = subprocess.Popen(
                ["taskset", "-c", cpus, ledgerd, f"--node_id={i + 1}", f"--peers={peers}",
                 f"--peer_clients={clients}", f"--listen=127.0.0.1:{grpc_ports[i]}",
                 f"--raft_listen=127.0.0.1:{raft_ports[i]}",
                 "--metrics_listen=", f"--shards={shards}", f"--data_dir={data_dir}",
                 f"--ports_file={ports_file}", *flags],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            threading.Thread(target=lambda p=process: p.stdout.read(), daemon=True).start()
            wait_for_ports(process, ports_file)
            self.processes.append(process)

    def stop(self):
        for process in self.processes:
            process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        for relay in self.relays:
            relay.kill()
            relay.wait()


WARMUP_SECONDS = 2


def dirty_kib():
    """The page cache's data not yet written back (/proc/meminfo Dirty + Writeback), in KiB."""
    with open("/proc/meminfo") as meminfo:
        fields = dict(line.split(":", 1) for line in meminfo)
    return sum(int(fields[key].split()[0]) for key in ("Dirty", "Writeback"))


def loadtest(args, targets, extra, scratch, name, pids=()):
    """ledger-loadtest's report, and the CPU seconds `pids` used over its measured window (from
    the end of its warm-up to the end of its --seconds; until session 16 the window ran on to
    the load test's exit, so it also counted the reads of its verification). Before it starts,
    the page cache's dirty data is written back (sync), logged: the runs before leave tens of
    MiB of it (34-78 MiB after a cluster's runs, session 15), whose writeback would otherwise
    land in this run's synced appends."""
    log(f"{name}: writing back {dirty_kib() // 1024} MiB of dirty pages first")
    os.sync()
    json_path = os.path.join(scratch, f"{name}.json")
    command = (["taskset", "-c", args.client_cpu,
                os.path.join(args.build, "client", "ledger-loadtest"), f"--target={targets}",
                f"--accounts={args.accounts}", "--mix=deposit=1", f"--duration={args.seconds}s",
                f"--warmup={WARMUP_SECONDS}s", f"--json_file={json_path}"] + extra)
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    time.sleep(WARMUP_SECONDS)
    before = [cpu_seconds(pid) or 0 for pid in pids]
    time.sleep(args.seconds)
    used = sum((cpu_seconds(pid) or 0) - b for pid, b in zip(pids, before))
    _, stderr = process.communicate()
    report = read_loadtest_report(json_path)
    if report["verification"] != "PASS":
        raise RuntimeError(f"{name}: verification {report['verification']}: {stderr[-2000:]}")
    return report, used


def cpu_us_per_operation(args, report, used):
    """Server CPU µs per operation: `used` seconds over the load test's measured window."""
    operations = report["ops_per_second"] * args.seconds  # The CPU window's length.
    return used / operations * 1e6 if operations else 0


# The two load tests at capacity: Apply calls of --batch operations, and unary Deposits.
def capacity_runs(args):
    return (("apply", [f"--batch={args.batch}", "--concurrency=8"]),
            ("unary", ["--concurrency=64"]))


def start_setup(args, setup, prefix, flags=()):
    """A fresh single node or cluster of three (with more ledgerd `flags`, for each replica) in
    new data directories: its server pids, its --target, and how to stop it (which removes the
    directories: a cluster's take about 1 GiB, most of it preallocated log segments)."""
    root = scratch_dir(args, f"{prefix}-{setup}-")
    if setup == "single":
        process, port, _ = start_ledgerd(args.build, "sync", os.path.join(root, "d"), args.shards,
                                         cpus=args.server_cpu)
        pids, targets = [process.pid], f"127.0.0.1:{port}"
        halt = lambda: (process.send_signal(signal.SIGTERM), process.wait(timeout=30))
    else:
        cluster = Cluster(args.build, root, args.shards, args.server_cpu, args.relay_us,
                          args.relay_cpu or args.client_cpu, flags=flags)
        pids, targets, halt = [p.pid for p in cluster.processes], cluster.targets, cluster.stop

    def stop():
        halt()
        shutil.rmtree(root, ignore_errors=True)
    return pids, targets, stop


def measure(args, setup, round_number, scratch):
    """The rows of one setup ({"apply": ops/s, "apply_cpu_us": ..., ...}), each load test on a
    fresh setup: until session 16 the unary run followed the Apply run on the same replicas,
    which had just written 100,000 accounts and their journals, and measured a lower capacity
    (9,849 against 12,325 Deposits/s on fresh replicas, session 15)."""
    rows = {}
    for name, extra in capacity_runs(args):
        pids, targets, stop = start_setup(args, setup, "cluster-bench")
        try:
            report, used = loadtest(args, targets, extra, scratch,
                                    f"{setup}-{name}-{round_number}", pids)
        finally:
            stop()
        rows[name] = report["ops_per_second"]
        rows[f"{name}_cpu_us"] = cpu_us_per_operation(args, report, used)
        rows[f"{name}_p99_ms"] = report["latency_us"]["ok"]["p99"] / 1000
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--accounts", type=int, default=100000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--server_cpu", default="0")
    parser.add_argument("--client_cpu", default="1")
    parser.add_argument("--scratch", default=None)
    parser.add_argument("--relay_us", type=int, default=500,
                        help="delay each way between replicas, through delay_proxy; 0: direct")
    parser.add_argument("--relay_cpu", default=None, help="the relays' CPU (default: client's)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
    scratch = ledgerd_scratch()
    results = {"single": [], "cluster": []}
    for round_number in range(args.rounds):
        for setup in rotated(["single", "cluster"], round_number):
            log(f"round {round_number + 1}: {setup}")
            rows = measure(args, setup, round_number, scratch)
            # Half of this setup's unary capacity: the rate of the p99 row below.
            rows["half_rate"] = max(int(rows["unary"] / 2), 100)
            results[setup].append(rows)
    # The half-capacity runs, on fresh setups (the cluster's rate for both, as the goal says).
    cluster_half = int(statistics.median(r["half_rate"] for r in results["cluster"]))
    for round_number in range(args.rounds):
        for setup in rotated(["single", "cluster"], round_number):
            log(f"round {round_number + 1}: {setup} at {cluster_half} Deposits/s")
            _, targets, stop = start_setup(args, setup, "cluster-bench-half")
            try:
                report, _ = loadtest(args, targets, [f"--rate={cluster_half}"], scratch,
                                     f"{setup}-half-{round_number}")
                results[setup][round_number]["half_p99_ms"] = report["latency_us"]["ok"]["p99"] / 1000
            finally:
                stop()

    def median(setup, key):
        return statistics.median(r[key] for r in results[setup])

    relay = (f"replicas through the relay, {args.relay_us} µs each way" if args.relay_us
             else "replicas connected directly")
    print(f"{args.rounds} rounds; {relay}")
    print(f"| measure | single node | cluster of three | cluster / single, per round | "
          f"single; cluster, per round |")
    print("|---|---:|---:|---|---|")
    for key, label, fmt in (
            ("apply", f"Apply of {args.batch} Deposits, 8 in flight: operations/s", "{:,.0f}"),
            ("apply_cpu_us", "server CPU per operation, µs (all replicas)", "{:.2f}"),
            ("apply_p99_ms", "Apply call p99, ms", "{:.1f}"),
            ("unary", "unary Deposits, 64 in flight: operations/s", "{:,.0f}"),
            ("unary_cpu_us", "server CPU per Deposit, µs (all replicas)", "{:.1f}"),
            ("unary_p99_ms", "unary p99 at 64 in flight, ms", "{:.2f}"),
            ("half_p99_ms", f"unary p99 at {cluster_half}/s (half the cluster's capacity), ms",
             "{:.2f}")):
        ratios = ", ".join(f"{c[key] / s[key]:.2f}" for s, c in
                           zip(results["single"], results["cluster"]) if s[key])
        rounds = "; ".join(f"{fmt.format(s[key])}, {fmt.format(c[key])}"
                           for s, c in zip(results["single"], results["cluster"]))
        print(f"| {label} | {fmt.format(median('single', key))} | "
              f"{fmt.format(median('cluster', key))} | {ratios} | {rounds} |")


if __name__ == "__main__":
    main()
