#!/usr/bin/env python3
"""The journal's candidates side by side (issue 31, item 4), on the same entries: one entry per
group commit, G deposits of 48 bytes each, one entry in flight, synced before the next.

  log         a log file ledgerd writes itself (bench/log_bench.cc): zero-filled segments, one
              pwrite and one fdatasync per entry;
  log-odsync  the same, written through O_DSYNC;
  raft-1      libraft 0.15 with a single voter and its libuv I/O (bench/replication/raft_spike
              with one peer): the engine the cluster of issue 32 would use;
  rocksdb     today's journal: one RocksDB WriteBatch of G deposits, three records each (account,
              journal entry, request record), synced (bench/journal_bench.cc, baseline).

Each round runs every candidate at every G in turn, so that all see the same moments of a shared
disk; the table gives medians (min-max) of the rounds: operations/s, p99 of one group commit, and
CPU per operation (this process's user + system time over the operations; libraft's includes its
libuv loop and apply callback, RocksDB's the calling thread only, as google-benchmark counts it).
log also reports how long reading back and checking every entry took (recover_ms, page cache
warm) for the log it wrote.

Usage: bench/log_candidates.py [--build build/release] [--replication_build build/replication]
       [--groups 16,64,256,1024] [--rounds 3] [--seconds 3]
(make bench-log builds both and runs it.)
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile


def words(line):
    return dict(word.split("=", 1) for word in line.split() if "=" in word)


def run_log(build, directory, group, seconds, sync):
    output = subprocess.run([os.path.join(build, "bench", "ledger-log-bench"), "--dir", directory,
                             "--entry_ops", str(group), "--seconds", str(seconds), "--sync", sync],
                            check=True, capture_output=True, text=True).stdout
    result = words(next(line for line in output.splitlines() if line.startswith("result")))
    return {"ops_per_s": float(result["ops_per_s"]), "p99_us": float(result["p99_us"]),
            "cpu_us_per_op": float(result["cpu_us_per_op"]),
            "recover_ms": float(result["recover_ms"])}


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_raft(replication_build, directory, group, seconds):
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    port = free_port()
    # raft_spike prints its result and keeps running (its driver owns the process): read until
    # the result, then stop it.
    process = subprocess.Popen(
        [os.path.join(replication_build, "raft_spike"), "--id", "1", "--data", directory,
         "--bind", f"127.0.0.1:{port}", "--peers", f"1=127.0.0.1:{port}",
         "--entry-ops", str(group), "--window", "1", "--seconds", str(seconds),
         "--election-ms", "300", "--heartbeat-ms", "50"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = ""
        for line in process.stdout:
            if line.startswith("result"):
                break
    finally:
        process.kill()
        process.wait(30)
    if not line.startswith("result"):
        raise RuntimeError("raft_spike ended without a result")
    result = words(line)
    ops = float(result["ops_per_s"]) * float(result["seconds"])
    return {"ops_per_s": float(result["ops_per_s"]), "p99_us": float(result["p99_us"]),
            "cpu_us_per_op": float(result["cpu_ms"]) * 1000 / ops}


def run_rocksdb(build, group, seconds):
    output = subprocess.run(
        [os.path.join(build, "bench", "ledger-journal-bench"),
         f"--benchmark_filter=BM_GroupCommit/baseline/G:{group}/",
         f"--benchmark_min_time={seconds}", "--benchmark_format=json"],
        check=True, capture_output=True, text=True).stdout
    result = json.loads(output)["benchmarks"][0]
    return {"ops_per_s": result["deposits"], "p99_us": result["p99_us"],
            "cpu_us_per_op": result["cpu_time"] / group}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build/release")
    parser.add_argument("--replication_build", default="build/replication")
    parser.add_argument("--groups", default="16,64,256,1024")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=3)
    args = parser.parse_args()
    groups = [int(g) for g in args.groups.split(",")]
    scratch = tempfile.mkdtemp(prefix="log-candidates-", dir=os.environ.get("TMPDIR", "/var/tmp"))
    candidates = {
        "log": lambda g: run_log(args.build, os.path.join(scratch, "log"), g, args.seconds,
                                 "fdatasync"),
        "log-odsync": lambda g: run_log(args.build, os.path.join(scratch, "log"), g, args.seconds,
                                        "odsync"),
        "raft-1": lambda g: run_raft(args.replication_build, os.path.join(scratch, "raft"), g,
                                     args.seconds),
        "rocksdb": lambda g: run_rocksdb(args.build, g, args.seconds),
    }
    results = {(name, g): [] for name in candidates for g in groups}
    try:
        for round_number in range(args.rounds):
            for g in groups:
                for name, run in candidates.items():
                    results[(name, g)].append(run(g))
                    print(f"round {round_number + 1} G={g} {name}: {results[(name, g)][-1]}",
                          file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    def cell(values, digits=0):
        return (f"{statistics.median(values):,.{digits}f} "
                f"({min(values):,.{digits}f}–{max(values):,.{digits}f})")

    print(f"medians of {args.rounds} rounds (min–max), {args.seconds} s each")
    print("| G | candidate | operations/s | p99 of a group commit, µs | CPU µs per operation | "
          "× rocksdb ops/s |")
    print("|---|---|---|---|---|---|")
    for g in groups:
        baseline = statistics.median(r["ops_per_s"] for r in results[("rocksdb", g)])
        for name in candidates:
            runs = results[(name, g)]
            ratio = statistics.median(r["ops_per_s"] for r in runs) / baseline
            print(f"| {g} | {name} | {cell([r['ops_per_s'] for r in runs])} | "
                  f"{cell([r['p99_us'] for r in runs])} | "
                  f"{cell([r['cpu_us_per_op'] for r in runs], 2)} | {ratio:.2f} |")
    recover = [r["recover_ms"] for g in groups for r in results[("log", g)]]
    print(f"log: reading back and checking the whole log took {cell(recover, 1)} ms per run "
          "(64 MiB segments, page cache warm)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
