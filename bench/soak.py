#!/usr/bin/env python3
"""Issue 30's soak (goal 6, "memory that stays flat under steady load"): does ledgerd's resident
memory stay flat under a steady, verified load?

One fresh ledgerd (--shards 4, the default --durability=sync, a new data directory, ephemeral
loopback ports read from --ports_file) and two ledger-loadtest clients at once, each an open loop
for the whole run:

  deposits   --rate 4000 Deposits/s over a fixed 10,000 accounts (--mix=deposit=1)
  transfers  --rate 200 cross-shard Transfers/s among 40 funded accounts
             (--mix=transfer=1 --transfer_scope=cross_shard)

Every --sample_s (10 s) it reads ledgerd's VmRSS from /proc/PID/status and the CPU time of all
three processes. At the end each client verifies its accounts exactly (its report's verification
must be PASS); the script prints the RSS table (each minute's lowest and highest sample), each process's CPU,
and the growth of RSS after minute --baseline_minutes (5; half the run when shorter than 10
minutes): the highest sample after that minute minus the highest up to it. Highs, not two points,
because RSS swings by up to the memtables' 64 MB as they fill and are flushed (about once a minute
at this load); a leak or a growing cache raises the highs. Exit status 1 when the growth exceeds --growth_max_mb (16),
when a client's verification is not PASS or a process fails; 0 otherwise.

On two cores ledgerd is pinned to CPU 0 and both clients to CPU 1 (taskset; --server_cpu,
--client_cpu; "" leaves a process unpinned).

    python3 bench/soak.py --build build/release --minutes 30
    make soak SOAK_MINUTES=5            # the same through make, after a Release build

--watch attaches a watcher for the whole run (issue 33): the deposits client runs with
ledger-loadtest --watch, which follows the change stream, rebuilds every balance from it and
checks them against Balance at the end (its report's watch verdict must be PASS too).

--server_env KEY=VALUE (repeatable) starts ledgerd with more environment, e.g.
LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4 and HEAPPROFILE=/tmp/hp/ledgerd for a heap
profile; --server_args passes more ledgerd flags."""
import argparse
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import (cpu_seconds, log, raise_keyboard_interrupt, read_loadtest_report,  # noqa: E402
                        rss_mb, wait_for_ports)

# How long a client may take after its load ends: settling ambiguous calls (its --resolve_for)
# and reading back every balance.
CLIENT_SLACK_S = 180


def pin(cpu):
    return ["taskset", "-c", cpu] if cpu else []


