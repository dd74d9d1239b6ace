#!/bin/bash
# ledgerd's CPU per call, with ledgerd pinned to CPU 0 and ledger-loadtest to CPU 1, for one
# --durability mode of one build: what issue 31's goal table compares between modes and builds.
#
#   bench/cpu_per_call.sh BUILD MODE [CONCURRENCY] [SECONDS] [BATCH]
#
# BUILD is a CMake build tree (build/release), MODE sync, async or none. BATCH > 1 sends Apply
# calls of that many Deposits (over 100,000 accounts) instead of unary Deposits (over 10,000).
# Prints calls/s and operations/s as the load client measured them and ledgerd's CPU (user +
# system, from /proc) per call and per operation over the measured window: sampled after the
# warm-up and before verification, which is off. To compare two revisions side by side, build
# the other one in a worktree (git worktree add /tmp/old REV; cmake -S /tmp/old -B
# /tmp/old/build -G Ninja -DCMAKE_BUILD_TYPE=Release; cmake --build /tmp/old/build --target
# ledgerd ledger-loadtest) and alternate the two in one loop.
set -euo pipefail
build=$1 mode=$2 concurrency=${3:-64} seconds=${4:-8} batch=${5:-1}
accounts=10000
[ "$batch" -gt 1 ] && accounts=100000
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
port=$((47200 + RANDOM % 500))
"$build/server/ledgerd" init --data_dir="$dir/d" >/dev/null
taskset -c 0 "$build/server/ledgerd" --durability="$mode" --data_dir="$dir/d" \
  --listen=127.0.0.1:$port --metrics_listen= >"$dir/server.log" 2>&1 &
server=$!
sleep 1
taskset -c 1 "$build/client/ledger-loadtest" --target=127.0.0.1:$port \
  --concurrency="$concurrency" --batch="$batch" --duration="${seconds}s" --warmup=2s \
  --accounts=$accounts --mix=deposit=100 --verify=false >"$dir/load.log" 2>&1 &
load=$!
sleep 2.5
ticks_before=$(awk '{print $14 + $15}' /proc/$server/stat)
start=$(date +%s.%N)
sleep $((seconds - 1))
ticks_after=$(awk '{print $14 + $15}' /proc/$server/stat)
end=$(date +%s.%N)
wait $load
kill $server
wait $server 2>/dev/null || true
rate=$(grep -m1 -oE '[0-9]+ OK/s' "$dir/load.log" | grep -oE '[0-9]+')
python3 - "$mode" "$concurrency" "$batch" "$rate" "$ticks_before" "$ticks_after" "$start" "$end" \
  "$(getconf CLK_TCK)" <<'PY'
import sys
mode, concurrency, batch, rate, t0, t1, s0, s1, hz = sys.argv[1:]
cpu = (float(t1) - float(t0)) / float(hz)
seconds = float(s1) - float(s0)
calls = float(rate)
ops = calls * int(batch)
print(f"{mode} concurrency {concurrency} batch {batch}: {calls:,.0f} calls/s, {ops:,.0f} ops/s, "
      f"ledgerd {cpu / seconds * 100:.0f}% of a core, {cpu / seconds / calls * 1e6:.1f} us per call, "
      f"{cpu / seconds / ops * 1e6:.2f} us per operation")
PY
