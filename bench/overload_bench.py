#!/usr/bin/env python3
"""Overload benchmark: issue 14's goal table, what a client sees beyond capacity.

For each ledgerd --durability mode of --modes (default sync,none; sync on a fresh `ledgerd init`
data directory), one ledgerd process serves every phase, so that its memory growth covers the
whole run:
  1. capacity: ledger-loadtest closed loop, --concurrency (256) calls in flight, --capacity_s
     (10) measured after --capacity_warmup_s (2); capacity is its OK calls/s;
  2. overload: open loop at each multiple of capacity in --multipliers (default 1.5,2), --duration
     (10) measured after --warmup (1) each.
Every run uses --accounts=10000 --distribution=zipf:1.1 --deadline=1s and the default mix
(deposit=70,withdraw=25,balance=5), verifies every balance (a shed call is booked as not applied,
so PASS also proves nothing shed was applied), and on a durable ledgerd settles its ambiguous
calls first (--resolve_for 60s) so that verification is exact; --durability=none does not
deduplicate request_ids, so there verification checks balances against bounds.

ledgerd runs on CPU 0 and ledger-loadtest on CPU 1 (taskset; --server_cpus/--client_cpus, or
--no_pin), so that the client's work does not steal the server's core; the client's own CPU use
in the measured window is reported (from /proc), with the calls it could not send on time.

Measured besides the load client's report: ledgerd's RSS every 100 ms (VmRSS); /metrics when the
measured window opens and when it closes (admitted, refused by reason, mailbox rejections) and
every 0.5 s between (the largest ledger_in_flight); CPU seconds of ledgerd and of the client in
the window. Series a ledgerd does not export are printed as "-".

A control (unless --skip_reference) runs the same open-loop rates, multiples of the first mode's
capacity, against the answer-at-once reference server (bench/ledger-reference-server
--mode=instant) on the same CPU: what it shows comes from the load client, gRPC and the machine,
not from ledgerd.

--sweep_max_in_flight 64,128,256 then runs the 2× phase (the largest of --multipliers) once per
limit, each on a fresh ledgerd with --max_in_flight=N, at the rate derived from the capacity
measured in the same round. --rounds N repeats everything (the order of modes and limits rotates)
and the report gives medians with min–max. bench/overload_report.py prints the tables and goals;
it can reprint them from --json FILE.

Usage: bench/overload_bench.py [--build build/release] [--modes sync,none] [--multipliers 1.5,2]
       [--rounds 1] [--server_args "--max_in_flight=128"] [--sweep_max_in_flight 64,128,256,512]
       [--json results.json]
"""
import argparse
import json
import math
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

import overload_report
from bench_util import (MODES, comma_modes, cpu_seconds, ledgerd_scratch, log,
                        raise_keyboard_interrupt, read_loadtest_report, rotated, rss_mb,
                        wait_for_ports)

HERE = os.path.dirname(os.path.abspath(__file__))
COMMON_LOADTEST_FLAGS = ("--accounts=10000", "--distribution=zipf:1.1", "--deadline=1s")
RSS_PERIOD_S = 0.1
IN_FLIGHT_PERIOD_S = 0.5
# Beyond warm-up and measurement, a load-client run verifies 10,000 balances and may settle
# ambiguous calls for up to --resolve_for.
LOADTEST_SLACK_S = 120
STOP_TIMEOUT_S = 30


# ---------------------------------------------------------------------------------------------
# /proc and /metrics


def scrape(metrics_port):
    if metrics_port is None:  # The reference server has no /metrics.
        return None
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                    timeout=10) as reply:
            return reply.read().decode()
    except OSError as error:
        log(f"    warning: /metrics scrape failed: {error}")
        return None


def samples(text, name):
    """[(labels text, value)] of every sample of `name`; None when the series is absent."""
    if text is None:
        return None
    found = []
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            head, value = line.rsplit(" ", 1)
            found.append((head[len(name):], float(value)))
    return found if found else None


def total(text, name):
    found = samples(text, name)
    return None if found is None else sum(value for _, value in found)


