#!/usr/bin/env python3
"""Issue 16's goals: Apply batches against unary calls, with and without the journal.

For each round and configuration (in an order rotated per round), a fresh ledgerd (--shards=2,
its default flags otherwise) is measured with one closed-loop run of ledger-loadtest: Deposits
over --accounts accounts on the 4 connections the client opens by default, either one call per
operation (unary, 64 in flight) or Apply calls of --batch operations (8 in flight, 3 for 8,192,
see in_flight). Both
processes share the machine's cores unless --server_cpu/--client_cpu pin them. Around each run
it reads ledgerd's /metrics (journal writes, operations applied) and the sectors written to the
data directory's block device (flushes and compactions included), for the bytes written per
operation and the fsync rate. Then, per durability, an open-loop run at half the median maximum call rate of
the smallest batch gives the p99 the goal names. Prints one line per run, then the medians and
the ratios to unary calls measured in the same rounds.

    python3 bench/apply_bench.py --build build/release --rounds 3
"""
import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
import urllib.request

from bench_util import (log, rotated, raise_keyboard_interrupt, read_loadtest_report,
                        start_ledgerd)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build/release")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5)
    parser.add_argument("--warmup", type=float, default=2)
    parser.add_argument("--accounts", type=int, default=100000)
    parser.add_argument("--batches", default="1000,8192",
                        help="operations per Apply call, comma-separated")
    parser.add_argument("--batch_concurrency", type=int, default=8,
                        help="Apply calls in flight at most (fewer for large batches: in_flight)")
    parser.add_argument("--unary_concurrency", type=int, default=64,
                        help="unary calls in flight")
    parser.add_argument("--durability", default="none,sync", help="modes, comma-separated")
    parser.add_argument("--server_cpu", default="", help="taskset CPU list for ledgerd")
    parser.add_argument("--client_cpu", default="", help="taskset CPU list for the client")
    return parser.parse_args()


def pinned(cpus, command):
    return (["taskset", "-c", cpus] if cpus else []) + command


def device_bytes_written(path):
    """Bytes written so far to the block device holding `path` (its sectors-written counter):
    everything ledgerd wrote there (log, flushes, compactions), and whatever else on this quiet
    machine wrote to the same device. Not /proc/PID/io's write_bytes: on Linux 6.x that counts
    a page-cache folio whole when a write dirties any byte of it, and ext4 caches files in folios
    of up to megabytes, so each small synced append counted ~345 KB where the device received
    ~6 KB (docs/benchmarks-history.md, "Apply")."""
    device = os.stat(path).st_dev
    with open(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}/stat") as stat:
        return int(stat.read().split()[6]) * 512


