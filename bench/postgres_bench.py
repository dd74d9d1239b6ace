#!/usr/bin/env python3
"""PostgreSQL baseline for ledgerd's durable Deposit and Withdraw: pgbench on a throwaway cluster.

What it measures: how many single-statement, individually committed balance updates per second a
stock PostgreSQL 15 sustains on this machine with full durability (fsync=on,
synchronous_commit=on, full_page_writes at its default), and the latency of each, at several
client counts. The statements do the same job as ledgerd's durable calls:

  deposit   UPDATE accounts SET balance = balance + :amount WHERE id = :id RETURNING balance;
  withdraw  UPDATE accounts SET balance = balance - :amount
            WHERE id = :id AND balance - :amount >= -overdraft_limit RETURNING balance;
  mix       both scripts, chosen at random with equal weight per transaction

with a uniformly random account out of --accounts and a random amount of 1..1000. Every statement
is its own transaction (autocommit), so every call waits for its WAL record to reach the disk,
as a ledgerd call must wait for its journal sync before anyone hears OK.

Why: it is the baseline for ledgerd's durable throughput in docs/benchmarks.md. The goal is
ledgerd at least 3x PostgreSQL's calls/s at the same client count, measured side by side in one
session on the same machine.

How: the script creates a cluster in a fresh directory under /tmp (initdb), starts it on a free
127.0.0.1 port with its socket directory inside the temporary directory, loads the accounts,
runs pgbench (-M prepared, -n, one TCP connection per client, -j min(clients, cores)) for every
round x client count x workload, interleaving the cells within a round so that the machine's
noise hits all of them alike, then stops the server (pg_ctl stop -m fast) and removes the
directory, also on errors and Ctrl-C. pgbench and the server share this machine's cores, as
ledger-loadtest and ledgerd do in bench/e2e_bench.py.

What is counted: tps, p50 and p99 come from pgbench's per-transaction log (-l) over a
steady-state interval of --duration seconds that opens --warmup seconds after every client has
finished its first transaction. pgbench's own tps (also reported) covers the whole run: at 256
clients on 2 cores, connecting takes seconds and counts against -T, every new backend's first
query is slow, and at the end pgbench stalls a thread's remaining clients while it disconnects
the finished ones, so its figure there is well below the steady rate. The table ends with the
client count at which PostgreSQL did best: a baseline is only fair at its own best.

PostgreSQL refuses to run as root, so when started as root the script runs initdb, pg_ctl,
psql and pgbench as --os_user (default postgres) through runuser and gives it the directory.

Usage: bench/postgres_bench.py [--rounds 3] [--duration 10] [--warmup 1] [--clients 16,64,256]
                               [--workloads deposit,withdraw] [--json results.json]
Quick check: bench/postgres_bench.py --duration 2 --clients 16
"""
import argparse
import glob
import json
import math
import os
import platform
import pwd
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile

DEFAULT_PG_BIN = "/usr/lib/postgresql/15/bin"
REQUIRED_BINARIES = ("initdb", "pg_ctl", "postgres", "psql", "pgbench")
WORKLOADS = ("deposit", "withdraw", "mix")
DATABASE = "ledger_bench"
INITIAL_BALANCE = 1_000_000_000

# Written to postgresql.auto.conf; each is read back with SHOW once the server runs.
# max_connections grows past 300 if --clients asks for more.
SERVER_SETTINGS = {
    "fsync": "on",
    "synchronous_commit": "on",
    "max_connections": "300",
    "shared_buffers": "256MB",
}
# Left at their defaults, but printed because they decide what a commit costs.
REPORTED_DEFAULTS = ("full_page_writes", "wal_sync_method", "wal_level", "commit_delay",
                     "wal_buffers", "max_wal_size", "checkpoint_timeout", "server_version")


def log(message):
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Command line