def by_label(text, name, label):
    found = samples(text, name)
    if found is None:
        return None
    values = {}
    for labels, value in found:
        match = re.search(label + r'="([^"]*)"', labels)
        key = match.group(1) if match else ""
        values[key] = values.get(key, 0.0) + value
    return values


def counter_deltas(before, after):
    """Admitted, refused by reason and mailbox rejections between two scrapes (None: absent)."""

    def delta(name):
        a, b = total(after, name), total(before, name)
        return None if a is None or b is None else a - b

    refused = None
    refused_after = by_label(after, "ledger_refused_total", "reason")
    refused_before = by_label(before, "ledger_refused_total", "reason")
    if refused_after is not None and refused_before is not None:
        refused = {reason: value - refused_before.get(reason, 0.0)
                   for reason, value in refused_after.items()}
    return {
        "admitted": delta("ledger_admitted_total"),
        "refused": refused,
        "mailbox_rejected": delta("ledger_mailbox_rejected_total"),
        "in_flight_limit": total(after, "ledger_in_flight_limit"),
    }


class RssSampler:
    """Samples a process's VmRSS every RSS_PERIOD_S in its own thread until stopped."""

    def __init__(self, pid):
        self.pid, self.points = pid, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            value = rss_mb(self.pid)
            if value is not None:
                self.points.append((time.monotonic(), value))
            self._stop.wait(RSS_PERIOD_S)

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)

    def at(self, moment):
        """The last sample at or before `moment` (the first one when none is)."""
        before = [value for t, value in self.points if t <= moment]
        return before[-1] if before else (self.points[0][1] if self.points else None)

    def peak(self, start, end):
        inside = [value for t, value in self.points if start <= t <= end]
        return max(inside) if inside else None


# ---------------------------------------------------------------------------------------------
# ledgerd


