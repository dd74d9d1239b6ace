#!/usr/bin/env python3
"""Leader SIGKILL to the next acknowledged write, N times (issue 32's failover row,
docs/benchmarks.md): three replicas on loopback (every one on --server_cpu), each reached by the
others through a delay relay (--relay_us each way, default 500: a 1 ms round trip, as
bench/cluster_bench.py; the relays on --client_cpu; 0: direct; the killed leader's relay is
killed with it and started again with it), and for each kill a
ledger-loadtest run on --client_cpu sending durable Deposits at --rate to all three addresses.
Once it has run for --before seconds the leader (the replica whose ledger_replica_serving is 1)
is SIGKILLed; the run's longest stretch without an OK answer (its report's longest_ok_gap_ms,
which spans the kill) is that kill's failover time, from the last write acknowledged before it
to the first after: at least the true time, by one interval between sends. The killed replica is
started again and caught up before the next kill. Prints the times, their median and worst, and
each run's verification (it must PASS).

  python3 bench/cluster_failover.py --build build/release --kills 20
"""
import argparse
import os
import secrets
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import log, read_loadtest_report, raise_keyboard_interrupt, ledgerd_scratch
from cluster_bench import free_port, scratch_dir, start_relay


class Replica:
    def __init__(self, build, node_id, peers, clients, grpc_port, raft_port, data_dir, cpus):
        self.metrics_port = free_port()
        self.command = ["taskset", "-c", cpus, os.path.join(build, "server", "ledgerd"),
                        f"--node_id={node_id}", f"--peers={peers}", f"--peer_clients={clients}",
                        f"--listen=127.0.0.1:{grpc_port}", f"--raft_listen=127.0.0.1:{raft_port}",
                        f"--metrics_listen=127.0.0.1:{self.metrics_port}", "--shards=4",
                        f"--data_dir={data_dir}"]
        self.process = None

    def start(self):
        self.process = subprocess.Popen(self.command, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)

    def metric(self, name):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                        timeout=1) as response:
                for line in response.read().decode().splitlines():
                    if line.startswith(name + " "):
                        return float(line.split()[1])
        except OSError:
            return None
        return None


def wait_until(condition, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting until {what}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", required=True)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--before", type=float, default=1.5)
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument("--server_cpu", default="0")
    parser.add_argument("--client_cpu", default="1")
    parser.add_argument("--relay_us", type=int, default=500,
                        help="delay each way between replicas, through delay_proxy; 0: direct")
    parser.add_argument("--keep_relay", action="store_true",
                        help="leave the killed leader's relay up (it accepts and drops connections)")
    parser.add_argument("--scratch", default=None)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
    root = scratch_dir(args, "cluster-failover-")
    grpc_ports = [free_port() for _ in range(3)]
    raft_ports = [free_port() for _ in range(3)]
    relay_ports = [free_port() for _ in range(3)] if args.relay_us else raft_ports
    relays = [None] * 3

    def relay_for(i):
        relays[i] = start_relay(args.build, args.client_cpu, relay_ports[i], raft_ports[i],
                                args.relay_us)

    for i in range(3 if args.relay_us else 0):
        relay_for(i)
    peers = ",".join(f"{i + 1}=127.0.0.1:{relay_ports[i]}" for i in range(3))
    clients = ",".join(f"{i + 1}=127.0.0.1:{grpc_ports[i]}" for i in range(3))
    targets = ",".join(f"127.0.0.1:{port}" for port in grpc_ports)
    replicas = []
    ledger_id = secrets.token_hex(16)  # One ledger: ledgerd refuses a replica of another.
    for i in range(3):
        data_dir = os.path.join(root, f"node{i + 1}")
        subprocess.run([os.path.join(args.build, "server", "ledgerd"), "init",
                        f"--data_dir={data_dir}", f"--ledger_id={ledger_id}"], check=True,
                       stdout=subprocess.DEVNULL)
        replicas.append(Replica(args.build, i + 1, peers, clients, grpc_ports[i], raft_ports[i],
                                data_dir, args.server_cpu))
        replicas[-1].start()
    scratch = ledgerd_scratch()
    times = []
    try:
        for kill in range(args.kills):
            wait_until(lambda: sum(r.metric("ledger_replica_serving") or 0 for r in replicas) == 1,
                       30, "one replica serves")
            json_path = os.path.join(scratch, f"kill-{kill}.json")
            loadtest = subprocess.Popen(
                ["taskset", "-c", args.client_cpu,
                 os.path.join(args.build, "client", "ledger-loadtest"), f"--target={targets}",
                 "--accounts=1000", "--mix=deposit=1", f"--rate={args.rate}",
                 f"--duration={args.seconds}s", "--warmup=0s", f"--json_file={json_path}"],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            time.sleep(args.before)
            leader = next(r for r in replicas if r.metric("ledger_replica_serving") == 1)
            leader.process.kill()
            # Its relay too, unless --keep_relay: the relay is the dead machine's end of the
            # network, and one left up accepts the others' connections for a process that is
            # gone, then closes them, which libraft 0.15 takes about 350 ms longer to elect past
            # (docs/replication.md 9.2).
            index = replicas.index(leader)
            if args.relay_us and not args.keep_relay:
                relays[index].kill()
                relays[index].wait()
            leader.process.wait()
            _, stderr = loadtest.communicate()
            report = read_loadtest_report(json_path)
            if report["verification"] != "PASS":
                raise RuntimeError(f"kill {kill + 1}: verification {report['verification']}: "
                                   f"{stderr[-2000:]}")
            gap = report["longest_ok_gap_ms"]
            times.append(gap)
            log(f"kill {kill + 1}: node {replicas.index(leader) + 1}, {gap:.0f} ms without an "
                f"acknowledged write, verification PASS")
            if args.relay_us and not args.keep_relay:
                relay_for(index)
            leader.start()
            def caught_up():
                # Read once: a replica that starts again (or takes the leader's state) has no
                # /metrics for a moment, and a second read could find none.
                applied = leader.metric("ledger_replica_applied_position")
                return applied is not None and applied >= max(
                    r.metric("ledger_replica_commit_position") or 0 for r in replicas)

            wait_until(caught_up, 60, "the killed replica catches up")
    finally:
        for replica in replicas:
            if replica.process and replica.process.poll() is None:
                replica.process.send_signal(signal.SIGTERM)
        for replica in replicas:
            if replica.process:
                replica.process.wait(timeout=30)
        for relay in relays:
            if relay:
                relay.kill()
                relay.wait()
    ordered = sorted(times)
    print(f"| kills | median | worst | every one, ms |")
    print("|---:|---:|---:|---|")
    print(f"| {len(times)} | {statistics.median(times):.0f} ms | {ordered[-1]:.0f} ms | "
          f"{', '.join(f'{t:.0f}' for t in times)} |")


if __name__ == "__main__":
    main()
