#!/usr/bin/env python3
"""Markdown tables from ledger-journal-bench's JSON output (--benchmark_out=FILE
--benchmark_out_format=json, with --benchmark_repetitions): per variant and group size, the median
over the repetitions of writes/s, deposits/s and one write's p50/p99, the ratio of deposits/s to
the baseline's, and the spread (min-max of deposits/s) as a measure of the noise.

With --paired, BM_Paired's rows: the median over the repetitions of the speedup (the baseline's mean
time per group / the variant's, both measured in turn in one process) and of both sides' figures.
With --breakdown, BM_Breakdown's PerfContext/IOStatsContext counters, microseconds per write.

Usage: python3 bench/journal_table.py FILE.json [--breakdown | --paired]
"""
import argparse
import json
import re
import statistics
from collections import defaultdict

NAME = re.compile(r"BM_(GroupCommit|Breakdown|Paired)/([^/]+)/G:(\d+)/real_time")
BREAKDOWN = ["mean_write_us", "wal_us", "io_fsync_us", "io_write_us", "memtable_us",
             "prepost_us", "sched_us", "delay_us", "flushwal_us", "build_us"]


def load(path):
    runs = defaultdict(list)  # (kind, variant, G) -> [run]
    errors = {}
    with open(path) as f:
        data = json.load(f)
    for b in data["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        m = NAME.match(b["run_name"] if "run_name" in b else b["name"])
        if not m:
            continue
        key = (m.group(1), m.group(2), int(m.group(3)))
        if b.get("error_occurred"):
            errors[key] = b.get("error_message", "error")
            continue
        runs[key].append(b)
    return data["context"], runs, errors


def med(runs, field):
    return statistics.median(r[field] for r in runs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--breakdown", action="store_true")
    parser.add_argument("--paired", action="store_true")
    args = parser.parse_args()
    context, runs, errors = load(args.file)
    print(f"<!-- {context.get('date')} load average {context.get('load_avg')} -->")
    kind = "Breakdown" if args.breakdown else "Paired" if args.paired else "GroupCommit"
    variants = []
    for (k, v, _g) in list(runs) + list(errors):
        if k == kind and v not in variants:
            variants.append(v)
    groups = sorted({g for (k, _v, g) in runs if k == kind})
    if args.breakdown:
        print("| variant | G | reps | " + " | ".join(BREAKDOWN) + " |")
        print("|---|---|---|" + "---|" * len(BREAKDOWN))
        for v in variants:
            for g in groups:
                r = runs.get((kind, v, g))
                if r:
                    cells = [f"{med(r, f):.1f}" for f in BREAKDOWN]
                    print(f"| {v} | {g} | {len(r)} | " + " | ".join(cells) + " |")
        return
    if args.paired:
        print("| variant | G | reps | speedup (min-max) | baseline µs/group | variant µs/group "
              "| baseline p50 µs | variant p50 µs | baseline p99 µs | variant p99 µs |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for v in variants:
            for g in groups:
                if (kind, v, g) in errors:
                    print(f"| {v} | {g} | - | {errors[(kind, v, g)]} | | | | | | |")
                    continue
                r = runs.get((kind, v, g))
                if not r:
                    continue
                speedups = [x["speedup"] for x in r]
                cells = [f"{med(r, f):,.0f}" for f in ("base_group_us", "var_group_us", "base_p50_us",
                                                       "var_p50_us", "base_p99_us", "var_p99_us")]
                print(f"| {v} | {g} | {len(r)} | {statistics.median(speedups):.2f} "
                      f"({min(speedups):.2f}-{max(speedups):.2f}) | " + " | ".join(cells) + " |")
        return
    print("| variant | G | reps | writes/s | deposits/s (min-max) | vs baseline | p50 µs | p99 µs |")
    print("|---|---|---|---|---|---|---|---|")
    for v in variants:
        for g in groups:
            if (kind, v, g) in errors:
                print(f"| {v} | {g} | - | {errors[(kind, v, g)]} | | | | |")
                continue
            r = runs.get((kind, v, g))
            if not r:
                continue
            deposits = [x["deposits"] for x in r]
            base = runs.get((kind, "baseline", g))
            ratio = med(r, "deposits") / med(base, "deposits") if base else float("nan")
            print(f"| {v} | {g} | {len(r)} | {med(r, 'writes'):,.0f} | "
                  f"{statistics.median(deposits):,.0f} ({min(deposits):,.0f}-{max(deposits):,.0f})"
                  f" | {ratio:.2f} | {med(r, 'p50_us'):,.0f} | {med(r, 'p99_us'):,.0f} |")


if __name__ == "__main__":
    main()