class Server:
    """One server process, pinned, started on a free port; stop() ends it by PID (SIGTERM, then
    SIGKILL). `ready` is ledgerd's --ports_file (a path), or for the reference server a compiled
    pattern that matches its start line, group 1 its port."""

    def __init__(self, args, command, ready, name, quota=None):
        self.command = [*pin(args, args.server_cpus), *command]
        self.name, self.lines, self.metrics_port = name, [], None
        self.process = subprocess.Popen(self.command, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
        self.pid = self.process.pid  # taskset execs the server: the same PID.
        if self._wait_until_listening(ready):
            self.quota = None
            if quota:
                try:
                    self.quota = CpuQuota(quota)
                    self.quota.add(self.pid)
                except (OSError, RuntimeError):
                    self.stop()
                    raise
            self.rss = RssSampler(self.pid)
            self.started = time.monotonic()
            return
        self.stop()
        raise RuntimeError(f"{name} did not start (" + " ".join(map(shlex.quote, self.command)) +
                           "); its output:\n" + "".join(self.lines[-20:]))

    def _wait_until_listening(self, ready):
        """True once it listens, with self.port (and for ledgerd self.metrics_port) set."""
        if isinstance(ready, str):
            # Keep reading its output, so that it never blocks on a full pipe.
            threading.Thread(target=self._drain, daemon=True).start()
            try:
                self.port, self.metrics_port = wait_for_ports(self.process, ready, seconds_max=60)
            except RuntimeError as error:
                self.lines.append(f"{error}\n")
                return False
            return True
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            match = ready.search(line)
            if match:
                self.port = int(match.group(1))
                threading.Thread(target=self._drain, daemon=True).start()
                return True
        return False

    def _drain(self):
        for line in self.process.stdout:
            self.lines.append(line)
            del self.lines[:-50]

    def stop(self):
        if hasattr(self, "rss"):
            self.rss.stop()
        stop_process(self.process)
        if getattr(self, "quota", None):
            self.quota.remove()


def start_ledgerd(args, durability, data_dir, extra):
    binary = os.path.join(args.build, "server", "ledgerd")
    if durability != "none":
        subprocess.run([binary, "init", f"--data_dir={data_dir}"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ports_file = os.path.join(ledgerd_scratch(), "ports.json")
    return Server(args, [binary, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                         f"--durability={durability}", f"--data_dir={data_dir}",
                         f"--ports_file={ports_file}", *extra],
                  ports_file, "ledgerd", args.server_cpu_quota)


def start_reference(args):
    return Server(args, [os.path.join(args.build, "bench", "ledger-reference-server"),
                         "--mode=instant", "--listen=127.0.0.1:0"],
                  re.compile(r"listening on port (\d+)"), "ledger-reference-server")


class CpuQuota:
    """A CPU bandwidth limit for one process: a cgroup (v1 `cpu` controller) of its own, with
    `fraction` of one CPU per `period_us`, removed by remove(). Throttling stalls the process for
    the rest of a period once its quota is spent, so the period is as short as the kernel's 1 ms
    minimum quota allows, and at most 10 ms (0.2 of a CPU: 5 ms periods, stalls of at most 4 ms)."""

    ROOT = "/sys/fs/cgroup/cpu"

    def __init__(self, fraction):
        period_us = min(10_000, max(1_000, math.ceil(1_000 / fraction)))
        if not os.path.exists(os.path.join(self.ROOT, "cpu.cfs_quota_us")):
            raise RuntimeError(f"--server_cpu_quota needs the cgroup v1 cpu controller at "
                               f"{self.ROOT}; it is not there")
        self.path = os.path.join(self.ROOT, f"ledgerd-overload-{os.getpid()}-{time.time_ns()}")
        os.mkdir(self.path)
        self._write("cpu.cfs_period_us", period_us)
        self._write("cpu.cfs_quota_us", round(fraction * period_us))

    def _write(self, name, value):
        with open(os.path.join(self.path, name), "w") as file:
            file.write(f"{value}\n")

    def add(self, pid):
        self._write("cgroup.procs", pid)  # Moves every thread of the process.

    def throttled_s(self):
        try:
            with open(os.path.join(self.path, "cpu.stat")) as stat:
                for line in stat:
                    if line.startswith("throttled_time"):
                        return int(line.split()[1]) / 1e9
        except OSError:
            pass
        return None

    def remove(self):
        """After its process has exited (a cgroup with tasks cannot be removed)."""
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)
        log(f"    warning: could not remove {self.path}")


def stop_process(process):
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        log(f"    PID {process.pid} did not stop within {STOP_TIMEOUT_S} s of SIGTERM: SIGKILL")
        process.kill()
        process.wait()


def pin(args, cpus):
    return [] if args.no_pin else ["taskset", "-c", cpus]


# ---------------------------------------------------------------------------------------------
# One load-client run


def observe_window(server, client_pid, measuring, duration, done, out):
    """From the load client's first measured progress line until `duration` later: /metrics
    at both ends and every IN_FLIGHT_PERIOD_S between, CPU seconds of server and client."""
    if not measuring.wait(timeout=120) or done.is_set():
        return
    t0 = time.monotonic()
    first = scrape(server.metrics_port)
    server_cpu0, client_cpu0 = cpu_seconds(server.pid), cpu_seconds(client_pid)
    throttled0 = server.quota.throttled_s() if server.quota else None
    in_flight_max = None
    # The window opened at most ~0.1 s before its progress line: end a little early to stay in.
    end = t0 + duration - 0.2
    while time.monotonic() < end - IN_FLIGHT_PERIOD_S and not done.is_set():
        time.sleep(IN_FLIGHT_PERIOD_S)
        value = total(scrape(server.metrics_port), "ledger_in_flight")
        if value is not None:
            in_flight_max = value if in_flight_max is None else max(in_flight_max, value)
    time.sleep(max(0.0, end - time.monotonic()))
    server_cpu1, client_cpu1 = cpu_seconds(server.pid), cpu_seconds(client_pid)
    throttled1 = server.quota.throttled_s() if server.quota else None
    t1 = time.monotonic()
    last = scrape(server.metrics_port)
    window = t1 - t0
    out.update(counter_deltas(first, last))
    value = total(last, "ledger_in_flight")
    if value is not None:
        in_flight_max = value if in_flight_max is None else max(in_flight_max, value)
    out.update(
        window_s=round(window, 3), in_flight_max=in_flight_max,
        server_throttled_s=(None if None in (throttled0, throttled1) else throttled1 - throttled0),
        server_cpu_s=(None if None in (server_cpu0, server_cpu1) else server_cpu1 - server_cpu0),
        client_cpu_window_s=(None if None in (client_cpu0, client_cpu1)
                             else client_cpu1 - client_cpu0))


def run_loadtest(args, server, durability, label, load_flags, warmup_s, duration_s):
    """One ledger-loadtest run against `server`; returns the phase record. durability None: the
    stateless reference server, nothing to verify."""
    resolve = args.resolve_for if durability not in ("none", None) else "0"
    if durability is None:
        load_flags = [*load_flags, "--verify=false"]
    with tempfile.TemporaryDirectory(prefix="overload-loadtest-") as scratch:
        report_path = os.path.join(scratch, "report.json")
        command = [*pin(args, args.client_cpus),
                   os.path.join(args.build, "client", "ledger-loadtest"),
                   f"--target=127.0.0.1:{server.port}", *COMMON_LOADTEST_FLAGS, *load_flags,
                   f"--duration={duration_s}s", f"--warmup={warmup_s}s",
                   f"--resolve_for={resolve}", f"--json_file={report_path}", "--progress",
                   *shlex.split(args.loadtest_args)]
        stderr_lines, measuring, done, window = [], threading.Event(), threading.Event(), {}
        started = time.monotonic()
        with open(os.path.join(scratch, "stdout.txt"), "w") as stdout:
            process = subprocess.Popen(command, stdout=stdout, stderr=subprocess.PIPE, text=True)

        def watch():
            for line in process.stderr:
                stderr_lines.append(line)
                if re.search(r"\]\s+measure", line):
                    measuring.set()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        observer = threading.Thread(
            target=observe_window,
            args=(server, process.pid, measuring, duration_s, done, window), daemon=True)
        observer.start()
        try:
            process.wait(timeout=warmup_s + duration_s + LOADTEST_SLACK_S +
                         (60 if resolve != "0" else 0))
        except subprocess.TimeoutExpired:
            log(f"    ledger-loadtest (PID {process.pid}) ran too long: stopping it")
        finally:
            stop_process(process)
            done.set()
        observer.join(timeout=30)
        watcher.join(timeout=10)
        report = None
        if os.path.exists(report_path):
            report = read_loadtest_report(report_path)
    record = phase_record(report, window)
    record.update(label=label, command=" ".join(map(shlex.quote, command)),
                  exit_code=process.returncode, wall_s=round(time.monotonic() - started, 1))
    if report is None or process.returncode != 0:
        record["client_output"] = "".join(stderr_lines[-15:])
        log(f"    ledger-loadtest exited with {process.returncode}"
            f"{'' if report else ' and no report'}:\n{record['client_output']}")
    return record


def phase_record(report, window):
    """The figures of one run: the load client's report, read with .get() because fields come
    and go between versions, plus what was observed of the server in the measured window."""
    record = dict(window)
    if report is None:
        record["verification"] = "NO REPORT"
        return record
    latency = report.get("latency_us", {})
    ok, shed = latency.get("ok", {}), latency.get("resource_exhausted", {})
    # With retries after pushback, a call's RESOURCE_EXHAUSTED latency spans its attempts; each
    # refusal on its own (the server's answer time) is timed separately.
    attempt = latency.get("resource_exhausted_attempt", {})
    ok_attempt = latency.get("ok_attempt", {})
    codes = report.get("codes", {})
    seconds = report.get("measured_seconds") or 0
    not_sent = report.get("not_sent")
    sent = report.get("sent_per_second")
    if sent is None and seconds and report.get("measured_calls") is not None:
        sent = (report["measured_calls"] - (not_sent or 0)) / seconds
    client_cpu = report.get("client_cpu_seconds")
    record.update(
        measured_seconds=seconds,
        offered_per_second=report.get("offered_per_second"),
        sent_per_second=sent,
        attempted_per_second=report.get("attempted_per_second"),
        ok_per_second=report.get("ok_per_second"),
        ok_p50_ms=ms(ok.get("p50")) if ok.get("count") else None,
        ok_p99_ms=ms(ok.get("p99")) if ok.get("count") else None,
        re_count=codes.get("RESOURCE_EXHAUSTED", 0),
        re_p50_ms=ms(shed.get("p50")) if shed.get("count") else None,
        re_p99_ms=ms(shed.get("p99")) if shed.get("count") else None,
        re_attempt_count=attempt.get("count"),
        re_attempt_p50_ms=ms(attempt.get("p50")) if attempt.get("count") else None,
        re_attempt_p99_ms=ms(attempt.get("p99")) if attempt.get("count") else None,
        # The attempt that ended an OK call, on its own: the server's time for admitted work,
        # without the refusal and pushback wait before a retry.
        ok_attempt_p50_ms=ms(ok_attempt.get("p50")) if ok_attempt.get("count") else None,
        ok_attempt_p99_ms=ms(ok_attempt.get("p99")) if ok_attempt.get("count") else None,
        de_count=codes.get("DEADLINE_EXCEEDED", 0),
        codes=codes,
        not_sent=not_sent,
        not_sent_late=report.get("not_sent_late"),
        not_sent_throttled=report.get("not_sent_throttled"),
        retries=report.get("retries"),
        client_cpu_report_s=client_cpu,
        ambiguous=report.get("ambiguous"),
        verification=report.get("verification", "-"),
    )
    return record


def ms(us):
    return None if us is None else us / 1000


# ---------------------------------------------------------------------------------------------
# One mode, one round


def describe(record):
    def f(value, spec):
        return "-" if value is None else format(value, spec)

    return (f"{f(record.get('ok_per_second'), ',.0f')} OK/s, OK p99 "
            f"{f(record.get('ok_p99_ms'), '.1f')} ms, RESOURCE_EXHAUSTED "
            f"{record.get('re_count', '-')} (p99 {f(record.get('re_p99_ms'), '.1f')} ms), "
            f"DEADLINE_EXCEEDED {record.get('de_count', '-')}, client CPU "
            f"{f(record.get('client_cpu_window_s'), '.1f')} s, verification "
            f"{record.get('verification')}")


def mode_run(args, durability, round_index, scratch):
    """Capacity, then each overload multiple, against one ledgerd; returns the mode record."""
    data_dir = os.path.join(scratch, f"data-{durability}-r{round_index}")
    record = {"round": round_index, "mode": durability, "server_args": args.server_args,
              "load_average_before": [round(x, 2) for x in os.getloadavg()], "phases": []}
    server = start_ledgerd(args, durability, data_dir, shlex.split(args.server_args))
    try:
        rss = server.rss
        time.sleep(0.3)  # A few RSS samples of the idle process.
        capacity = run_loadtest(args, server, durability, "capacity",
                                [f"--concurrency={args.concurrency}"], args.capacity_warmup_s,
                                args.capacity_s)
        capacity.update(multiplier=None, rate=None)
        record["phases"].append(capacity)
        record["capacity"] = capacity.get("ok_per_second")
        log(f"  round {round_index + 1} {durability} capacity: {describe(capacity)}")
        if not record["capacity"]:
            raise RuntimeError("no capacity measured (no OK calls in the closed loop)")
        overload_start = time.monotonic()
        for multiplier in args.multipliers:
            rate = round(multiplier * record["capacity"])
            phase = run_loadtest(args, server, durability, f"{multiplier:g}×",
                                 [f"--rate={rate}"], args.warmup, args.duration)
            phase.update(multiplier=multiplier, rate=rate)
            record["phases"].append(phase)
            log(f"  round {round_index + 1} {durability} {multiplier:g}× ({rate:,}/s): "
                f"{describe(phase)}")
        end = time.monotonic()
        record["rss_mb"] = {
            "start": rss.at(server.started),
            "overload_start": rss.at(overload_start),
            "peak_overload": rss.peak(overload_start, end),
            "peak": rss.peak(server.started, end),
            "end": rss.at(end),
        }
        record["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    return record


def sweep_run(args, durability, limit, capacity, round_index, scratch):
    """The largest overload multiple against a fresh ledgerd with --max_in_flight=limit."""
    data_dir = os.path.join(scratch, f"sweep-{limit}-r{round_index}")
    multiplier = max(args.multipliers)
    rate = round(multiplier * capacity)
    record = {"round": round_index, "mode": durability, "max_in_flight": limit,
              "capacity": capacity, "multiplier": multiplier, "rate": rate}
    server = start_ledgerd(args, durability, data_dir,
                           [*shlex.split(args.server_args), f"--max_in_flight={limit}"])
    try:
        time.sleep(0.3)
        start = server.rss.at(server.started)
        phase = run_loadtest(args, server, durability, f"{multiplier:g}× limit {limit}",
                             [f"--rate={rate}"], args.warmup, args.duration)
        phase.update(multiplier=multiplier, rate=rate)
        record["phase"] = phase
        record["rss_mb"] = {"start": start,
                            "peak": server.rss.peak(server.started, time.monotonic())}
        log(f"  round {round_index + 1} sweep {durability} --max_in_flight={limit} at "
            f"{multiplier:g}× ({rate:,}/s): {describe(phase)}")
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    return record


def reference_run(args, capacity, round_index):
    """The control: the same open-loop rates against the answer-at-once reference server on the
    same CPU. Whatever latency it shows comes from the load client, gRPC and the machine, not from
    ledgerd."""
    record = {"round": round_index, "mode": "reference", "first_mode": args.modes[0],
              "capacity": capacity, "phases": []}
    server = start_reference(args)
    try:
        for multiplier in args.multipliers:
            rate = round(multiplier * capacity)
            phase = run_loadtest(args, server, None, f"{multiplier:g}×", [f"--rate={rate}"],
                                 args.warmup, args.duration)
            phase.update(multiplier=multiplier, rate=rate)
            record["phases"].append(phase)
            log(f"  round {round_index + 1} reference (answer at once) {multiplier:g}× of "
                f"{args.modes[0]} capacity ({rate:,}/s): {describe(phase)}")
    finally:
        server.stop()
    return record


# ---------------------------------------------------------------------------------------------
# Command line


def comma_list(kind, minimum):
    def parse(text):
        try:
            values = [kind(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
        if not values or min(values) < minimum:
            raise argparse.ArgumentTypeError(f"values must be at least {minimum}: {text!r}")
        return values
    return parse


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="Goals (issue 14): goodput ≥ 0.90× capacity at 1.5× and 2×; OK p99 ≤ 50 ms; "
               "RESOURCE_EXHAUSTED p99 ≤ 10 ms; ledgerd RSS growth ≤ 64 MB; verification PASS.")
    parser.add_argument("--build", default="build/release",
                        help="CMake build directory holding server/ledgerd and "
                             "client/ledger-loadtest")
    parser.add_argument("--modes", type=comma_modes, default=["sync", "none"],
                        help="ledgerd --durability modes, one ledgerd each (default sync,none)")
    parser.add_argument("--multipliers", type=comma_list(float, 0.01), default=[1.5, 2.0],
                        help="open-loop rates as multiples of capacity (default 1.5,2; the "
                             "docs use 1,1.5,2,5)")
    parser.add_argument("--concurrency", type=int, default=256,
                        help="calls in flight of the closed-loop capacity phase")
    parser.add_argument("--capacity_s", type=int, default=10, help="seconds measured, capacity")
    parser.add_argument("--capacity_warmup_s", type=int, default=2,
                        help="seconds of warm-up, capacity")
    parser.add_argument("--duration", type=int, default=10,
                        help="seconds measured per overload phase")
    parser.add_argument("--warmup", type=int, default=1,
                        help="seconds of warm-up per overload phase (at least 1: the measured "
                             "window opens at the load client's first progress line after it)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat everything; the report gives medians and min–max")
    parser.add_argument("--server_args", default="",
                        help='extra ledgerd flags for every ledgerd, e.g. "--max_in_flight=128"')
    parser.add_argument("--loadtest_args", default="",
                        help="extra ledger-loadtest flags for every run")
    parser.add_argument("--sweep_max_in_flight", type=comma_list(int, 1), default=[],
                        help="also run the largest multiple once per --max_in_flight value, each "
                             "on a fresh ledgerd (needs a ledgerd with that flag)")
    parser.add_argument("--sweep_mode", type=comma_modes, default=None,
                        help="the --durability of the sweep (default: the first of --modes)")
    parser.add_argument("--resolve_for", default="60s",
                        help="ledger-loadtest --resolve_for on a durable ledgerd (exact "
                             "verification); --durability=none always uses 0")
    parser.add_argument("--skip_reference", action="store_true",
                        help="leave out the control: the same open-loop rates (multiples of the "
                             "first mode's capacity) against the answer-at-once reference server")
    parser.add_argument("--server_cpus", default="0", help="taskset CPU list of ledgerd")
    parser.add_argument("--client_cpus", default="1", help="taskset CPU list of ledger-loadtest")
    parser.add_argument("--server_cpu_quota", type=float, default=None,
                        help="also cap ledgerd at this fraction of one CPU (a cgroup v1 cpu "
                             "quota, period 1000/fraction µs, at most 10 ms; not the control), so "
                             "that a one-core load client can offer 2x its capacity; e.g. 0.4. "
                             "Experimental: see docs/benchmarks.md")
    parser.add_argument("--no_pin", action="store_true", help="run both unpinned")
    parser.add_argument("--json", help="also write every figure to this file")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.duration < 1 or args.warmup < 1 or args.capacity_s < 1 or \
            args.capacity_warmup_s < 1:
        parser.error("--rounds, --duration, --warmup, --capacity_s and --capacity_warmup_s must "
                     "be at least 1")
    args.sweep_mode = (args.sweep_mode or args.modes)[0]
    return args


def check_setup(args):
    """Fails early, with a message that says what to do, instead of halfway through."""
    binaries = ["server/ledgerd", "client/ledger-loadtest"]
    if not args.skip_reference:
        binaries.append("bench/ledger-reference-server")
    for binary in binaries:
        if not os.access(os.path.join(args.build, binary), os.X_OK):
            sys.exit(f"overload_bench: {os.path.join(args.build, binary)} is missing; build "
                     f"first (make build) or pass --build")
    if not args.no_pin:
        if shutil.which("taskset") is None:
            sys.exit("overload_bench: taskset (util-linux) is missing; install it or pass "
                     "--no_pin")
        allowed = os.sched_getaffinity(0)
        for cpus in (args.server_cpus, args.client_cpus):
            wanted = set()
            for part in cpus.split(","):
                low, _, high = part.partition("-")
                wanted.update(range(int(low), int(high or low) + 1))
            if not wanted <= allowed:
                sys.exit(f"overload_bench: CPUs {cpus} are not all available here "
                         f"({sorted(allowed)}); pass --server_cpus/--client_cpus or --no_pin")
    flags = " ".join(shlex.split(args.server_args))
    if args.sweep_max_in_flight:
        flags += " --max_in_flight"
    help_text = subprocess.run([os.path.join(args.build, "server", "ledgerd"), "--help"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True).stdout
    for flag in re.findall(r"--([a-z_]+)", flags):
        if f"--{flag}" not in help_text:
            sys.exit(f"overload_bench: this ledgerd ({args.build}) has no --{flag} (see its "
                     f"--help); build one that does or leave it out")


def git_revision(path):
    try:
        return subprocess.run(["git", "-C", path, "describe", "--always", "--dirty"], check=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def header(args, argv):
    build = os.path.abspath(args.build)
    machine = {
        "nproc": os.cpu_count(),
        "kernel": platform.release(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "bench_source": git_revision(HERE),
        "build": build,
        "build_source": git_revision(os.path.dirname(os.path.dirname(build))),
    }
    command = " ".join(shlex.quote(a) for a in [sys.executable, sys.argv[0], *argv])
    print(f"command: `{command}`")
    print(f"machine: {machine['nproc']} CPUs, kernel {machine['kernel']}; load average at start "
          f"{' '.join(map(str, machine['load_average_at_start']))}; {machine['started_utc']} UTC; "
          f"binaries {build} (source {machine['build_source']})")
    pinning = ("unpinned" if args.no_pin else
               f"ledgerd on CPU {args.server_cpus}, ledger-loadtest on CPU {args.client_cpus}")
    print(f"{pinning}; ledger-loadtest {' '.join(COMMON_LOADTEST_FLAGS)}, default mix; capacity: "
          f"closed loop, {args.concurrency} in flight, {args.capacity_s} s after "
          f"{args.capacity_warmup_s} s; then open loop at "
          f"{', '.join(f'{m:g}×' for m in args.multipliers)} capacity, {args.duration} s after "
          f"{args.warmup} s each; {args.rounds} round(s)"
          + (f"; ledgerd flags {args.server_args}" if args.server_args else "")
          + (f"; server capped at {args.server_cpu_quota:g} of a CPU (cgroup cpu quota)"
             if args.server_cpu_quota else ""))
    print(flush=True)
    return command, machine


def main(argv):
    args = parse_args(argv)
    check_setup(args)
    # SIGTERM and SIGHUP unwind like Ctrl-C, so every process started here is stopped.
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
    signal.signal(signal.SIGHUP, raise_keyboard_interrupt)
    started = time.monotonic()
    command, machine = header(args, argv)
    results = {"command": command, "machine": machine,
               "settings": {k: v for k, v in vars(args).items() if k != "json"},
               "modes": [], "reference": [], "sweep": []}
    scratch = tempfile.mkdtemp(prefix="ledgerd-overload-")
    failed = False
    try:
        for round_index in range(args.rounds):
            capacities = {}
            for durability in rotated(args.modes, round_index):
                try:
                    record = mode_run(args, durability, round_index, scratch)
                    capacities[durability] = record["capacity"]
                except (RuntimeError, subprocess.CalledProcessError) as error:
                    detail = getattr(error, "stderr", None) or ""
                    log(f"  round {round_index + 1} {durability}: FAILED: {error} {detail}")
                    record = {"round": round_index, "mode": durability,
                              "error": f"{error} {detail}".strip(), "phases": []}
                    failed = True
                results["modes"].append(record)
            if not args.skip_reference and capacities.get(args.modes[0]):
                try:
                    results["reference"].append(
                        reference_run(args, capacities[args.modes[0]], round_index))
                except RuntimeError as error:
                    log(f"  reference server: FAILED: {error}")
            capacity = capacities.get(args.sweep_mode)
            for limit in rotated(args.sweep_max_in_flight, round_index):
                if not capacity:
                    log(f"  sweep skipped in round {round_index + 1}: no capacity of "
                        f"{args.sweep_mode}")
                    break
                try:
                    results["sweep"].append(
                        sweep_run(args, args.sweep_mode, limit, capacity, round_index, scratch))
                except (RuntimeError, subprocess.CalledProcessError) as error:
                    log(f"  sweep --max_in_flight={limit}: FAILED: {error}")
                    results["sweep"].append({"round": round_index, "max_in_flight": limit,
                                             "error": str(error)})
                    failed = True
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        results["wall_s"] = round(time.monotonic() - started, 1)
        results["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
        if args.json:
            with open(args.json, "w") as file:
                json.dump(results, file, indent=1)
    results["goals"] = overload_report.print_report(results)
    print(f"\nthe whole benchmark took {results['wall_s'] / 60:.1f} min; load average at end "
          f"{' '.join(map(str, results['machine']['load_average_at_end']))}")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)
        print(f"wrote {args.json}")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except KeyboardInterrupt:
        sys.exit("interrupted; every ledgerd and ledger-loadtest started here was stopped")