def comma_ints(text):
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list of integers, got {text!r}")
    if not values or any(value < 1 for value in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def comma_workloads(text):
    values = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [value for value in values if value not in WORKLOADS]
    if not values or unknown:
        raise argparse.ArgumentTypeError(
            f"workloads must be a comma-separated list of {', '.join(WORKLOADS)}; got {text!r}")
    return values


def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def non_negative_int(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="PostgreSQL 15 + pgbench baseline for ledgerd's durable Deposit/Withdraw "
                    "(fsync=on, synchronous_commit=on), on a throwaway cluster.")
    parser.add_argument("--clients", type=comma_ints, default=[16, 64, 256],
                        help="comma-separated pgbench client counts (one connection each); "
                             "default 16,64,256")
    parser.add_argument("--workloads", type=comma_workloads, default=["deposit"],
                        help="comma-separated list of deposit, withdraw, mix (half of each); "
                             "default deposit")
    parser.add_argument("--duration", type=positive_int, default=10,
                        help="seconds measured per run, after the warm-up; pgbench's -T is "
                             "longer, to cover connecting and the warm-up; default 10")
    parser.add_argument("--warmup", type=non_negative_int, default=1,
                        help="seconds left out of the measurement once every client has "
                             "finished its first transaction; default 1")
    parser.add_argument("--rounds", type=positive_int, default=1,
                        help="runs per cell; cells are interleaved within a round and the "
                             "median over rounds is reported; default 1")
    parser.add_argument("--accounts", type=positive_int, default=10_000,
                        help="accounts loaded and chosen uniformly; default 10000")
    parser.add_argument("--overdraft_limit", type=non_negative_int, default=0,
                        help="a withdrawal may take a balance down to -LIMIT, as ledgerd's flag "
                             "of the same name; default 0")
    parser.add_argument("--json", metavar="PATH",
                        help="also write settings, machine info and per-cell results as JSON here")
    parser.add_argument("--pg_bin", default=DEFAULT_PG_BIN,
                        help=f"directory with initdb, pg_ctl, postgres, psql and pgbench; "
                             f"default {DEFAULT_PG_BIN}")
    parser.add_argument("--os_user", default="postgres",
                        help="OS user that runs PostgreSQL when this script runs as root "
                             "(PostgreSQL refuses root); default postgres")
    return parser.parse_args(argv)


# ---------------------------------------------------------------------------------------------
# Environment checks and machine information


def check_binaries(pg_bin):
    missing = [name for name in REQUIRED_BINARIES
               if not os.access(os.path.join(pg_bin, name), os.X_OK)]
    if missing:
        sys.exit(f"error: {', '.join(missing)} not found in {pg_bin}. Install PostgreSQL 15 "
                 f"(Debian 12: apt-get install postgresql), or point --pg_bin at the directory "
                 f"holding its binaries (pg_config --bindir).")


def user_prefix(os_user):
    """The command prefix that runs a PostgreSQL tool as os_user, or nothing if not root."""
    if os.geteuid() != 0:
        return [], None
    try:
        entry = pwd.getpwnam(os_user)
    except KeyError:
        sys.exit(f"error: running as root, but OS user {os_user!r} does not exist; PostgreSQL "
                 f"refuses to run as root. The Debian package postgresql creates the user "
                 f"'postgres'; or pass --os_user.")
    runuser = shutil.which("runuser")
    if not runuser:
        sys.exit("error: running as root and runuser (util-linux) is not on PATH; it is needed "
                 "to run PostgreSQL as a non-root user.")
    return [runuser, "-u", os_user, "--"], entry


def cpu_model():
    try:
        with open("/proc/cpuinfo") as file:
            for line in file:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info():
    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "load_average_at_start": list(os.getloadavg()),
    }


def run_terminating_on_error(command, cwd, timeout):
    """subprocess.run, except that on a timeout or Ctrl-C the child gets SIGTERM, not SIGKILL:
    runuser passes SIGTERM on to the tool it runs, but a killed runuser would orphan it."""
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except BaseException:
        process.terminate()
        try:
            process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
        raise
    return subprocess.CompletedProcess(command, process.returncode, output)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# The throwaway cluster


