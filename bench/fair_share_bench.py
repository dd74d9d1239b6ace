#!/usr/bin/env python3
"""Fair-share benchmark (issue 30, goal 2): a polite client beside a greedy one.

One ledgerd (durable, sync, 2 shards, mutual TLS) on --server_cpus; the clients on
--client_cpus. Each round, on a fresh ledgerd:
  1. capacity: ledger-loadtest closed loop alone (64 calls in flight, 4 connections), OK calls/s;
  2. polite alone: open loop at --polite_share (0.3) of that capacity, one connection;
  3. polite beside greedy: the same polite load while a greedy client runs with 8 connections,
     2,000 calls in flight and no retries (it ignores pushback: the next call at once).
Both clients call from 127.0.0.1: only their certificates (CN polite, CN greedy) tell them
apart, as the mutual-TLS identity is ledgerd's notion of a client when TLS is on.
What the polite client gets: OK calls/s over the rate it asked, and its OK p99. With --baseline
BUILD the same rounds also run against another build's ledgerd (say, one without fair shares),
interleaved, so that the two are compared side by side on the same machine state.

On a 2-core machine both clients share one core, which separate client machines would not: the
greedy client's 2,000-call TLS loop then takes the polite client's CPU, and the polite client
cannot send its calls on time (NOT_SENT(late)), whatever the server does. --greedy_nice lists
the nice values the greedy client runs at, each measured in every round (default "0,19": as
before, and yielding the shared core to the polite client whenever it has work, which is closer
to two machines; the server sees the same flood either way).

Usage: bench/fair_share_bench.py [--build build/release] [--baseline /path/to/other/build]
       [--rounds 3] [--seconds 10] [--greedy_nice 0,19] [-- LEDGERD_FLAGS...]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading

from bench_util import ledgerd_scratch, log, read_loadtest_report, wait_for_ports


def make_pki(directory):
    def run(command):
        subprocess.run(command, shell=True, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, cwd=directory)
    run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
        "-subj '/CN=bench CA' -keyout ca.key -out ca.pem")
    for name, sans in (("server", "DNS:localhost,IP:127.0.0.1"), ("polite", "DNS:polite"),
                       ("greedy", "DNS:greedy")):
        with open(os.path.join(directory, name + ".ext"), "w") as ext:
            ext.write(f"subjectAltName={sans}\n")
        cn = "localhost" if name == "server" else name
        run(f"openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj '/CN={cn}' "
            f"-keyout {name}.key -out {name}.csr")
        run(f"openssl x509 -req -days 2 -in {name}.csr -CA ca.pem -CAkey ca.key -set_serial 1 "
            f"-extfile {name}.ext -out {name}.pem")


def start_ledgerd(build, pki, cpus, extra_flags):
    ledgerd = os.path.join(build, "server", "ledgerd")
    scratch = ledgerd_scratch()
    data_dir = os.path.join(scratch, "data")
    subprocess.run([ledgerd, "init", f"--data_dir={data_dir}"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ports_file = os.path.join(scratch, "ports.json")
    process = subprocess.Popen(
        ["taskset", "-c", cpus, ledgerd, "--listen=127.0.0.1:0", "--metrics_listen=",
         f"--data_dir={data_dir}", f"--ports_file={ports_file}",
         f"--tls_cert_file={pki}/server.pem", f"--tls_key_file={pki}/server.key",
         f"--tls_client_ca_file={pki}/ca.pem"] + extra_flags,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    threading.Thread(target=lambda: process.stdout.read(), daemon=True).start()
    port, _ = wait_for_ports(process, ports_file)
    return process, port


def loadtest(build, pki, identity, port, cpus, seconds, extra, nice=0):
    report = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
    command = ["nice", "-n", str(nice), "taskset", "-c", cpus, os.path.join(build, "client", "ledger-loadtest"),
               f"--target=127.0.0.1:{port}", f"--duration={seconds}s", "--warmup=1s",
               "--accounts=10000", f"--tls_ca_file={pki}/ca.pem",
               f"--tls_cert_file={pki}/{identity}.pem", f"--tls_key_file={pki}/{identity}.key",
               "--tls_server_name=localhost", f"--json_file={report}"] + extra
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True), report


def finish(process, report):
    _, errors = process.communicate(timeout=300)
    result = read_loadtest_report(report)
    os.unlink(report)
    if result.get("verification") not in ("PASS", "SKIPPED"):
        raise RuntimeError(f"verification {result.get('verification')}: {errors[-2000:]}")
    return result


def one_round(build, pki, args, greedy_nice):
    server, port = start_ledgerd(build, pki, args.server_cpus, args.ledgerd_flags)
    try:
        closed = ["--concurrency=64", "--channels=4"]
        capacity = finish(*loadtest(build, pki, "polite", port, args.client_cpus, args.seconds,
                                    closed))["ok_per_second"]
        rate = round(capacity * args.polite_share)
        polite_flags = [f"--rate={rate}", "--channels=1", "--mix=deposit=100"]
        alone = finish(*loadtest(build, pki, "polite", port, args.client_cpus, args.seconds,
                                 polite_flags))
        greedy = loadtest(build, pki, "greedy", port, args.client_cpus, args.seconds + 4,
                          ["--channels=8", "--concurrency=2000", "--max_retries=0",
                           "--mix=deposit=100"], nice=greedy_nice)
        beside = finish(*loadtest(build, pki, "polite", port, args.client_cpus, args.seconds,
                                  polite_flags))
        greedy_report = finish(*greedy)
    finally:
        server.terminate()
        server.wait(timeout=60)

    def served(report):
        return report["ok_per_second"] / rate

    return {
        "capacity": capacity, "rate": rate,
        "alone_ratio": served(alone), "alone_p99_ms": alone["latency_us"]["ok"]["p99"] / 1000,
        "beside_ratio": served(beside),
        "beside_p99_ms": beside["latency_us"]["ok"]["p99"] / 1000,
        "beside_refused": beside["codes"].get("RESOURCE_EXHAUSTED", 0),
        # Calls the polite client itself could not send on time (its CPU, shared with greedy).
        "beside_not_sent_late": beside.get("not_sent_late", 0),
        "greedy_ok_per_second": greedy_report["ok_per_second"],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build/release")
    parser.add_argument("--baseline", help="another build directory, measured alongside")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--polite_share", type=float, default=0.3)
    parser.add_argument("--server_cpus", default="0")
    parser.add_argument("--client_cpus", default="1")
    parser.add_argument("--greedy_nice", default="0,19")
    parser.add_argument("ledgerd_flags", nargs="*", help="more ledgerd flags (after --)")
    args = parser.parse_args()
    pki = tempfile.mkdtemp(prefix="fair-share-pki-")
    make_pki(pki)
    builds = [("this build", args.build)] + ([("baseline", args.baseline)] if args.baseline else [])
    builds = [(f"{name}, greedy nice {nice}", build, int(nice))
              for name, build in builds for nice in args.greedy_nice.split(",")]
    results = {name: [] for name, _, _ in builds}
    for round_number in range(args.rounds):
        for name, build, nice in builds:
            log(f"round {round_number + 1}/{args.rounds}: {name}")
            results[name].append(one_round(build, pki, args, nice))
            log(f"  {results[name][-1]}")
    keys = ["capacity", "rate", "alone_ratio", "alone_p99_ms", "beside_ratio", "beside_p99_ms",
            "beside_refused", "beside_not_sent_late", "greedy_ok_per_second"]
    print(f"medians of {args.rounds} rounds (min-max)")
    print("| build | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for name, _, _ in builds:
        cells = []
        for key in keys:
            values = [r[key] for r in results[name]]
            cells.append(f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})")
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
