#!/usr/bin/env python3
"""Two ledgerd builds side by side under durable Apply load, for what each replica's storage
costs (issue 32, docs/replication.md 9.7): a single node on --server_cpu, --durability=sync, a
fresh data directory each run; ledger-loadtest (of --new) on --client_cpu sending Apply calls of
1,000 Deposits, 8 in flight, over 100,000 accounts. Prints, per run and as medians of the
alternated rounds, operations/s and CPU µs per operation of the applier thread
(`ledger-applier`: applying the log and the checkpoints) and of the whole process, counted over
the measured window only.

Usage: python3 bench/applier_compare.py --old OLD_BUILD --new build/release [--rounds 6]
  e.g. git worktree add /tmp/old HEAD~1 && cmake -S /tmp/old -B /tmp/old/build -G Ninja \\
       -DCMAKE_BUILD_TYPE=Release && cmake --build /tmp/old/build --target ledgerd"""
import argparse
import glob
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time

from bench_util import cpu_seconds, read_loadtest_report, rotated, start_ledgerd

WARMUP_SECONDS = 2


def thread_cpu_seconds(pid, name):
    """User plus system CPU seconds of the threads of `pid` named `name`."""
    total = 0.0
    for comm in glob.glob(f"/proc/{pid}/task/*/comm"):
        try:
            with open(comm) as f:
                if f.read().strip() != name:
                    continue
            with open(comm[:-len("comm")] + "stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # The thread ended.
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def run(args, build):
    """(operations/s, applier µs per operation, process µs per operation) of one run."""
    root = tempfile.mkdtemp(prefix="applier-compare-", dir=args.scratch)
    try:
        process, port, _ = start_ledgerd(build, "sync", os.path.join(root, "data"), 4,
                                         cpus=args.server_cpu)
        os.sync()
        report_path = os.path.join(root, "report.json")
        loadtest = subprocess.Popen(
            ["taskset", "-c", args.client_cpu,
             os.path.join(args.new, "client", "ledger-loadtest"), f"--target=127.0.0.1:{port}",
             "--accounts=100000", "--mix=deposit=1", "--batch=1000", "--concurrency=8",
             f"--duration={args.seconds}s", f"--warmup={WARMUP_SECONDS}s",
             f"--json_file={report_path}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(WARMUP_SECONDS)
        applier, whole = thread_cpu_seconds(process.pid, "ledger-applier"), cpu_seconds(process.pid)
        time.sleep(args.seconds)
        applier = thread_cpu_seconds(process.pid, "ledger-applier") - applier
        whole = cpu_seconds(process.pid) - whole
        loadtest.wait()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        report = read_loadtest_report(report_path)
        if report["verification"] != "PASS":
            raise RuntimeError(f"{build}: verification {report['verification']}")
        operations = report["ops_per_second"] * args.seconds
        return report["ops_per_second"], applier / operations * 1e6, whole / operations * 1e6
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, help="the build directory of the first build")
    parser.add_argument("--new", required=True, help="the second (its load test is used)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=int, default=6)
    parser.add_argument("--server_cpu", default="0")
    parser.add_argument("--client_cpu", default="1")
    parser.add_argument("--scratch", default="/var/tmp")
    args = parser.parse_args()
    builds = {"old": args.old, "new": args.new}
    results = {"old": [], "new": []}
    for round_number in range(args.rounds):
        for label in rotated(["old", "new"], round_number):
            row = run(args, builds[label])
            results[label].append(row)
            print(f"round {round_number + 1} {label}: {row[0]:,.0f} operations/s, applier "
                  f"{row[1]:.2f} µs/operation, process {row[2]:.2f}", flush=True)
    for label, rows in results.items():
        print(f"{label} ({builds[label]}), medians: "
              f"{statistics.median(r[0] for r in rows):,.0f} operations/s, applier "
              f"{statistics.median(r[1] for r in rows):.2f} µs/operation, process "
              f"{statistics.median(r[2] for r in rows):.2f}")


if __name__ == "__main__":
    main()
