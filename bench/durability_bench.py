#!/usr/bin/env python3
"""Durable Deposit benchmark: issue 13's goal table, measured side by side.

Part 1, throughput. Every round runs, at every client count (--clients, default 16,64,256), one
after another and in an order that rotates from round to round (so that the shared machine's
noise hits all of them alike):
  - the answer-at-once gRPC server (bench/ledger-reference-server --mode=instant: the ceiling),
  - ledgerd with each --durability mode of --modes (default sync,none,async), each on a fresh
    data directory,
  - PostgreSQL 15 (bench/postgres_bench.py's throwaway cluster, fsync=on, synchronous_commit=on,
    pgbench running UPDATE accounts SET balance = balance + :amount ... RETURNING balance), with
    the same client count.
The gRPC servers are all driven by the same client, ledger-loadtest: closed loop, that many calls
in flight, Deposits only, each with a unique request_id, over 10,000 accounts, 4 HTTP/2
connections. PostgreSQL also runs at the client counts of --postgres_clients (at the end of each
round), so that it is compared at its own best client count too.

For sync and async, ledgerd's /metrics are scraped when the load client enters its measured phase
and shortly before it ends: calls per journal write (per fsync, for sync) and writes per second
come from the process-wide histogram ledger_journal_group_calls (one observation per write, the
calls it made durable), or, on a ledgerd without it, from the per-shard ledger_batch_size (the old
commit path: one write per shard batch). The report says which.

The table, the goals with PASS/MISS and the notes are printed by bench/durability_report.py.

Part 2, start-up and memory: ledger-populate writes a data directory of --million_accounts
accounts; ledgerd starts on it (recovery time from its log and ledger_recovery_seconds, resident
memory from /proc) --rounds times. Goals (issue 6): recovery under 5 s, RSS under 250 MB.

Server, load client and PostgreSQL share this machine. Prints Markdown; --json writes every run.

Usage: bench/durability_bench.py [--build build/release] [--rounds 3] [--duration 4] [--warmup 1]
       [--clients 16,64,256] [--modes sync,none,async] [--postgres_clients 16,32,64,128,256]
       [--skip_postgres] [--million_accounts 1000000] [--json results.json]
"""
import argparse
import contextlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import durability_report
import postgres_bench
from e2e_bench import start, stop
from bench_util import (MODES, comma_modes, ledgerd_scratch, log, raise_keyboard_interrupt,
                        read_loadtest_report, rotated, wait_for_ports)

HERE = os.path.dirname(os.path.abspath(__file__))
ACCOUNTS = 10_000
# How long a load-client run may take beyond its warm-up and measurement: verification reads
# every account, and ambiguous calls are retried for up to 60 s (--resolve_for).
LOADTEST_SLACK_SECONDS = 180


# ---------------------------------------------------------------------------------------------
# Servers


def start_ledgerd(build, durability, data_dir, extra=()):
    """Starts ledgerd; returns (process, grpc port, metrics port, its first lines, seconds from
    exec to listening)."""
    command = [f"{build}/server/ledgerd", "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
               f"--durability={durability}", f"--data_dir={data_dir}", *extra]
    if durability != "none" and not os.path.exists(data_dir):
        subprocess.run([f"{build}/server/ledgerd", "init", f"--data_dir={data_dir}"], check=True,
                       stdout=subprocess.DEVNULL)
    # Its output goes to a file: all it wrote before its ports file is there once the file is.
    scratch = ledgerd_scratch()
    ports_file = os.path.join(scratch, "ports.json")
    with open(os.path.join(scratch, "ledgerd.log"), "w+") as output:
        started = time.monotonic()
        process = subprocess.Popen(command + [f"--ports_file={ports_file}"], stdout=output,
                                   stderr=subprocess.STDOUT, text=True)
        try:
            port, metrics_port = wait_for_ports(process, ports_file, seconds_max=120)
        except RuntimeError as error:
            process.kill()
            output.seek(0)
            raise RuntimeError(f"ledgerd did not start ({error}): {output.read()}") from None
        to_listening = time.monotonic() - started
        output.seek(0)
        return process, port, metrics_port, output.readlines(), to_listening


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


def has_metric(text, name):
    return any(line.startswith(name + "{") or line.startswith(name + " ")
               for line in text.splitlines())


