#!/usr/bin/env python3
"""Values of one ledgerd flag compared side by side on a cluster of three replicas through the
delay relay (docs/replication.md 9.3 and 9.6): for each value, durable Deposits as Apply calls
of --batch operations (8 in flight), unary Deposits at capacity (64 in flight) and their p99,
then unary Deposits at a fixed rate and their p99, the rate being half of the first value's
median capacity (issue 32's "p99 at half the cluster's capacity" row). Each round starts fresh
replicas for every value and run, in rotated order; servers on --server_cpu, the load test on
--client_cpu, the relays on --relay_cpu (default: the client's). Every run's verification
must PASS. Prints a markdown table of medians and the per-round figures.

  python3 bench/cluster_flag_compare.py --build build/release --flag raft_writes_in_flight \
      --values 1,2,4 --rounds 3
  python3 bench/cluster_flag_compare.py --build build/release --flag log_segment_mib \
      --values 8,64 --rounds 3
"""
import argparse
import os
import signal
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import log, raise_keyboard_interrupt, rotated, ledgerd_scratch
from cluster_bench import capacity_runs, cpu_us_per_operation, loadtest, start_setup


def run(args, value, name, extra, scratch):
    """One fresh cluster with --FLAG=value under one load test: its report and the replicas'
    CPU µs per operation."""
    pids, targets, stop = start_setup(args, "cluster", f"cluster-flag-{value}",
                                      flags=[f"--{args.flag}={value}"])
    try:
        report, used = loadtest(args, targets, extra, scratch, name, pids)
    finally:
        stop()
    return report, cpu_us_per_operation(args, report, used)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", required=True)
    parser.add_argument("--flag", required=True, help="the ledgerd flag compared, without --")
    parser.add_argument("--values", required=True, help="its values, comma-separated")
    parser.add_argument("--batch", type=int, default=1000, help="operations per Apply call")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--accounts", type=int, default=100000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--server_cpu", default="0")
    parser.add_argument("--client_cpu", default="1")
    parser.add_argument("--relay_us", type=int, default=500)
    parser.add_argument("--relay_cpu", default=None, help="the relays' CPU (default: client's)")
    parser.add_argument("--rate", type=int, default=0,
                        help="the fixed rate; 0: half the first value's median capacity")
    parser.add_argument("--scratch", default=None)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
    values = args.values.split(",")
    scratch = ledgerd_scratch()
    rows = {value: [] for value in values}
    for round_number in range(args.rounds):
        for value in rotated(values, round_number):
            row = {}
            for name, extra in capacity_runs(args):
                log(f"round {round_number + 1}: --{args.flag}={value}, {name}")
                report, cpu_us = run(args, value, f"flag-{name}-{value}-{round_number}", extra,
                                     scratch)
                row.update({name: report["ops_per_second"], f"{name}_cpu_us": cpu_us,
                            f"{name}_p99_ms": report["latency_us"]["ok"]["p99"] / 1000})
            rows[value].append(row)
    rate = args.rate or max(int(statistics.median(r["unary"] for r in rows[values[0]]) / 2),
                            100)
    for round_number in range(args.rounds):
        for value in rotated(values, round_number):
            log(f"round {round_number + 1}: --{args.flag}={value}, {rate} Deposits/s")
            report, _ = run(args, value, f"flag-rate-{value}-{round_number}",
                            [f"--rate={rate}"], scratch)
            latency = report["latency_us"]["ok"]
            rows[value][round_number].update({"rate_p50_ms": latency["p50"] / 1000,
                                              "rate_p99_ms": latency["p99"] / 1000})

    print(f"{args.rounds} rounds; replicas through the relay, {args.relay_us} µs each way; "
          f"servers on CPU {args.server_cpu}, load test on CPU {args.client_cpu}, relays on CPU "
          f"{args.relay_cpu or args.client_cpu}")
    print(f"| --{args.flag} | " + " | ".join(values) + " |")
    print("|---|" + "---:|" * len(values))
    for key, label, fmt in (
            ("apply", f"Apply of {args.batch} Deposits, 8 in flight: operations/s", "{:,.0f}"),
            ("apply_cpu_us", "server CPU per Apply operation, µs (all replicas)", "{:.2f}"),
            ("unary", "unary Deposits, 64 in flight: operations/s", "{:,.0f}"),
            ("unary_cpu_us", "server CPU per Deposit, µs (all replicas)", "{:.1f}"),
            ("unary_p99_ms", "p99 at 64 in flight, ms", "{:.2f}"),
            ("rate_p50_ms", f"p50 at {rate}/s, ms", "{:.2f}"),
            ("rate_p99_ms", f"p99 at {rate}/s, ms", "{:.2f}")):
        cells = []
        for value in values:
            figures = [r[key] for r in rows[value]]
            cells.append(f"{fmt.format(statistics.median(figures))} "
                         f"({', '.join(fmt.format(f) for f in figures)})")
        print(f"| {label}, median (rounds) | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
