#!/usr/bin/env python3
"""What watchers cost the ledger (issue 33, docs/benchmarks.md "Watch"): durable unary Deposits
(--durability=sync, ledger-loadtest closed loop, 64 in flight over 10,000 accounts) with 0 and
with --watchers watchers of the whole stream (`ledgerctl watch > /dev/null`), alternated, a fresh
data directory each run; ledgerd on --server_cpu, the load test and the watchers on --client_cpu.
Per run: Deposits/s, ledgerd's CPU per Deposit, the CPU of its watch feed thread
(`ledger-watch`), and the watchers' lag (ledger_watch_lag_positions, sampled every 0.2 s: its
largest, and what is left 2 s after the load ends). Prints the medians and the throughput ratio
with/without watchers per round.

With --slow, the watchers are slow ones instead (bench/slow_watcher.py: each reads one message a
second, through HTTP/2 flow control) and every run's ledgerd keeps 1 GiB of log for watchers
(--watch_retention), so that the slow watchers stay attached: they fall behind the feed's shared
tail within seconds and from then on are served by reading the log themselves. Their figures are
the messages they consumed and how their streams ended (still open is what is expected).

Usage: python3 bench/watch_bench.py --build build/release [--rounds 4] [--watchers 4] [--slow]"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request

from bench_util import cpu_seconds, read_loadtest_report, start_ledgerd
from applier_compare import thread_cpu_seconds

WARMUP_SECONDS = 2
# Debian's python3-h2, which slow_watcher.py needs, is installed for the system's Python.
SYSTEM_PYTHON = "/usr/bin/python3"
SLOW_WATCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "slow_watcher.py")


def scrape(metrics_port, name):
    """The value of metric `name` (no labels) at ledgerd's /metrics, or None."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2) as page:
            for line in page.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
    except OSError:
        return None
    return None


def stop_watchers(clients):
    """Interrupts the watchers; returns what each printed last (slow watchers print a JSON line:
    messages consumed, last position, how the stream ended), or {} when nothing."""
    for client in clients:
        if client.poll() is None:
            client.send_signal(signal.SIGINT)
    said = []
    for client in clients:
        try:
            output = client.communicate(timeout=10)[0] if client.stdout else ""
        except (subprocess.TimeoutExpired, ValueError):
            client.kill()
            output = ""
        lines = (output or "").strip().splitlines()
        said.append(json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {})
    clients.clear()
    return said