def journal_figures(first, last):
    """Journal writes between two (monotonic time, /metrics text) scrapes."""
    (t0, before), (t1, after) = first, last
    seconds = t1 - t0

    def delta(name):
        return metric_sum(after, name) - metric_sum(before, name)

    # The process-wide histogram of the pipelined commit path; the per-shard batch sizes of the
    # old path, where every shard batch was one journal write, when it is absent.
    source = ("ledger_journal_group_calls"
              if has_metric(after, "ledger_journal_group_calls_count") else "ledger_batch_size")
    calls, writes = delta(source + "_sum"), delta(source + "_count")
    write_seconds = delta("ledger_journal_write_seconds_sum")
    timed_writes = delta("ledger_journal_write_seconds_count")
    nan = float("nan")
    return {
        "source": source,
        "window_s": round(seconds, 3),
        "calls": calls,
        "writes": writes,
        "calls_per_write": calls / writes if writes else nan,
        "writes_per_second": writes / seconds if seconds > 0 else nan,
        "mean_write_ms": 1000 * write_seconds / timed_writes if timed_writes else nan,
    }


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


# ---------------------------------------------------------------------------------------------
# The load client


def watch_progress(stream, measuring, lines):
    """Reads ledger-loadtest's stderr into `lines`; sets `measuring` at the first progress line
    of its measured phase (printed on the whole second at which a whole-second warm-up ends)."""
    for line in stream:
        lines.append(line)
        if re.search(r"\]\s+measure", line):
            measuring.set()


def metrics_window(metrics_port, measuring, args):
    """Scrapes ledgerd's /metrics once the measured phase opens and again shortly before it
    closes; returns the journal figures between the two, or None."""
    if not measuring.wait(timeout=args.warmup + 60):
        return None
    first = (time.monotonic(), scrape(metrics_port))
    # The phase opened at most ~0.1 s before the progress line; stay inside it.
    time.sleep(max(0.5, args.duration - 0.5))
    return journal_figures(first, (time.monotonic(), scrape(metrics_port)))


def loadtest(build, port, clients, args, resolve, verify=True, metrics_port=None):
    """One closed-loop ledger-loadtest run of Deposits; returns its JSON report, with the journal
    figures of the measured window under "journal" when metrics_port is given."""
    with tempfile.TemporaryDirectory() as scratch:
        report_path = os.path.join(scratch, "report.json")
        output_path = os.path.join(scratch, "output.txt")
        command = [f"{build}/client/ledger-loadtest", f"--target=127.0.0.1:{port}",
                   f"--json_file={report_path}", "--mix=deposit=100", f"--accounts={ACCOUNTS}",
                   "--channels=4", f"--concurrency={clients}", f"--duration={args.duration}s",
                   f"--warmup={args.warmup}s", f"--resolve_for={'60s' if resolve else '0'}",
                   f"--verify={'true' if verify else 'false'}", "--progress"]
        with open(output_path, "w") as output:
            process = subprocess.Popen(command, stdout=output, stderr=subprocess.PIPE, text=True)
            measuring, stderr_lines = threading.Event(), []
            watcher = threading.Thread(target=watch_progress,
                                       args=(process.stderr, measuring, stderr_lines), daemon=True)
            watcher.start()
            try:
                journal = (metrics_window(metrics_port, measuring, args)
                           if metrics_port is not None else None)
                process.wait(timeout=args.warmup + args.duration + LOADTEST_SLACK_SECONDS)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
            watcher.join(timeout=10)
        with open(output_path) as output:
            text = output.read() + "".join(stderr_lines[-20:])
        if not os.path.exists(report_path):
            raise RuntimeError(f"ledger-loadtest exited with {process.returncode} and no "
                               f"report:\n{text}")
        report = read_loadtest_report(report_path)
    report["exit_code"] = process.returncode
    report["journal"] = journal
    if process.returncode != 0:
        log(text)
    return report


def client_record(report):
    latency = report["latency_us"]["ok"]
    return {
        "ok_per_second": report["ok_per_second"],
        "p50_ms": latency["p50"] / 1000,
        "p99_ms": latency["p99"] / 1000,
        "verification": report["verification"],
        "codes": report["codes"],
        "exit_code": report["exit_code"],
        "journal": report["journal"],
    }


# ---------------------------------------------------------------------------------------------
# One run of one system at one client count


def reference_run(args, clients):
    process, port = start([f"{args.build}/bench/ledger-reference-server", "--mode=instant",
                           "--listen=127.0.0.1:0"], r"listening on port (\d+)")
    try:
        # It keeps no state: nothing to verify, and it does not deduplicate request_ids.
        return client_record(loadtest(args.build, port, clients, args, resolve=False,
                                      verify=False))
    finally:
        stop(process)


def ledgerd_run(args, durability, clients, scratch):
    data_dir = os.path.join(scratch, f"data-{durability}")
    shutil.rmtree(data_dir, ignore_errors=True)
    process, port, metrics_port, _, _ = start_ledgerd(args.build, durability, data_dir)
    durable = durability != "none"
    try:
        # Only a durable ledgerd deduplicates request_ids, so only there are ambiguous calls
        # retried to make verification exact.
        return client_record(loadtest(args.build, port, clients, args, resolve=durable,
                                      metrics_port=metrics_port if durable else None))
    finally:
        stop(process)
        shutil.rmtree(data_dir, ignore_errors=True)


