"""Small pieces the benchmark scripts share: the --durability modes, logging, argument parsing of
mode lists, rotation of run order across rounds, starting a fresh ledgerd, and turning SIGTERM into KeyboardInterrupt so
that every script cleans up its processes the same way."""
import argparse
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

MODES = ("sync", "none", "async")


def log(message):
    print(message, file=sys.stderr, flush=True)


def rotated(items, shift):
    """`items` started at position `shift`: each round runs them in another order, so that the
    machine's drift does not always hit the same one."""
    shift %= max(len(items), 1)
    return items[shift:] + items[:shift]


def comma_modes(text):
    values = [part.strip() for part in text.split(",") if part.strip()]
    if not values or any(v not in MODES for v in values):
        raise argparse.ArgumentTypeError(f"modes are a comma-separated list of {', '.join(MODES)}")
    return values


# The fields of ledger-loadtest's --json report (client/loadtest_report.proto) that hold text.
# Every other string in it is an int64 count, which protobuf's JSON mapping prints as a string.
LOADTEST_TEXT_FIELDS = frozenset({"run_id", "interrupted", "verification", "address", "verdict",
                                  "note"})


def read_loadtest_report(path):
    """ledger-loadtest's --json_file report, with its int64 counts (strings in protobuf's JSON
    mapping, "codes": {"OK": "1200"}) turned back into ints, so that they add and compare."""
    def counts_as_ints(pairs):
        return {key: int(value) if isinstance(value, str) and key not in LOADTEST_TEXT_FIELDS
                else value for key, value in pairs}
    with open(path) as file:
        return json.load(file, object_pairs_hook=counts_as_ints)


def raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def ledgerd_scratch():
    """A new directory for a ledgerd's --ports_file (and log), removed when the script exits."""
    scratch = tempfile.mkdtemp(prefix="ledgerd-bench-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    return scratch


def wait_for_ports(process, ports_file, seconds_max=20):
    """(gRPC port, metrics port or None) from the JSON that ledgerd writes to its --ports_file
    once every listener is bound, never from its start-up line (prose for people). Raises
    RuntimeError when `process` exits first or `seconds_max` pass. ledgerd renames the file into
    place whole, so a file that is there is complete."""
    deadline = time.monotonic() + seconds_max
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with open(ports_file) as file:
                ports = json.load(file)
        except FileNotFoundError:
            ports = None
        if ports is not None and ports["pid"] == process.pid:  # taskset execs: the same PID.
            metrics = ports["metrics"]
            return (int(ports["grpc"].rpartition(":")[2]),
                    int(metrics.rpartition(":")[2]) if metrics else None)
        time.sleep(0.005)
    raise RuntimeError(f"ledgerd wrote no {ports_file} within {seconds_max} s"
                       + (f" (it exited with status {process.returncode})"
                          if process.poll() is not None else ""))


def start_ledgerd(build, durability, data_dir, shards, cpus="", extra_flags=()):
    """A fresh ledgerd on ephemeral loopback ports (`ledgerd init` first unless in memory),
    pinned to `cpus` if given, with `extra_flags` after the others; returns the process, its gRPC port and its metrics port once it
    is serving. Its output is drained in the background so that it never blocks."""
    ledgerd = os.path.join(build, "server", "ledgerd")
    if durability != "none":
        subprocess.run([ledgerd, "init", f"--data_dir={data_dir}"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ports_file = os.path.join(ledgerd_scratch(), "ports.json")
    process = subprocess.Popen(
        (["taskset", "-c", cpus] if cpus else []) +
        [ledgerd, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0", f"--shards={shards}",
         f"--durability={durability}", f"--data_dir={data_dir}", f"--ports_file={ports_file}",
         *extra_flags],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    threading.Thread(target=lambda: process.stdout.read(), daemon=True).start()
    try:
        port, metrics_port = wait_for_ports(process, ports_file)
    except RuntimeError:
        process.kill()
        raise
    return process, port, metrics_port


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """User plus system CPU seconds of a live process (all its threads), or None once it is
    gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime (fields 14, 15)
    except (OSError, IndexError, ValueError):
        return None


def rss_mb(pid):
    """VmRSS of `pid` in MB (2^20 bytes), or None once it has exited."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None