def start_ledgerd(args, scratch):
    ledgerd = os.path.join(args.build, "server", "ledgerd")
    data_dir = os.path.join(scratch, "data")
    subprocess.run([ledgerd, "init", f"--data_dir={data_dir}"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ports_file = os.path.join(scratch, "ports.json")
    env = dict(os.environ)
    for pair in args.server_env:
        key, _, value = pair.partition("=")
        env[key] = value
    command = [*pin(args.server_cpu), ledgerd, "--listen=127.0.0.1:0",
               "--metrics_listen=127.0.0.1:0", f"--shards={args.shards}",
               f"--data_dir={data_dir}", f"--ports_file={ports_file}",
               *shlex.split(args.server_args)]
    log_file = open(os.path.join(scratch, "ledgerd.log"), "w")
    process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=env)
    try:
        port, metrics_port = wait_for_ports(process, ports_file)
    except RuntimeError:
        process.kill()
        raise
    return process, port, metrics_port, command


def start_client(args, scratch, port, name, load_flags):
    report = os.path.join(scratch, f"{name}.json")
    command = [*pin(args.client_cpu), os.path.join(args.build, "client", "ledger-loadtest"),
               f"--target=127.0.0.1:{port}", f"--run_id={name}{os.getpid()}",
               f"--server_shards={args.shards}", *load_flags,
               f"--duration={int(args.minutes * 60)}s", f"--warmup={args.warmup_s}s",
               f"--json_file={report}"]
    output = open(os.path.join(scratch, f"{name}.log"), "w")
    process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    return {"name": name, "process": process, "report_path": report, "command": command,
            "log": output.name}


def store_memory_mb(metrics_port):
    """ledger_store_memory_bytes by kind, in MB, from ledgerd's /metrics; {} when unreadable."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2) as reply:
            body = reply.read().decode()
    except OSError:
        return {}
    found = re.findall(r'^ledger_store_memory_bytes\{kind="(\w+)"\} (\S+)$', body, re.M)
    return {kind: float(value) / 2**20 for kind, value in found}


def sample_loop(server, metrics_port, clients, load_s, sample_s, samples, stop):
    """Appends (seconds since the load started, RSS MB, {name: CPU s}, {kind: RocksDB MB}) every
    `sample_s` until the load ends or `stop` is set."""
    started = time.monotonic()
    next_at = started
    while not stop.is_set():
        elapsed = time.monotonic() - started
        cpu = {"ledgerd": cpu_seconds(server.pid)}
        cpu.update({c["name"]: cpu_seconds(c["process"].pid) for c in clients})
        samples.append((elapsed, rss_mb(server.pid), cpu, store_memory_mb(metrics_port)))
        if elapsed >= load_s or server.poll() is not None:
            return
        next_at += sample_s
        stop.wait(max(0.0, min(next_at, started + load_s) - time.monotonic()))


def growth(samples, baseline_s):
    """(highest RSS up to `baseline_s`, highest RSS after it, RSS at `baseline_s`, RSS at the end).
    RSS swings by up to the memtables' budget (64 MB) as they fill and are flushed, about once a
    minute at 4,000 Deposits/s, so growth compares highs, not two points of the swing."""
    rss = [(t, r) for t, r, *_ in samples if r is not None]
    before = [r for t, r in rss if t <= baseline_s]
    after = [r for t, r in rss if t > baseline_s]
    if not before or not after:
        return None, None, None, None
    return max(before), max(after), before[-1], rss[-1][1]


def last_at(samples, seconds):
    """The last sample taken at or before `seconds`, or None."""
    before = [sample for sample in samples if sample[0] <= seconds]
    return before[-1] if before else None


def report_table(samples):
    """One row a minute: the lowest and highest sample in it."""
    minutes = {}
    for t, rss, *_ in samples:
        if rss is not None:
            minutes.setdefault(int(t // 60), []).append(rss)
    return [(minute, min(values), max(values)) for minute, values in sorted(minutes.items())]


def cpu_use(samples, name, from_s):
    """CPU seconds of `name` between the first sample at or after `from_s` and the last, and its
    share of one core."""
    points = [(t, cpu[name]) for t, _, cpu, *_ in samples if t >= from_s - 1 and cpu.get(name)
              is not None]
    if len(points) < 2:
        return None, None
    (t0, c0), (t1, c1) = points[0], points[-1]
    return c1 - c0, (c1 - c0) / max(t1 - t0, 1e-9)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build/release", help="the Release build tree")
    parser.add_argument("--minutes", type=float, default=30, help="length of the load")
    parser.add_argument("--baseline_minutes", type=float,
                        help="growth is measured from the RSS at this minute (default 5, or half "
                        "of --minutes when that is shorter than 10)")
    parser.add_argument("--growth_max_mb", type=float, default=16,
                        help="fail when RSS grows more than this after --baseline_minutes")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--deposit_rate", type=float, default=4000)
    parser.add_argument("--deposit_accounts", type=int, default=10000)
    parser.add_argument("--transfer_rate", type=float, default=200)
    parser.add_argument("--transfer_accounts", type=int, default=40)
    parser.add_argument("--warmup_s", type=int, default=5, help="each client's --warmup")
    parser.add_argument("--sample_s", type=float, default=10)
    parser.add_argument("--server_cpu", default="0", help='taskset CPU list of ledgerd ("": none)')
    parser.add_argument("--client_cpu", default="1",
                        help='taskset CPU list of both clients ("": none)')
    parser.add_argument("--server_args", default="", help="more ledgerd flags")
    parser.add_argument("--watch", action="store_true",
                        help="the deposits client also watches the change stream and rebuilds "
                             "every balance from it (ledger-loadtest --watch)")
    parser.add_argument("--server_env", action="append", default=[], metavar="KEY=VALUE",
                        help="more environment for ledgerd (repeatable)")
    parser.add_argument("--keep", metavar="DIR",
                        help="keep the data directory, logs and reports in DIR")
    parser.add_argument("--json", metavar="PATH", help="also write every sample and figure here")
    args = parser.parse_args()
    if args.baseline_minutes is None:
        args.baseline_minutes = min(5.0, args.minutes / 2)
    if args.minutes <= args.baseline_minutes:
        parser.error("--minutes must be longer than --baseline_minutes")
    return args


def stop_process(process, seconds=30):
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def print_results(args, samples, clients):
    baseline_s = args.baseline_minutes * 60
    high_before, high_after, at_baseline, at_end = growth(samples, baseline_s)
    print(f"ledgerd RSS in MB, sampled every {args.sample_s:g} s, lowest and highest each minute:")
    print("| minute | low | high |")
    print("|---:|---:|---:|")
    for minute, low, high in report_table(samples):
        print(f"| {minute}–{minute + 1} | {low:.1f} | {high:.1f} |")
    first = next((rss for _, rss, *_ in samples if rss is not None), None)
    print(f"RSS: {first:.1f} MB at the start; highest {high_before:.1f} MB up to minute "
          f"{args.baseline_minutes:g} ({at_baseline:.1f} MB then), {high_after:.1f} MB after it; "
          f"{at_end:.1f} MB at the end")
    after = [rss for t, rss, *_ in samples if t > baseline_s and rss is not None]
    print(f"median RSS after minute {args.baseline_minutes:g}: {statistics.median(after):.1f} MB")
    grew = high_after - high_before
    print(f"growth after minute {args.baseline_minutes:g}: {grew:+.1f} MB (highest after it minus "
          f"highest up to it; limit {args.growth_max_mb:g} MB)")
    for label, sample in (("up to minute", last_at(samples, baseline_s)),
                          ("at the end", samples[-1] if samples else None)):
        memory = sample[3] if sample is not None and len(sample) > 3 else {}
        if memory:
            print(f"RocksDB {label if label == 'at the end' else label + ' ' + format(args.baseline_minutes, 'g')}: "
                  + ", ".join(f"{kind} {mb:.1f} MB" for kind, mb in sorted(memory.items())))
    for name in ["ledgerd"] + [c["name"] for c in clients]:
        seconds, share = cpu_use(samples, name, 60)
        if seconds is not None:
            print(f"CPU {name}: {seconds:.0f} s after minute 1, {100 * share:.0f}% of one core")
    return grew, high_before, high_after, at_end


def check_clients(clients):
    ok = True
    for client in clients:
        code = client["process"].returncode
        report = (read_loadtest_report(client["report_path"])
                  if os.path.exists(client["report_path"]) else None)
        client["report"] = report
        if report is None:
            print(f"{client['name']}: exit {code}, no report (log: {client['log']})")
            ok = False
            continue
        verification = report.get("verification")
        watch = report.get("watch")
        codes = " ".join(f"{k}={v}" for k, v in sorted(report.get("codes", {}).items()))
        print(f"{client['name']}: {report.get('ok_per_second', 0):.0f} OK/s of "
              f"{report.get('offered_per_second', 0):g} offered, p99 "
              f"{report.get('latency_us', {}).get('ok', {}).get('p99', 0) / 1000:.1f} ms, "
              f"codes {codes}; verification {verification}; exit {code}")
        if watch:
            print(f"{client['name']}: watch {watch.get('verdict')}: {watch.get('events', 0)} "
                  f"events, {watch.get('reconnects', 0)} reconnects, last position "
                  f"{watch.get('last_position', 0)}; {watch.get('note', '')}")
        if verification != "PASS" or code != 0 or (watch and watch.get("verdict") != "PASS"):
            ok = False
    return ok


def main():
    args = parse_args()
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
    scratch = args.keep or tempfile.mkdtemp(prefix="ledgerd-soak-")
    os.makedirs(scratch, exist_ok=True)
    server, clients, stop = None, [], threading.Event()
    try:
        server, port, metrics_port, server_command = start_ledgerd(args, scratch)
        log(f"soak: ledgerd PID {server.pid} on 127.0.0.1:{port}, {args.minutes:g} min, "
            f"files in {scratch}")
        clients.append(start_client(args, scratch, port, "deposits", [
            "--mix=deposit=1", f"--accounts={args.deposit_accounts}",
            f"--rate={args.deposit_rate:g}"] + (["--watch"] if args.watch else [])))
        clients.append(start_client(args, scratch, port, "transfers", [
            "--mix=transfer=1", f"--accounts={args.transfer_accounts}",
            "--transfer_scope=cross_shard", "--fund=1000000000",
            f"--rate={args.transfer_rate:g}"]))
        for client in clients:
            log(f"soak: {client['name']}: {' '.join(map(shlex.quote, client['command']))}")
        samples = []
        load_s = args.minutes * 60 + args.warmup_s
        sampler = threading.Thread(target=sample_loop, daemon=True,
                                   args=(server, metrics_port, clients, load_s, args.sample_s,
                                         samples, stop))
        sampler.start()
        last_logged = -60
        while sampler.is_alive():
            sampler.join(timeout=5)
            if samples and samples[-1][0] - last_logged >= 60 and samples[-1][1] is not None:
                last_logged = samples[-1][0]
                log(f"soak: {last_logged / 60:5.1f} min  ledgerd RSS {samples[-1][1]:.1f} MB")
        for client in clients:
            try:
                client["process"].wait(timeout=CLIENT_SLACK_S)
            except subprocess.TimeoutExpired:
                log(f"soak: {client['name']} ran too long: stopping it")
                stop_process(client["process"])
        server_alive = server.poll() is None
        stop_process(server)
        clients_ok = check_clients(clients)
        grew, high_before, high_after, at_end = print_results(args, samples, clients)
        print("ledgerd: " + " ".join(map(shlex.quote, server_command)))
        if args.json:
            with open(args.json, "w") as out:
                json.dump({"args": vars(args), "samples": samples, "growth_mb": grew,
                           "rss_high_before_mb": high_before, "rss_high_after_mb": high_after,
                           "rss_at_end_mb": at_end,
                           "clients": [{k: c[k] for k in ("name", "command", "report")}
                                       for c in clients]}, out, indent=1)
        failures = []
        if not server_alive:
            failures.append(f"ledgerd exited early (log: {scratch}/ledgerd.log)")
        if not clients_ok:
            failures.append("a client failed or did not verify")
        if grew > args.growth_max_mb:
            failures.append(f"RSS grew {grew:.1f} MB after minute {args.baseline_minutes:g}, "
                            f"more than {args.growth_max_mb:g} MB")
        if failures:
            print("FAIL: " + "; ".join(failures))
            return 1
        print(f"PASS: RSS grew {grew:+.1f} MB after minute {args.baseline_minutes:g} "
              f"(at most {args.growth_max_mb:g} MB)")
        return 0
    except KeyboardInterrupt:
        log("soak: interrupted; stopping ledgerd and the clients")
        return 1
    finally:
        stop.set()
        for client in clients:
            stop_process(client["process"], seconds=5)
        if server is not None:
            stop_process(server)
        if not args.keep:
            subprocess.run(["rm", "-rf", scratch])


if __name__ == "__main__":
    sys.exit(main())