class Cluster:
    """A PostgreSQL cluster in its own temporary directory; use as a context manager."""

    def __init__(self, pg_bin, os_user, settings):
        self.pg_bin = pg_bin
        self.settings = settings
        self.prefix, self.owner = user_prefix(os_user)
        self.dir = None
        self.port = None
        self.started = False

    @property
    def data_dir(self):
        return os.path.join(self.dir, "data")

    @property
    def socket_dir(self):
        return os.path.join(self.dir, "sock")

    def path(self, name):
        return os.path.join(self.dir, name)

    def run(self, tool, args, timeout=120, check=True):
        """Runs a PostgreSQL tool as the cluster's user; returns its combined output."""
        command = self.prefix + [os.path.join(self.pg_bin, tool)] + args
        result = run_terminating_on_error(command, cwd=self.dir, timeout=timeout)
        if check and result.returncode != 0:
            raise RuntimeError(f"{tool} exited with {result.returncode}:\n{result.stdout}")
        return result

    def write(self, name, text):
        """Writes a file in the cluster's directory, owned by the cluster's user."""
        path = self.path(name)
        with open(path, "w") as file:
            file.write(text)
        if self.owner:
            os.chown(path, self.owner.pw_uid, self.owner.pw_gid)
        return path

    def __enter__(self):
        self.dir = tempfile.mkdtemp(prefix="postgres_bench_", dir="/tmp")  # mode 0700
        if self.owner:
            os.chown(self.dir, self.owner.pw_uid, self.owner.pw_gid)
        return self

    def __exit__(self, *exc_info):
        # A second Ctrl-C must not cut the clean-up short.
        previous = {sig: signal.signal(sig, signal.SIG_IGN)
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            if self.started:
                self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
            if os.path.exists(self.dir):
                log(f"warning: could not remove {self.dir}")
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return False

    def init_and_start(self):
        self.run("initdb", ["-D", self.data_dir, "-U", "postgres", "--auth=trust",
                            "--encoding=UTF8", "--locale=C"])
        os.mkdir(self.socket_dir)
        if self.owner:
            os.chown(self.socket_dir, self.owner.pw_uid, self.owner.pw_gid)
        for attempt in range(3):
            self.port = free_port()
            self.configure()
            result = self.run("pg_ctl", ["start", "-w", "-t", "60", "-D", self.data_dir,
                                         "-l", self.path("server.log")], check=False)
            if result.returncode == 0:
                self.started = True
                return
            log(f"pg_ctl start failed on port {self.port} (attempt {attempt + 1}):\n"
                f"{result.stdout}{self.server_log_tail()}")
        raise RuntimeError("PostgreSQL did not start; see the messages above")

    def configure(self):
        settings = dict(self.settings,
                        listen_addresses="'127.0.0.1'",
                        port=str(self.port),
                        unix_socket_directories=f"'{self.socket_dir}'")
        lines = [f"{name} = {value}" for name, value in settings.items()]
        # postgresql.auto.conf is read last, so these win over anything initdb wrote.
        self.write(os.path.join("data", "postgresql.auto.conf"),
                   "# written by bench/postgres_bench.py\n" + "\n".join(lines) + "\n")

    def server_log_tail(self, lines=20):
        try:
            with open(self.path("server.log")) as file:
                return "".join(file.readlines()[-lines:])
        except OSError:
            return ""

    def stop(self):
        result = self.run("pg_ctl", ["stop", "-m", "fast", "-w", "-t", "60", "-D", self.data_dir],
                          check=False)
        if result.returncode != 0:
            log(f"pg_ctl stop -m fast failed, trying -m immediate:\n{result.stdout}")
            self.run("pg_ctl", ["stop", "-m", "immediate", "-w", "-D", self.data_dir],
                     check=False)
        self.started = False

    def connection_args(self):
        """Host, port and user for psql and pgbench. The database goes last, as a positional
        argument: to pgbench, -d means --debug."""
        return ["-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres"]

    def sql(self, statement, database=DATABASE, timeout=600):
        """Runs SQL with psql and returns its unaligned, tuples-only output."""
        args = ["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", statement]
        result = self.run("psql", self.connection_args() + args + [database], timeout=timeout)
        return result.stdout.strip()


# ---------------------------------------------------------------------------------------------
# Schema, data and pgbench scripts


def id_width(accounts):
    return max(6, len(str(accounts)))


def account_id_sql(accounts):
    """SQL for the id 'acct-000042' of pgbench variable :aid (pgbench cannot format strings)."""
    return f"'acct-' || lpad(:aid::text, {id_width(accounts)}, '0')"


def load_accounts(cluster, accounts):
    cluster.sql(f"CREATE DATABASE {DATABASE}", database="postgres")
    cluster.sql("CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL)")
    cluster.sql(f"INSERT INTO accounts "
                f"SELECT 'acct-' || lpad(g::text, {id_width(accounts)}, '0'), {INITIAL_BALANCE} "
                f"FROM generate_series(1, {accounts}) AS g")
    cluster.sql("VACUUM ANALYZE accounts")
    return cluster.sql("SELECT min(id) || ' .. ' || max(id) || ', ' || count(*) FROM accounts")


def write_scripts(cluster, accounts, overdraft_limit):
    """Writes the two pgbench scripts; returns {workload: [pgbench -f arguments]}."""
    header = f"\\set aid random(1, {accounts})\n\\set amount random(1, 1000)\n"
    account = account_id_sql(accounts)
    deposit = cluster.write("deposit.sql", header +
                            f"UPDATE accounts SET balance = balance + :amount "
                            f"WHERE id = {account} RETURNING balance;\n")
    withdraw = cluster.write("withdraw.sql", header + f"\\set floor {-overdraft_limit}\n" +
                             f"UPDATE accounts SET balance = balance - :amount "
                             f"WHERE id = {account} AND balance - :amount >= :floor "
                             f"RETURNING balance;\n")
    return {
        "deposit": ["-f", deposit],
        "withdraw": ["-f", withdraw],
        "mix": ["-f", f"{deposit}@1", "-f", f"{withdraw}@1"],
    }


def settings_for(clients):
    """SERVER_SETTINGS, with room for the most clients plus a few for psql."""
    settings = dict(SERVER_SETTINGS)
    settings["max_connections"] = str(max(int(settings["max_connections"]), max(clients) + 10))
    return settings


def server_settings(cluster):
    names = list(cluster.settings) + list(REPORTED_DEFAULTS)
    return {name: cluster.sql(f"SHOW {name}") for name in names}


# ---------------------------------------------------------------------------------------------
# One pgbench run


def percentile(sorted_values, fraction):
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return float("nan")
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def read_transaction_log(log_prefix):
    """Reads and deletes pgbench's -l files (one per thread). A line is
    'client_id transaction_no latency_us script_no end_epoch_s end_us'; the latency is 'failed'
    or 'skipped' for a transaction that did not complete. Returns ([(client, end_s, latency_us)],
    number not completed)."""
    transactions, not_completed = [], 0
    for path in glob.glob(glob.escape(log_prefix) + ".*"):
        with open(path) as file:
            for line in file:
                fields = line.split()
                if len(fields) < 6:
                    continue
                if not fields[2].isdigit():
                    not_completed += 1
                    continue
                end = int(fields[4]) + int(fields[5]) / 1e6
                transactions.append((int(fields[0]), end, int(fields[2])))
        os.remove(path)
    return transactions, not_completed


def steady_window(transactions, warmup, duration):
    """The measured interval: it opens `warmup` seconds after every client has finished its
    first transaction (so connecting, each new backend's first query and the ramp-up stay out)
    and closes after `duration` seconds, or earlier when the first client stops (pgbench stalls
    the remaining clients of a thread while it disconnects the finished ones)."""
    first_end, last_end = {}, {}
    for client, end, _ in transactions:
        first_end[client] = min(end, first_end.get(client, end))
        last_end[client] = max(end, last_end.get(client, end))
    start = max(first_end.values()) + warmup
    return start, min(start + duration, min(last_end.values()))


def measure_window(transactions, warmup, duration):
    if not transactions:
        raise RuntimeError("pgbench logged no completed transactions")
    start, end = steady_window(transactions, warmup, duration)
    if end - start <= 0:
        raise RuntimeError("no steady-state interval in the pgbench log: the clients connected "
                           "too slowly for the time allowed")
    latencies = sorted(latency for _, finished, latency in transactions if start <= finished < end)
    return {
        "tps": round(len(latencies) / (end - start), 1),
        "p50_ms": round(percentile(latencies, 0.50) / 1000, 3),
        "p99_ms": round(percentile(latencies, 0.99) / 1000, 3),
        "window_s": round(end - start, 2),
        "transactions_in_window": len(latencies),
    }


def parse_pgbench_output(output):
    """pgbench's own summary: tps over the whole run without the initial connection time,
    transactions processed, failed, and the initial connection time in seconds."""
    tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", output)
    processed = re.search(r"number of transactions actually processed: (\d+)", output)
    failed = re.search(r"number of failed transactions: (\d+)", output)
    connect = re.search(r"initial connection time = ([\d.]+) ms", output)
    if not tps or not processed or not connect:
        raise RuntimeError(f"unexpected pgbench output:\n{output}")
    return {
        "pgbench_tps": round(float(tps.group(1)), 1),
        "transactions": int(processed.group(1)),
        "failed": int(failed.group(1)) if failed else 0,
        "connect_s": round(float(connect.group(1)) / 1000, 2),
    }


def pgbench(cluster, script_args, clients, extra, timeout):
    """Runs pgbench with the options every run shares; returns its parsed summary."""
    threads = min(clients, os.cpu_count() or 1)
    args = (cluster.connection_args() + script_args +
            ["-c", str(clients), "-j", str(threads), "-M", "prepared", "-n"] + extra + [DATABASE])
    result = cluster.run("pgbench", args, timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"pgbench exited with {result.returncode}:\n{result.stdout}"
                           f"{cluster.server_log_tail()}")
    return parse_pgbench_output(result.stdout)


def time_allowed(connect_s, warmup, duration):
    """pgbench's -T clock starts before the clients connect (at 256 clients on 2 cores that
    takes seconds), so -T must cover connecting, the warm-up and the measured interval."""
    return math.ceil(2 * connect_s + 2 + warmup + duration)


def run_pgbench(cluster, script_args, clients, args, connect_s, label):
    cluster.sql("CHECKPOINT")  # every run starts right after a checkpoint, alike
    log_prefix = cluster.path(f"log_{label}")
    seconds = time_allowed(connect_s, args.warmup, args.duration)
    summary = pgbench(cluster, script_args, clients,
                      ["-T", str(seconds), "-l", f"--log-prefix={log_prefix}"],
                      timeout=seconds + 120)
    transactions, not_completed = read_transaction_log(log_prefix)
    result = measure_window(transactions, args.warmup, args.duration)
    result.update(summary)
    result["pgbench_T_s"] = seconds
    result["failed"] += not_completed
    result["load_average"] = round(os.getloadavg()[0], 2)
    return result


def measure_connect_time(cluster, script_args, clients):
    """One transaction per client, to learn how long connecting takes at this client count."""
    return pgbench(cluster, script_args, clients, ["-t", "1"], timeout=300)["connect_s"]


# ---------------------------------------------------------------------------------------------
# The whole benchmark and its report


def run_benchmark(args, cluster, scripts):
    cells = {(workload, clients): [] for clients in args.clients for workload in args.workloads}
    connect_s = {clients: measure_connect_time(cluster, scripts[args.workloads[0]], clients)
                 for clients in args.clients}
    log("connecting took " + ", ".join(f"{seconds:.2f} s for {clients} clients"
                                       for clients, seconds in connect_s.items()))
    order = list(cells)
    total = len(order) * args.rounds
    done = 0
    for round_index in range(args.rounds):
        # Rotate the order every round so that no cell always runs first or last.
        shift = round_index % len(order)
        for workload, clients in order[shift:] + order[:shift]:
            done += 1
            log(f"[{done}/{total}] round {round_index + 1}: {workload}, {clients} clients")
            result = run_pgbench(cluster, scripts[workload], clients, args, connect_s[clients],
                                 f"{workload}_c{clients}_r{round_index + 1}")
            connect_s[clients] = max(connect_s[clients], result["connect_s"])
            log(f"    {result['tps']:,.0f} tps over {result['window_s']} s, "
                f"p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms "
                f"(pgbench: {result['pgbench_tps']:,.0f} tps, connecting "
                f"{result['connect_s']} s); load {result['load_average']}")
            if result["window_s"] < 0.9 * args.duration:
                log(f"    warning: measured {result['window_s']} s, not {args.duration} s")
            cells[(workload, clients)].append(result)
    return [summarize(workload, clients, rounds) for (workload, clients), rounds in cells.items()]


def summarize(workload, clients, rounds):
    tps = [r["tps"] for r in rounds]
    return {
        "workload": workload,
        "clients": clients,
        "rounds": rounds,
        "median_tps": round(statistics.median(tps), 1),
        "min_tps": min(tps),
        "max_tps": max(tps),
        "median_p50_ms": round(statistics.median(r["p50_ms"] for r in rounds), 3),
        "median_p99_ms": round(statistics.median(r["p99_ms"] for r in rounds), 3),
        "median_pgbench_tps": round(statistics.median(r["pgbench_tps"] for r in rounds), 1),
    }


def print_settings(settings, machine, accounts_loaded, args):
    print(f"Machine: {machine['cpu_model']}, {machine['cores']} cores, kernel {machine['kernel']}, "
          f"load average at start {machine['load_average_at_start'][0]:.2f}")
    print(f"PostgreSQL {settings['server_version']}; accounts {accounts_loaded}; "
          f"overdraft limit {args.overdraft_limit}; {args.rounds} round(s) of {args.duration} s "
          f"measured after {args.warmup} s of warm-up; pgbench -M prepared -n, "
          f"-j min(clients, {machine['cores']}), TCP 127.0.0.1")
    print("Settings: " + ", ".join(f"{name}={value}" for name, value in settings.items()
                                   if name != "server_version"))
    print()


def print_table(cells):
    print("| workload | clients | tps per round | p99 ms per round | median tps (min–max) "
          "| median p50 | median p99 | pgbench's tps, median |")
    print("|---|---|---|---|---|---|---|---|")
    for cell in cells:
        per_round_tps = ", ".join(f"{r['tps']:,.0f}" for r in cell["rounds"])
        per_round_p99 = ", ".join(f"{r['p99_ms']:.2f}" for r in cell["rounds"])
        print(f"| {cell['workload']} | {cell['clients']} | {per_round_tps} | {per_round_p99} "
              f"| **{cell['median_tps']:,.0f}** ({cell['min_tps']:,.0f}–{cell['max_tps']:,.0f}) "
              f"| {cell['median_p50_ms']:.2f} ms | {cell['median_p99_ms']:.2f} ms "
              f"| {cell['median_pgbench_tps']:,.0f} |")
    # A baseline is only fair at its own best client count, not just at ledgerd's.
    for workload in dict.fromkeys(cell["workload"] for cell in cells):
        tried = [cell for cell in cells if cell["workload"] == workload]
        best = max(tried, key=lambda cell: cell["median_tps"])
        print(f"\nbest {workload}: {best['median_tps']:,.0f} tps (median) at {best['clients']} "
              f"clients, of {', '.join(str(cell['clients']) for cell in tried)} tried")
    print("\ntps, p50 and p99: transactions that ended in the measured interval, from pgbench's "
          "per-transaction log.\npgbench's tps: its own figure over the whole run (ramp-up and "
          "disconnecting included, initial connection time excluded).")
    failed = sum(r["failed"] for cell in cells for r in cell["rounds"])
    if failed:
        print(f"\nwarning: {failed} transactions failed or were skipped (see the JSON)")


def write_json(path, args, settings, machine, cells):
    report = {
        "benchmark": "postgres_bench",
        "settings": {
            "server": settings,
            "accounts": args.accounts,
            "initial_balance": INITIAL_BALANCE,
            "overdraft_limit": args.overdraft_limit,
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "rounds": args.rounds,
            "clients": args.clients,
            "workloads": args.workloads,
            "pgbench": "-M prepared -n -l, -j min(clients, cores), TCP 127.0.0.1",
        },
        "machine": machine,
        "cells": cells,
    }
    with open(path, "w") as file:
        json.dump(report, file, indent=2)
        file.write("\n")


def raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv):
    args = parse_args(argv)
    check_binaries(args.pg_bin)
    machine = machine_info()
    # SIGTERM and SIGHUP unwind like Ctrl-C, so the cluster is stopped and removed.
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
    signal.signal(signal.SIGHUP, raise_keyboard_interrupt)
    with Cluster(args.pg_bin, args.os_user, settings_for(args.clients)) as cluster:
        log(f"cluster in {cluster.dir}")
        cluster.init_and_start()
        log(f"PostgreSQL listening on 127.0.0.1:{cluster.port}")
        accounts_loaded = load_accounts(cluster, args.accounts)
        scripts = write_scripts(cluster, args.accounts, args.overdraft_limit)
        settings = server_settings(cluster)
        print_settings(settings, machine, accounts_loaded, args)
        cells = run_benchmark(args, cluster, scripts)
    print_table(cells)
    if args.json:
        write_json(args.json, args, settings, machine, cells)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit("interrupted; the cluster was stopped and its directory removed")
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        sys.exit(f"error: {error}")
