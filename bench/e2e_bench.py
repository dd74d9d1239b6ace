#!/usr/bin/env python3
"""End-to-end Deposit benchmark: ledgerd against two reference servers, side by side.

Runs ledger-loadtest (closed loop, Deposits only) against each server at several concurrencies,
alternating servers within each round so that the machine's noise hits all of them alike, and
prints medians as a Markdown table. Then an overload run: ledgerd under an open-loop rate of
twice its measured capacity with Zipf-skewed accounts. Server and client share this machine.

Usage: bench/e2e_bench.py [--build build/release] [--rounds 3] [--duration 5] [--warmup 1]
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from bench_util import ledgerd_scratch, read_loadtest_report, wait_for_ports


def start(command, ready_pattern):
    """Starts a server on a free port and returns (process, port) once it listens: ledgerd
    (`ready_pattern` None) once its --ports_file names the port, a reference server once its
    start line matches."""
    if ready_pattern is None:
        ports_file = os.path.join(ledgerd_scratch(), "ports.json")
        process = subprocess.Popen(command + [f"--ports_file={ports_file}"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            return process, wait_for_ports(process, ports_file)[0]
        except RuntimeError:
            process.kill()
            raise
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 20
    while time.time() < deadline:
        line = process.stdout.readline()
        match = re.search(ready_pattern, line)
        if match:
            return process, int(match.group(1))
    process.kill()
    raise RuntimeError(f"{command[0]} did not start")


def stop(process):
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()


def loadtest(build, port, extra):
    with tempfile.NamedTemporaryFile(suffix=".json") as report:
        # None of these servers deduplicates request_ids, so ambiguous calls are not retried.
        command = [f"{build}/client/ledger-loadtest", f"--target=127.0.0.1:{port}",
                   f"--json_file={report.name}", "--resolve_for=0"] + extra
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        data = read_loadtest_report(report.name)
        data["exit_code"] = result.returncode
        return data


SERVERS = {
    "answer at once": (["bench/ledger-reference-server", "--mode=instant", "--listen=127.0.0.1:0"],
                       r"listening on port (\d+)", False),
    "mutex": (["bench/ledger-reference-server", "--mode=mutex", "--listen=127.0.0.1:0"],
              r"listening on port (\d+)", True),
    # In memory, like the reference servers: this compares the request path, not the disk
    # (bench/durability_bench.py measures durable calls).
    "ledgerd": (["server/ledgerd", "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                 "--durability=none"],
                None, True),
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build/release")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--concurrency", default="1,16,64,256")
    args = parser.parse_args()
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.2f}, "
          f"{os.cpu_count()} CPUs; {args.rounds} rounds of {args.duration} s after {args.warmup} s",
          flush=True)
    results = {}  # (server, concurrency) -> list of reports
    for round_number in range(args.rounds):
        order = list(SERVERS)
        order = order[round_number % len(order):] + order[:round_number % len(order)]
        for concurrency in concurrencies:
            for name in order:
                command, pattern, verify = SERVERS[name]
                process, port = start([f"{args.build}/{command[0]}"] + command[1:], pattern)
                try:
                    report = loadtest(args.build, port, [
                        f"--concurrency={concurrency}", f"--duration={args.duration}s",
                        f"--warmup={args.warmup}s", "--mix=deposit=100", "--channels=4",
                        f"--verify={'true' if verify else 'false'}"])
                finally:
                    stop(process)
                results.setdefault((name, concurrency), []).append(report)
                print(f"round {round_number + 1} c={concurrency} {name}: "
                      f"{report['ok_per_second']:.0f} OK/s, verification {report['verification']}",
                      file=sys.stderr, flush=True)

    print("\n| concurrency | server | OK calls/s median (min-max) | p50 ms | p99 ms "
          "| ratio to answer at once (median of rounds) |")
    print("|---|---|---|---|---|---|")
    for concurrency in concurrencies:
        reference = results[("answer at once", concurrency)]
        for name in SERVERS:
            reports = results[(name, concurrency)]
            ok = [r["ok_per_second"] for r in reports]
            p50 = statistics.median(r["latency_us"]["ok"]["p50"] for r in reports) / 1e3
            p99 = statistics.median(r["latency_us"]["ok"]["p99"] for r in reports) / 1e3
            ratio = statistics.median(r["ok_per_second"] / ref["ok_per_second"]
                                      for r, ref in zip(reports, reference))
            failed = sum(r["verification"] == "FAIL" for r in reports)
            note = f" ({failed} verification FAIL)" if failed else ""
            print(f"| {concurrency} | {name} | {statistics.median(ok):,.0f} ({min(ok):,.0f}-"
                  f"{max(ok):,.0f}) | {p50:.2f} | {p99:.2f} | {ratio:.2f}{note} |")

    capacity = statistics.median(r["ok_per_second"] for r in results[("ledgerd", max(concurrencies))])
    rate = 2 * capacity
    command, pattern, _ = SERVERS["ledgerd"]
    process, port = start([f"{args.build}/{command[0]}"] + command[1:], pattern)
    try:
        report = loadtest(args.build, port, [
            f"--rate={rate:.0f}", f"--duration={args.duration}s", f"--warmup={args.warmup}s",
            "--distribution=zipf:1.1", "--accounts=10000", "--channels=4"])
    finally:
        stop(process)
    attempted = sum(report["codes"].values())
    shed = report["codes"].get("RESOURCE_EXHAUSTED", 0)
    print(f"\nOverload: open loop at {rate:,.0f} calls/s (2x the {capacity:,.0f} OK/s measured at "
          f"c={max(concurrencies)}), zipf:1.1 over 10,000 accounts, default mix: "
          f"{report['ok_per_second']:,.0f} OK/s, shed fraction {shed / max(attempted, 1):.1%}, "
          f"not sent (client overloaded) {report['not_sent']}, "
          f"OK p99 {report['latency_us']['ok']['p99'] / 1e3:.2f} ms, "
          f"RESOURCE_EXHAUSTED p99 {report['latency_us']['resource_exhausted']['p99'] / 1e3:.2f} ms, "
          f"verification {report['verification']}")


if __name__ == "__main__":
    main()
