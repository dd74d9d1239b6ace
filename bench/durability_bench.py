#!/usr/bin/env python3
"""Durable Deposit benchmark: ledgerd --durability=sync against --durability=none and PostgreSQL.

Part 1, throughput. Each round runs, one after another on this machine (so that its noise hits
all three alike): ledgerd with --durability=sync, ledgerd with --durability=none (the order
alternates between rounds), and PostgreSQL doing the same job through pgbench
(bench/postgres_bench.py: UPDATE ... SET balance = balance + $1 with synchronous_commit=on). For
ledgerd, ledger-loadtest runs a closed loop of Deposits with a request_id at each concurrency; the
mean batch size (calls per journal write) comes from ledgerd's ledger_batch_size metric.
Goals (issue 6): durable throughput >= 3x PostgreSQL's, and >= 0.5x the in-memory figure at
concurrency 256.

Part 2, start-up and memory: ledger-populate writes a data directory of --million_accounts
accounts; ledgerd starts on it (recovery time from its log and ledger_recovery_seconds, resident
memory from /proc) several times. Goals: recovery under 5 s and RSS under 250 MB at one million.

Server and clients share this machine. Prints Markdown tables; --json writes everything.

Usage: bench/durability_bench.py [--build build/release] [--rounds 3] [--duration 5]
       [--warmup 1] [--clients 16,64,256] [--million_accounts 1000000] [--skip_postgres]
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from e2e_bench import stop

HERE = os.path.dirname(os.path.abspath(__file__))


def start_ledgerd(build, durability, data_dir, extra=()):
    """Starts ledgerd; returns (process, grpc port, metrics port, stderr lines before the start)."""
    command = [f"{build}/server/ledgerd", "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
               f"--durability={durability}", f"--data_dir={data_dir}", *extra]
    if durability != "none" and not os.path.exists(data_dir):
        subprocess.run([f"{build}/server/ledgerd", "init", f"--data_dir={data_dir}"], check=True,
                       stdout=subprocess.DEVNULL)
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    deadline = time.time() + 120
    while time.time() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        match = re.search(r"listening on 127\.0\.0\.1:(\d+), metrics on http://127\.0\.0\.1:(\d+)",
                          line)
        if match:
            return (process, int(match.group(1)), int(match.group(2)), lines,
                    time.monotonic() - started)
    process.kill()
    raise RuntimeError(f"ledgerd did not start: {''.join(lines)}")


def scrape(metrics_port):
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as reply:
        return reply.read().decode()


def metric_sum(text, name):
    """Sum of every sample of `name` (any labels)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def loadtest(build, port, concurrency, args, resolve):
    with tempfile.NamedTemporaryFile(suffix=".json") as report:
        command = [f"{build}/client/ledger-loadtest", f"--target=127.0.0.1:{port}",
                   f"--json_file={report.name}", "--mix=deposit=100", "--accounts=10000",
                   f"--concurrency={concurrency}", f"--duration={args.duration}s",
                   f"--warmup={args.warmup}s", f"--resolve_for={'60s' if resolve else '0'}"]
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        with open(report.name) as file:
            data = json.load(file)
    data["exit_code"] = result.returncode
    if result.returncode != 0:
        print(result.stdout, file=sys.stderr)
    return data


def ledgerd_round(args, durability, scratch):
    """One ledgerd run at every concurrency; returns {concurrency: figures}."""
    data_dir = os.path.join(scratch, f"data-{durability}")
    shutil.rmtree(data_dir, ignore_errors=True)
    process, port, metrics_port, _, _ = start_ledgerd(args.build, durability, data_dir)
    figures = {}
    try:
        for concurrency in args.clients:
            before = scrape(metrics_port)
            report = loadtest(args.build, port, concurrency, args, durability != "none")
            after = scrape(metrics_port)
            calls = metric_sum(after, "ledger_batch_size_sum") - metric_sum(before,
                                                                            "ledger_batch_size_sum")
            batches = metric_sum(after, "ledger_batch_size_count") - metric_sum(
                before, "ledger_batch_size_count")
            figures[concurrency] = {
                "ok_per_second": report["ok_per_second"],
                "p99_ms": report["latency_us"]["ok"]["p99"] / 1000,
                "mean_batch": calls / batches if batches else float("nan"),
                "verification": report["verification"],
                "codes": report["codes"],
            }
    finally:
        stop(process)
        shutil.rmtree(data_dir, ignore_errors=True)
    return figures


def postgres_round(args, scratch):
    path = os.path.join(scratch, "postgres.json")
    command = [sys.executable, os.path.join(HERE, "postgres_bench.py"), "--workloads=deposit",
               f"--clients={','.join(map(str, args.clients))}", f"--duration={args.duration}",
               f"--warmup={args.warmup}", "--rounds=1", f"--json={path}"]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    with open(path) as file:
        cells = json.load(file)["cells"]
    return {cell["clients"]: {"ok_per_second": cell["median_tps"], "p99_ms": cell["median_p99_ms"]}
            for cell in cells}


def median(values):
    values = [v for v in values if v == v]  # Drop NaN.
    return statistics.median(values) if values else float("nan")