class Postgres:
    """The PostgreSQL baseline: one throwaway cluster (bench/postgres_bench.py) for the whole
    benchmark, so that its runs can sit between ledgerd's."""

    def __init__(self, cluster, script, settings, connect_s):
        self.cluster, self.script, self.settings, self.connect_s = cluster, script, settings, \
            connect_s

    def run(self, args, clients, label):
        result = postgres_bench.run_pgbench(self.cluster, self.script, clients, args,
                                            self.connect_s[clients], label)
        self.connect_s[clients] = max(self.connect_s[clients], result["connect_s"])
        if result["window_s"] < 0.9 * args.duration:
            log(f"    warning: PostgreSQL measured {result['window_s']} s, not {args.duration} s")
        return {"ok_per_second": result["tps"], "p50_ms": result["p50_ms"],
                "p99_ms": result["p99_ms"], "failed": result["failed"], "pgbench": result}


@contextlib.contextmanager
def postgres_baseline(args):
    """Yields a Postgres, or None with --skip_postgres."""
    if args.skip_postgres:
        yield None
        return
    clients = args.postgres_clients
    with postgres_bench.Cluster(args.pg_bin, args.os_user,
                                postgres_bench.settings_for(clients)) as cluster:
        cluster.init_and_start()
        log(f"PostgreSQL listening on 127.0.0.1:{cluster.port}, cluster in {cluster.dir}")
        postgres_bench.load_accounts(cluster, ACCOUNTS)
        script = postgres_bench.write_scripts(cluster, ACCOUNTS, 0)["deposit"]
        settings = postgres_bench.server_settings(cluster)
        connect_s = {c: postgres_bench.measure_connect_time(cluster, script, c) for c in clients}
        yield Postgres(cluster, script, settings, connect_s)


# ---------------------------------------------------------------------------------------------
# Part 1: rounds


def describe(record):
    text = f"{record['ok_per_second']:,.0f}/s p99 {record['p99_ms']:.2f} ms"
    journal = record.get("journal")
    if journal:
        text += (f", {journal['calls_per_write']:.1f} calls/write, "
                 f"{journal['writes_per_second']:,.0f} writes/s")
    if record.get("verification"):
        text += f", verification {record['verification']}"
    return text


def run_one(args, system, clients, round_index, scratch, baseline):
    started = time.monotonic()
    if system == "reference":
        record = reference_run(args, clients)
    elif system == "postgres":
        record = baseline.run(args, clients, f"c{clients}_r{round_index + 1}")
    else:
        record = ledgerd_run(args, system, clients, scratch)
    record.update(round=round_index, system=system, clients=clients,
                  wall_s=round(time.monotonic() - started, 1))
    log(f"round {round_index + 1} c={clients} {system}: {describe(record)}")
    return record


def throughput(args, scratch, baseline):
    systems = ["reference", *args.modes] + (["postgres"] if baseline else [])
    # PostgreSQL's extra client counts, for its own best figure.
    sweep = [c for c in args.postgres_clients if c not in args.clients] if baseline else []
    records = []
    for round_index in range(args.rounds):
        for clients in args.clients:
            for system in rotated(systems, round_index):
                records.append(run_one(args, system, clients, round_index, scratch, baseline))
        for clients in rotated(sweep, round_index):
            records.append(run_one(args, "postgres", clients, round_index, scratch, baseline))
    return records


# ---------------------------------------------------------------------------------------------
# Part 2: start-up and memory


def startup(args, scratch):
    data_dir = os.path.join(scratch, "million")
    shutil.rmtree(data_dir, ignore_errors=True)
    populate = subprocess.run([f"{args.build}/bench/ledger-populate", f"--data_dir={data_dir}",
                               f"--accounts={args.million_accounts}"],
                              check=True, stdout=subprocess.PIPE, text=True)
    log(populate.stdout.strip())
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
            loadtest(args.build, port, 64, args, resolve=True)
            run["rss_mb_after_load"] = rss_mb(process.pid)
            runs.append(run)
            log(f"start-up: {run}")
        finally:
            stop(process)
    shutil.rmtree(data_dir, ignore_errors=True)
    median = durability_report.median
    print(f"\n| Accounts | recovery s (median) | start to listening s | RSS after start MB |"
          f" RSS after {args.duration} s of load MB | data dir MB |")
    print("|---|---|---|---|---|---|")
    print(f"| {runs[0]['accounts']} | {median([r['recovery_seconds'] for r in runs]):.2f} | "
          f"{median([r['start_to_listening_seconds'] for r in runs]):.2f} | "
          f"{median([r['rss_mb_after_start'] for r in runs]):.0f} | "
          f"{median([r['rss_mb_after_load'] for r in runs]):.0f} | {disk_mb:.0f} |")
    return {"runs": runs, "data_dir_mb": disk_mb}


