#!/usr/bin/env python3
"""Issue 15's goal: durable transfers against durable deposits at 64 calls in flight.

For each round and workload (in an order rotated per round), a fresh ledgerd (pinned to CPU 0,
--durability=sync by default) is funded with deposits to every account, then measured with one
workload of ledger-loadtest (pinned to CPU 1): Deposits only, same-shard Transfers only, or
cross-shard Transfers only, a closed loop of 64 calls. /metrics is scraped every 200 ms while it
runs, for the money in flight between shards. Prints one line per run and the medians, and the
ratios to Deposits that the goals name (cross-shard >= 0.5x, same-shard >= 0.8x).

    python3 bench/transfer_bench.py --build build/release --rounds 3
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request

from bench_util import (log, rotated, raise_keyboard_interrupt, read_loadtest_report,
                        start_ledgerd)

WORKLOADS = {
    "deposit": ["--mix=deposit=1"],
    "same_shard": ["--mix=transfer=1", "--transfer_scope=same_shard"],
    "cross_shard": ["--mix=transfer=1", "--transfer_scope=cross_shard"],
}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build/release")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=8)
    parser.add_argument("--warmup", type=float, default=2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--accounts", type=int, default=1000)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--durability", default="sync")
    parser.add_argument("--server_cpu", default="0")
    parser.add_argument("--client_cpu", default="1")
    parser.add_argument("--json_out", default="")
    return parser.parse_args()


def loadtest(args, port, extra, duration, warmup, json_path):
    command = ["taskset", "-c", args.client_cpu, os.path.join(args.build, "client",
                                                              "ledger-loadtest"),
               f"--target=127.0.0.1:{port}", f"--accounts={args.accounts}",
               f"--concurrency={args.concurrency}", f"--duration={duration}s",
               f"--warmup={warmup}s", f"--server_shards={args.shards}", "--verify=false",
               # One run id for the funding and the measurement: the same account names.
               "--run_id=bench", f"--json_file={json_path}"] + extra
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return read_loadtest_report(json_path)


def sample_in_flight(metrics_port, stop, samples):
    pattern = re.compile(r"^ledger_transfers_in_flight(_amount)? (\S+)$", re.M)
    while not stop.is_set():
        try:
            body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                          timeout=1).read().decode()
            values = {suffix: float(value) for suffix, value in pattern.findall(body)}
            samples.append((values.get("", 0.0), values.get("_amount", 0.0)))
        except OSError:
            pass
        stop.wait(0.2)


def run_one(args, workload, scratch):
    data_dir = tempfile.mkdtemp(dir=scratch)
    process, port, metrics_port = start_ledgerd(args.build, args.durability, data_dir, args.shards,
                                                  args.server_cpu)
    try:
        # Every account funded, so that transfers are refused only when a balance runs out.
        # (Not before Deposits: they need no funds, and the funding's request_ids would collide
        # with theirs, as one run id names the same accounts.)
        if workload != "deposit":
            loadtest(args, port,
                     ["--mix=deposit=1", "--amount_min=1000000", "--amount_max=1000000"], 2, 0,
                     os.path.join(scratch, "fund.json"))
        stop = threading.Event()
        samples = []
        sampler = threading.Thread(target=sample_in_flight, args=(metrics_port, stop, samples))
        sampler.start()
        report = loadtest(args, port, WORKLOADS[workload], args.duration, args.warmup,
                          os.path.join(scratch, f"{workload}.json"))
        stop.set()
        sampler.join()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        shutil.rmtree(data_dir, ignore_errors=True)
    return report, samples


def ok_per_second(report):
    return report["ok_per_second"]


def main():
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
    args = parse_args()
    scratch = tempfile.mkdtemp(prefix="ledger-transfer-bench-")
    results = {name: [] for name in WORKLOADS}
    try:
        for round_index in range(args.rounds):
            for workload in rotated(list(WORKLOADS), round_index):
                report, samples = run_one(args, workload, scratch)
                latency = report["latency_us"]["ok"]
                amounts = [amount for _, amount in samples] or [0.0]
                counts = [count for count, _ in samples] or [0.0]
                result = {
                    "ok_per_second": ok_per_second(report),
                    "p50_ms": latency["p50"] / 1000, "p99_ms": latency["p99"] / 1000,
                    "codes": report["codes"],
                    "in_flight_count_median": statistics.median(counts),
                    "in_flight_amount_median": statistics.median(amounts),
                    "in_flight_amount_max": max(amounts),
                    "client_cpu_seconds": report.get("client_cpu_seconds"),
                }
                results[workload].append(result)
                log(f"round {round_index + 1} {workload}: {result['ok_per_second']:.0f} OK/s, "
                    f"p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms, in flight "
                    f"{result['in_flight_count_median']:.0f} / {result['in_flight_amount_median']:.0f}"
                    f" (max {result['in_flight_amount_max']:.0f}), codes {result['codes']}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    median = {name: statistics.median(r["ok_per_second"] for r in runs)
              for name, runs in results.items() if runs}
    print(f"{'workload':<12} {'OK/s median':>12} {'range':>17} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'in flight (count / amount, median)':>36}")
    for name, runs in results.items():
        rates = [r["ok_per_second"] for r in runs]
        print(f"{name:<12} {median[name]:>12.0f} {min(rates):>8.0f}-{max(rates):<8.0f} "
              f"{statistics.median(r['p50_ms'] for r in runs):>7.1f} "
              f"{statistics.median(r['p99_ms'] for r in runs):>7.1f} "
              f"{statistics.median(r['in_flight_count_median'] for r in runs):>17.0f} / "
              f"{statistics.median(r['in_flight_amount_median'] for r in runs):<16.0f}")
    for name, goal in (("cross_shard", 0.5), ("same_shard", 0.8)):
        ratio = median[name] / median["deposit"]
        # Also per round: each round's runs are minutes apart, not hours, so the machine's drift
        # cancels out more of the ratio.
        per_round = [r["ok_per_second"] / d["ok_per_second"]
                     for r, d in zip(results[name], results["deposit"])]
        round_median = statistics.median(per_round)
        print(f"{name} / deposit = {ratio:.2f} of the medians, {round_median:.2f} median of the "
              f"rounds ({', '.join(f'{x:.2f}' for x in per_round)}); goal >= {goal}: "
              f"{'PASS' if min(ratio, round_median) >= goal else 'MISS'}")
    if args.json_out:
        with open(args.json_out, "w") as out:
            json.dump(results, out, indent=1)


if __name__ == "__main__":
    main()
