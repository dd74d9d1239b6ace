#!/usr/bin/env python3
"""Start-up time with a large ledger: issue 31's goal row "start to SERVING, 1M accounts and 20M
operations applied: after a clean stop / after SIGKILL".

ledger-populate writes --accounts accounts and --operations Deposits (each with its journal entry
and idempotency record) straight through the store, twice: once ending in a clean stop (the
store's checkpoint), once killed (std::_Exit, as SIGKILL) when the log holds 95% of what it held
between its last two checkpoints, the most a restart replays short of the next checkpoint. Each
round then starts ledgerd (--durability=sync) on a fresh copy of a directory and measures the
seconds from exec to its --ports_file (written once every listener serves), and the recovery time
ledgerd prints. The disk each directory takes is reported too.

    bench/startup_bench.py --build build/release --rounds 3   (make bench-startup)

Needs the benchmark tree (make build-bench: ledger-populate). Run it with nothing else on the
machine: start-up is CPU and page-cache bound.
"""

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import ledgerd_scratch, log, wait_for_ports  # noqa: E402


def disk_mb(path):
    """What the files under `path` take on disk (allocated blocks), in MB (2^20 bytes)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total / 2**20


def populate(args, data_dir, stop):
    started = time.monotonic()
    result = subprocess.run(
        [f"{args.build}/bench/ledger-populate", f"--data_dir={data_dir}",
         f"--accounts={args.accounts}", f"--operations={args.operations}", f"--stop={stop}"],
        check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in result.stdout.strip().splitlines():
        log(line)
    log(f"populated ({stop}) in {time.monotonic() - started:.0f} s: {disk_mb(data_dir):,.0f} MB")


def start_once(args, data_dir, stop_signal):
    """Starts ledgerd on `data_dir`; returns (seconds from exec to serving, recovery seconds as
    ledgerd printed them), then stops it with `stop_signal`."""
    scratch = ledgerd_scratch()
    ports_file = os.path.join(scratch, "ports.json")
    with open(os.path.join(scratch, "ledgerd.log"), "w+") as output:
        started = time.monotonic()
        process = subprocess.Popen(
            [f"{args.build}/server/ledgerd", "--listen=127.0.0.1:0", "--metrics_listen=",
             "--durability=sync", f"--data_dir={data_dir}", f"--ports_file={ports_file}"],
            stdout=output, stderr=subprocess.STDOUT, text=True)
        try:
            wait_for_ports(process, ports_file, seconds_max=600)
            to_serving = time.monotonic() - started
        finally:
            process.send_signal(stop_signal)
            process.wait(timeout=600)
        output.seek(0)
        text = output.read()
    recovered = re.search(r"recovered (\d+) accounts .* in ([0-9.]+)(ms|s)\b", text)
    if recovered is None or int(recovered.group(1)) != args.accounts:
        raise RuntimeError(f"ledgerd did not recover {args.accounts} accounts:\n{text}")
    recovery = float(recovered.group(2)) / (1000 if recovered.group(3) == "ms" else 1)
    return to_serving, recovery


def measure(args, pristine, stop, scratch):
    runs = []
    for round_number in range(args.rounds):
        work = os.path.join(scratch, "work")
        shutil.rmtree(work, ignore_errors=True)
        subprocess.run(["cp", "-a", pristine, work], check=True)
        subprocess.run(["sync"], check=True)
        to_serving, recovery = start_once(args, work, signal.SIGKILL)
        runs.append((to_serving, recovery))
        log(f"after a {stop} stop, round {round_number + 1}: serving after {to_serving:.2f} s "
            f"(recovery {recovery:.2f} s)")
    shutil.rmtree(os.path.join(scratch, "work"), ignore_errors=True)
    return runs


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build/release")
    parser.add_argument("--accounts", type=int, default=1_000_000)
    parser.add_argument("--operations", type=int, default=20_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scratch", default=None,
                        help="where the directories go (default: a temporary one)")
    args = parser.parse_args(argv)
    scratch = tempfile.mkdtemp(prefix="startup-bench-", dir=args.scratch)
    try:
        results = {}
        for stop in ("clean", "kill"):
            pristine = os.path.join(scratch, f"pristine-{stop}")
            populate(args, pristine, stop)
            results[stop] = (measure(args, pristine, stop, scratch), disk_mb(pristine))
            shutil.rmtree(pristine, ignore_errors=True)
        print(f"\n| stop | {args.accounts:,} accounts, {args.operations:,} Deposits: start to "
              "serving s (median, range) | recovery s (median) | data directory MB |")
        print("|---|---|---|---|")
        for stop, (runs, size) in results.items():
            serving = [run[0] for run in runs]
            recovery = [run[1] for run in runs]
            print(f"| {stop} | {statistics.median(serving):.2f} ({min(serving):.2f}–"
                  f"{max(serving):.2f}) | {statistics.median(recovery):.2f} | {size:,.0f} |")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