def throughput(args, scratch):
    rounds = []
    for round_index in range(args.rounds):
        order = ["sync", "none"] if round_index % 2 == 0 else ["none", "sync"]
        this_round = {}
        for durability in order:
            this_round[durability] = ledgerd_round(args, durability, scratch)
            print(f"round {round_index + 1} {durability}: "
                  + ", ".join(f"c={c} {f['ok_per_second']:.0f}/s p99 {f['p99_ms']:.1f} ms "
                              f"batch {f['mean_batch']:.1f} {f['verification']}"
                              for c, f in this_round[durability].items()), file=sys.stderr)
        if not args.skip_postgres:
            this_round["postgres"] = postgres_round(args, scratch)
            print(f"round {round_index + 1} postgres: "
                  + ", ".join(f"c={c} {f['ok_per_second']:.0f}/s p99 {f['p99_ms']:.1f} ms"
                              for c, f in this_round["postgres"].items()), file=sys.stderr)
        rounds.append(this_round)

    print("\n| Concurrency | sync calls/s | sync p99 ms | mean batch | none calls/s | none p99 ms |"
          " sync/none | PostgreSQL tps | PostgreSQL p99 ms | sync/PostgreSQL |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    summary = {}
    for c in args.clients:
        def med(system, key):
            return median([r[system][c][key] for r in rounds if system in r])
        row = {
            "sync": med("sync", "ok_per_second"), "sync_p99": med("sync", "p99_ms"),
            "batch": med("sync", "mean_batch"), "none": med("none", "ok_per_second"),
            "none_p99": med("none", "p99_ms"),
            # Ratios per round, then their median: each pair ran minutes apart at most.
            "sync_over_none": median([r["sync"][c]["ok_per_second"] / r["none"][c]["ok_per_second"]
                                      for r in rounds]),
            "pg": med("postgres", "ok_per_second"), "pg_p99": med("postgres", "p99_ms"),
            "sync_over_pg": median([r["sync"][c]["ok_per_second"] / r["postgres"][c]["ok_per_second"]
                                    for r in rounds if "postgres" in r]),
        }
        summary[c] = row
        print(f"| {c} | {row['sync']:.0f} | {row['sync_p99']:.2f} | {row['batch']:.1f} | "
              f"{row['none']:.0f} | {row['none_p99']:.2f} | {row['sync_over_none']:.2f} | "
              f"{row['pg']:.0f} | {row['pg_p99']:.2f} | {row['sync_over_pg']:.2f} |")
    return {"rounds": rounds, "summary": summary}


def startup(args, scratch):
    data_dir = os.path.join(scratch, "million")
    shutil.rmtree(data_dir, ignore_errors=True)
    populate = subprocess.run([f"{args.build}/bench/ledger-populate", f"--data_dir={data_dir}",
                               f"--accounts={args.million_accounts}"],
                              check=True, stdout=subprocess.PIPE, text=True)
    print(populate.stdout.strip(), file=sys.stderr)
    disk_mb = sum(os.path.getsize(os.path.join(root, f))
                  for root, _, files in os.walk(data_dir) for f in files) / 2**20
    runs = []
    for _ in range(args.rounds):
        process, port, metrics_port, lines, to_listening = start_ledgerd(args.build, "sync",
                                                                         data_dir)
        try:
            recovered = re.search(r"recovered (\d+) accounts", "".join(lines))
            metrics = scrape(metrics_port)
            run = {
                "accounts": int(recovered.group(1)) if recovered else -1,
                "recovery_seconds": metric_sum(metrics, "ledger_recovery_seconds"),
                "start_to_listening_seconds": to_listening,
                "rss_mb_after_start": rss_mb(process.pid),
            }
            # Some load on the recovered accounts' shards (new ids; the memtables fill too).
            loadtest(args.build, port, 64, args, True)
            run["rss_mb_after_load"] = rss_mb(process.pid)
            runs.append(run)
            print(f"start-up: {run}", file=sys.stderr)
        finally:
            stop(process)
    shutil.rmtree(data_dir, ignore_errors=True)
    print(f"\n| Accounts | recovery s (median) | start to listening s | RSS after start MB |"
          f" RSS after {args.duration} s of load MB | data dir MB |")
    print("|---|---|---|---|---|---|")
    print(f"| {runs[0]['accounts']} | {median([r['recovery_seconds'] for r in runs]):.2f} | "
          f"{median([r['start_to_listening_seconds'] for r in runs]):.2f} | "
          f"{median([r['rss_mb_after_start'] for r in runs]):.0f} | "
          f"{median([r['rss_mb_after_load'] for r in runs]):.0f} | {disk_mb:.0f} |")
    return {"runs": runs, "data_dir_mb": disk_mb}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build/release", help="CMake build directory")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (medians are reported)")
    parser.add_argument("--duration", type=int, default=5, help="seconds measured per run")
    parser.add_argument("--warmup", type=int, default=1, help="seconds of warm-up per run")
    parser.add_argument("--clients", default="16,64,256",
                        help="concurrencies (ledger-loadtest calls in flight, pgbench clients)")
    parser.add_argument("--million_accounts", type=int, default=1_000_000,
                        help="accounts for the start-up and memory part (0 skips it)")
    parser.add_argument("--skip_postgres", action="store_true", help="no PostgreSQL baseline")
    parser.add_argument("--json", help="also write every figure to this file")
    args = parser.parse_args()
    args.clients = [int(c) for c in args.clients.split(",")]
    print(f"machine: {os.cpu_count()} cores; load average {os.getloadavg()}", file=sys.stderr)
    scratch = tempfile.mkdtemp(prefix="ledgerd-bench-", dir=os.getcwd())
    try:
        results = {"throughput": throughput(args, scratch)}
        if args.million_accounts > 0:
            results["startup"] = startup(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)


if __name__ == "__main__":
    main()