def server_counters(metrics_port, data_dir):
    """Operations applied (unary Deposits and Apply results answered OK; shed ones wrote
    nothing), journal writes (one fsync each with --durability=sync) and bytes written to the
    data directory's device, so far."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                  timeout=5).read().decode()

    def total(pattern):
        return sum(float(value) for value in re.findall(pattern, body, re.M))

    written = device_bytes_written(data_dir)
    return {
        "operations": total(r'^ledger_apply_results_total\{code="OK"\} (\S+)$') +
                      total(r'^ledger_requests_total\{code="OK",method="Deposit"\} (\S+)$'),
        "journal_writes": total(r"^ledger_journal_write_seconds_count(?:\{[^}]*\})? (\S+)$"),
        "bytes_written": written,
    }


def in_flight(args, batch):
    """Calls kept in flight: for batches, no more than the 2 shards' mailboxes (16,384 operations
    each by default) hold whole with a margin for uneven splits, so that what is measured is
    throughput rather than parts shed: 8 calls of 1,000, 3 of 8,192."""
    if batch == 1:
        return args.unary_concurrency
    return max(1, min(args.batch_concurrency, int(0.9 * 2 * 16384 / batch)))


def run_one(args, durability, batch, scratch, rate=None):
    data_dir = tempfile.mkdtemp(dir=scratch)
    process, port, metrics_port = start_ledgerd(args.build, durability, data_dir, 2, args.server_cpu)
    json_path = os.path.join(scratch, "report.json")
    loop = [f"--rate={rate}"] if rate else [
        f"--concurrency={in_flight(args, batch)}"]
    command = pinned(args.client_cpu, [
        os.path.join(args.build, "client", "ledger-loadtest"), f"--target=127.0.0.1:{port}",
        f"--accounts={args.accounts}", "--mix=deposit=1", f"--batch={batch}",
        f"--duration={args.duration}s", f"--warmup={args.warmup}s", "--verify=false",
        f"--json_file={json_path}"] + loop)
    try:
        before = server_counters(metrics_port, data_dir)
        started = time.time()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        elapsed = time.time() - started
        after = server_counters(metrics_port, data_dir)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        shutil.rmtree(data_dir, ignore_errors=True)
    report = read_loadtest_report(json_path)
    operations = max(after["operations"] - before["operations"], 1)
    latency = report["latency_us"]["ok"]
    return {
        "ops_per_second": report["ops_per_second"],
        "calls_per_second": report["calls_per_second"],
        "p50_ms": latency["p50"] / 1000, "p99_ms": latency["p99"] / 1000,
        "client_cpu": report["client_cpu_seconds"] / max(report["measured_seconds"], 1e-9),
        "bytes_per_op": (after["bytes_written"] - before["bytes_written"]) / operations,
        "fsync_per_second": (after["journal_writes"] - before["journal_writes"]) / elapsed
        if durability != "none" else 0.0,
        "ops_per_write": operations / max(after["journal_writes"] - before["journal_writes"], 1)
        if durability != "none" else 0.0,
    }


def describe(name, result):
    return (f"{name:<22} {result['ops_per_second']:>11,.0f} ops/s {result['calls_per_second']:>9,.0f}"
            f" calls/s  p50 {result['p50_ms']:7.2f} ms  p99 {result['p99_ms']:7.2f} ms  "
            f"{result['bytes_per_op']:6.0f} B/op  {result['fsync_per_second']:6.0f} fsync/s  "
            f"{result['ops_per_write']:6.0f} ops/write  client CPU {result['client_cpu']:.0%}")


def median_of(results):
    return {key: statistics.median(result[key] for result in results) for key in results[0]}


def main():
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
    args = parse_args()
    modes = args.durability.split(",")
    batches = [int(batch) for batch in args.batches.split(",")]
    configs = [(mode, batch) for mode in modes for batch in [1] + batches]
    scratch = tempfile.mkdtemp(prefix="ledger-apply-bench-")
    results = {config: [] for config in configs}
    try:
        for round_index in range(args.rounds):
            for mode, batch in rotated(configs, round_index):
                result = run_one(args, mode, batch, scratch)
                results[(mode, batch)].append(result)
                log(f"round {round_index + 1}: " + describe(f"{mode} batch={batch}", result))
        half_rate = {}
        for mode in modes:
            # Half the median maximum call rate of the smallest batch, open loop.
            rate = median_of(results[(mode, batches[0])])["calls_per_second"] / 2
            half_rate[mode] = (rate, [run_one(args, mode, batches[0], scratch, rate=max(rate, 1))
                                      for _ in range(args.rounds)])
            for result in half_rate[mode][1]:
                log(describe(f"{mode} batch={batches[0]} @{rate:.0f}/s", result))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print(f"\nmedians of {args.rounds} rounds, {args.accounts} accounts, 2 shards, "
          f"server CPUs {args.server_cpu or 'any'}, client CPUs {args.client_cpu or 'any'}:")
    for mode in modes:
        unary = median_of(results[(mode, 1)])
        print(describe(f"{mode} unary", unary))
        for batch in batches:
            medians = median_of(results[(mode, batch)])
            ratios = [result["ops_per_second"] / unary_result["ops_per_second"]
                      for result, unary_result in zip(results[(mode, batch)], results[(mode, 1)])]
            print(describe(f"{mode} batch={batch}", medians) +
                  f"  {statistics.median(ratios):.1f}x unary (per round: " +
                  ", ".join(f"{ratio:.1f}x" for ratio in ratios) + ")")
        rate, runs = half_rate[mode]
        print(describe(f"{mode} batch={batches[0]} @{rate:.0f}/s", median_of(runs)) +
              "  (half the maximum call rate)")


if __name__ == "__main__":
    main()