# ---------------------------------------------------------------------------------------------
# Command line and header


def comma_ints(text):
    values = [int(part) for part in text.split(",") if part.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build/release", help="CMake build directory")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (medians are reported)")
    parser.add_argument("--duration", type=int, default=4, help="seconds measured per run")
    parser.add_argument("--warmup", type=int, default=1,
                        help="seconds of warm-up per run (at least 1: the metrics window opens "
                             "at the load client's first progress line after it)")
    parser.add_argument("--clients", type=comma_ints, default=[16, 64, 256],
                        help="calls in flight (ledger-loadtest --concurrency; pgbench clients)")
    parser.add_argument("--modes", type=comma_modes, default=list(MODES),
                        help="ledgerd --durability modes to run; default sync,none,async")
    parser.add_argument("--postgres_clients", type=comma_ints, default=[16, 32, 64, 128, 256],
                        help="PostgreSQL also runs at these client counts, to find its own best "
                             "(it always runs at --clients too)")
    parser.add_argument("--skip_postgres", action="store_true", help="no PostgreSQL baseline")
    parser.add_argument("--pg_bin", default=postgres_bench.DEFAULT_PG_BIN,
                        help="directory of PostgreSQL's binaries (bench/postgres_bench.py)")
    parser.add_argument("--os_user", default="postgres",
                        help="OS user that runs PostgreSQL when this script runs as root")
    parser.add_argument("--million_accounts", type=int, default=1_000_000,
                        help="accounts for the start-up and memory part (0 skips it)")
    parser.add_argument("--json", help="also write every figure to this file")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.duration < 1 or args.warmup < 1:
        parser.error("--rounds, --duration and --warmup must be at least 1")
    args.postgres_clients = sorted(set(args.postgres_clients) | set(args.clients))
    return args


def git_revision():
    try:
        return subprocess.run(["git", "-C", HERE, "describe", "--always", "--dirty"], check=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def header(args, argv):
    machine = {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": postgres_bench.cpu_model(),
        "kernel": platform.release(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "git": git_revision(),
    }
    command = " ".join(shlex.quote(a) for a in [sys.executable, sys.argv[0], *argv])
    print(f"command: `{command}`")
    print(f"machine: nproc {machine['nproc']}, {machine['cpu_model']}, kernel {machine['kernel']}"
          f"; load average at start {' '.join(map(str, machine['load_average_at_start']))}; "
          f"{machine['started_utc']} UTC; source {machine['git']}")
    print(f"{args.rounds} round(s) of {args.duration} s measured after {args.warmup} s of "
          f"warm-up; ledger-loadtest closed loop, Deposits with unique request_ids over "
          f"{ACCOUNTS:,} accounts, 4 connections; ledgerd modes {','.join(args.modes)}; "
          + ("PostgreSQL skipped" if args.skip_postgres else
             f"PostgreSQL clients {','.join(map(str, args.postgres_clients))}"))
    print(flush=True)
    return command, machine


def main(argv):
    args = parse_args(argv)
    if not args.skip_postgres:
        try:
            postgres_bench.check_binaries(args.pg_bin)  # Before anything runs.
        except SystemExit as missing:
            sys.exit(f"{missing}\nOr leave PostgreSQL out: --skip_postgres.")
    # SIGTERM and SIGHUP unwind like Ctrl-C, so servers and the cluster are stopped.
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
    signal.signal(signal.SIGHUP, raise_keyboard_interrupt)
    started = time.monotonic()
    command, machine = header(args, argv)
    scratch = tempfile.mkdtemp(prefix="ledgerd-bench-", dir=os.getcwd())
    results = {"command": command, "machine": machine,
               "settings": {"rounds": args.rounds, "duration_s": args.duration,
                            "warmup_s": args.warmup, "clients": args.clients,
                            "modes": args.modes, "accounts": ACCOUNTS,
                            "postgres_clients": [] if args.skip_postgres else
                            args.postgres_clients}}
    try:
        with postgres_baseline(args) as baseline:
            if baseline:
                results["postgres_settings"] = baseline.settings
            results["records"] = throughput(args, scratch, baseline)
        results["goals"] = durability_report.print_report(results)
        if args.million_accounts > 0:
            results["startup"] = startup(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results["wall_s"] = round(time.monotonic() - started, 1)
    print(f"\nthe whole benchmark took {results['wall_s'] / 60:.1f} min")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except KeyboardInterrupt:
        sys.exit("interrupted; servers and the PostgreSQL cluster were stopped")