def run(args, watchers):
    """Figures of one run with `watchers` watchers."""
    root = tempfile.mkdtemp(prefix="watch-bench-", dir=args.scratch)
    process = None
    clients = []
    try:
        process, port, metrics_port = start_ledgerd(
            args.build, "sync", os.path.join(root, "data"), 4, cpus=args.server_cpu,
            extra_flags=["--watch_retention=1GiB"] if args.slow else [])
        for _ in range(watchers):
            if args.slow:
                command = [SYSTEM_PYTHON, SLOW_WATCHER, f"--target=127.0.0.1:{port}"]
            else:
                command = [os.path.join(args.build, "client", "ledgerctl"),
                           f"--target=127.0.0.1:{port}", "watch"]
            clients.append(subprocess.Popen(
                ["taskset", "-c", args.client_cpu] + command,
                stdout=subprocess.PIPE if args.slow else subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, text=True))
        report_path = os.path.join(root, "report.json")
        loadtest = subprocess.Popen(
            ["taskset", "-c", args.client_cpu,
             os.path.join(args.build, "client", "ledger-loadtest"), f"--target=127.0.0.1:{port}",
             "--accounts=10000", "--mix=deposit=1", "--concurrency=64",
             f"--duration={args.seconds}s", f"--warmup={WARMUP_SECONDS}s",
             f"--json_file={report_path}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        lags = []
        sampling = threading.Event()

        def sample():
            while not sampling.is_set():
                lag = scrape(metrics_port, "ledger_watch_lag_positions")
                if lag is not None:
                    lags.append(lag)
                time.sleep(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        time.sleep(WARMUP_SECONDS)
        feed, whole = thread_cpu_seconds(process.pid, "ledger-watch"), cpu_seconds(process.pid)
        watcher_cpu = sum(cpu_seconds(c.pid) or 0 for c in clients)
        time.sleep(args.seconds)
        feed = thread_cpu_seconds(process.pid, "ledger-watch") - feed
        whole = cpu_seconds(process.pid) - whole
        watcher_cpu = sum(cpu_seconds(c.pid) or 0 for c in clients) - watcher_cpu
        loadtest.wait()
        time.sleep(2)
        left = scrape(metrics_port, "ledger_watch_lag_positions")
        positions = scrape(metrics_port, "ledger_log_position")
        sampling.set()
        sampler.join()
        report = read_loadtest_report(report_path)
        if report["verification"] != "PASS":
            raise RuntimeError(f"verification {report['verification']}")
        deposits = report["ops_per_second"] * args.seconds
        slow = stop_watchers(clients) if args.slow else []
        return {"slow": slow,"ops": report["ops_per_second"], "us_per_op": whole / deposits * 1e6,
                "feed_us_per_op": feed / deposits * 1e6,
                "watcher_cpu_pct": watcher_cpu / args.seconds * 100,
                "max_lag": max(lags) if lags and watchers else 0, "lag_left": left or 0,
                "positions": positions or 0}
    finally:
        stop_watchers(clients)
        if process is not None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build/release")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--watchers", type=int, default=4)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--server_cpu", default="0")
    parser.add_argument("--client_cpu", default="1")
    parser.add_argument("--slow", action="store_true",
                        help="slow watchers (one message a second) instead of ledgerctl watch")
    parser.add_argument("--scratch", default=None, help="where the data directories go")
    args = parser.parse_args()
    kind = "slow watchers" if args.slow else "watchers"
    results = {0: [], 1: [], args.watchers: []}
    ratios = []
    for round_number in range(args.rounds):
        # Alternated, so that a noisy minute hits both sides.
        order = [0, args.watchers, 1] if round_number % 2 == 0 else [1, args.watchers, 0]
        figures = {}
        for watchers in order:
            figures[watchers] = run(args, watchers)
            results[watchers].append(figures[watchers])
            f = figures[watchers]
            print(f"round {round_number + 1} watchers={watchers}: {f['ops']:.0f} Deposits/s, "
                  f"ledgerd {f['us_per_op']:.1f} us/Deposit (watch feed {f['feed_us_per_op']:.2f}), "
                  f"watchers' CPU {f['watcher_cpu_pct']:.0f}%, lag max {f['max_lag']:.0f} "
                  f"positions, left 2 s after the load {f['lag_left']:.0f} of "
                  f"{f['positions']:.0f}", flush=True)
            for number, slow in enumerate(f["slow"]):
                print(f"  slow watcher {number + 1}: {slow.get('messages')} messages, last position "
                      f"{slow.get('last_position')}, stream {slow.get('ended') or 'still open'}",
                      flush=True)
        ratios.append(figures[args.watchers]["ops"] / figures[0]["ops"])
        print(f"round {round_number + 1}: {args.watchers} {kind} / none = {ratios[-1]:.3f}",
              flush=True)
    print("medians:")
    for watchers, runs in results.items():
        print(f"  watchers={watchers}: {statistics.median(r['ops'] for r in runs):.0f} Deposits/s, "
              f"ledgerd {statistics.median(r['us_per_op'] for r in runs):.1f} us/Deposit, watch "
              f"feed {statistics.median(r['feed_us_per_op'] for r in runs):.2f} us/Deposit, "
              f"lag max {statistics.median(r['max_lag'] for r in runs):.0f}, left "
              f"{statistics.median(r['lag_left'] for r in runs):.0f}")
    print(f"  ratio {args.watchers} {kind} / none: {statistics.median(ratios):.3f} "
          f"(rounds: {', '.join(f'{r:.3f}' for r in ratios)})")


if __name__ == "__main__":
    main()
