"""Small pieces the benchmark scripts share: the --durability modes, logging, argument parsing of
mode lists, rotation of run order across rounds, starting a fresh ledgerd, and turning SIGTERM into KeyboardInterrupt so
that every script cleans up its processes the same way."""
import argparse
import json
import os
import re
import subprocess
import sys
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
LOADTEST_TEXT_FIELDS = frozenset({"run_id", "interrupted", "verification"})


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


def start_ledgerd(build, durability, data_dir, shards, cpus=""):
    """A fresh ledgerd on ephemeral loopback ports (`ledgerd init` first unless in memory),
    pinned to `cpus` if given; returns the process, its gRPC port and its metrics port once it
    is serving. Its output is drained in the background so that it never blocks."""
    ledgerd = os.path.join(build, "server", "ledgerd")
    if durability != "none":
        subprocess.run([ledgerd, "init", f"--data_dir={data_dir}"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    process = subprocess.Popen(
        (["taskset", "-c", cpus] if cpus else []) +
        [ledgerd, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0", f"--shards={shards}",
         f"--durability={durability}", f"--data_dir={data_dir}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = ""
    deadline = time.time() + 20
    while "overdraft limit" not in output and time.time() < deadline:
        output += process.stdout.readline()
    port = int(re.search(r"listening on 127\.0\.0\.1:(\d+)", output).group(1))
    metrics_port = int(re.search(r"metrics on http://127\.0\.0\.1:(\d+)", output).group(1))
    threading.Thread(target=lambda: process.stdout.read(), daemon=True).start()
    return process, port, metrics_port
