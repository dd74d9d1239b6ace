#!/bin/bash
# Two ledgerd builds side by side (issue 13's "old against new"): alternates them ROUNDS times at
# each concurrency, --durability=sync on a fresh `ledgerd init` directory each run, the same
# ledger-loadtest (Deposits with request_ids over 10,000 accounts, 4 s after 1 s of warm-up),
# and prints calls/s, p99 and ledgerd's CPU time per call (user+system from /proc/PID/stat over
# the load test, divided by the calls answered OK).
#
# Usage: bench/compare_ledgerd.sh OLD_BUILD_DIR NEW_BUILD_DIR [ROUNDS] [CONCURRENCIES...]
#   e.g. git worktree add /tmp/old 2748295 && cmake -S /tmp/old -B /tmp/old/build -G Ninja \
#        -DCMAKE_BUILD_TYPE=Release && cmake --build /tmp/old/build --target ledgerd
#        bench/compare_ledgerd.sh /tmp/old/build build/release 3 16 64 256
set -euo pipefail
old=$1 new=$2 rounds=${3:-3}
shift $(($# < 3 ? $# : 3))
concurrencies=("${@:-16 64 256}")
loadtest=$new/client/ledger-loadtest
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

run() {  # build label concurrency
  local build=$1 label=$2 concurrency=$3 dir=$scratch/data
  rm -rf "$dir" && "$build/server/ledgerd" init --data_dir="$dir" >/dev/null
  "$build/server/ledgerd" --listen=127.0.0.1:0 --metrics_listen= --durability=sync \
    --data_dir="$dir" >"$scratch/log" 2>&1 &
  local pid=$! port=""
  for _ in $(seq 100); do
    port=$(grep -oP 'listening on 127\.0\.0\.1:\K[0-9]+' "$scratch/log" || true)
    [ -n "$port" ] && break
    sleep 0.1
  done
  local before after
  before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  "$loadtest" --target="127.0.0.1:$port" --mix=deposit=100 --accounts=10000 \
    --concurrency="$concurrency" --duration=4s --warmup=1s --json_file="$scratch/report.json" \
    >/dev/null 2>&1
  after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  kill "$pid" && wait "$pid" || true
  python3 - "$scratch/report.json" "$label" "$concurrency" "$before" "$after" \
    "$(getconf CLK_TCK)" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
label, concurrency, before, after, ticks = sys.argv[2:7]
rate = report["ok_per_second"]
# The CPU window covers warm-up too: count its calls at the measured rate.
calls = rate * 5
cpu_us = (float(after) - float(before)) / float(ticks) * 1e6 / calls
print(f"{label} c={concurrency}: {rate:,.0f} calls/s, p99 "
      f"{report['latency_us']['ok']['p99'] / 1000:.2f} ms, {cpu_us:.0f} us CPU per call")
PY
}

for round in $(seq "$rounds"); do
  for concurrency in ${concurrencies[@]}; do
    run "$old" old "$concurrency"
    run "$new" new "$concurrency"
  done
done
