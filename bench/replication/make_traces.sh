#!/usr/bin/env bash
# Makes the traces run_shape.py replays: ledgerd's real log entries under unary and Apply load.
#
#   bench/replication/make_traces.sh RELEASE_BUILD OUT_DIR [SECONDS]
#
# For each load it starts a durable ledgerd (--durability=sync) on a fresh data directory, drives
# it with ledger-loadtest (unary Deposits at 64 in flight over 10,000 accounts; Apply calls of
# 1,000 Deposits at 8 in flight over 100,000 accounts) for SECONDS (4), kills it with SIGKILL so
# that no checkpoint drops the log behind it, and turns a copy of its log into OUT_DIR/unary.trace
# and OUT_DIR/apply.trace with ledger-log-trace (one record per group commit, whole and split by
# the 64 partitions). Prints the traces' shape: entries, operations and partitions per entry.
set -euo pipefail
build=$(cd "$1" && pwd)
out=$2
seconds=${3:-4}
mkdir -p "$out"
scratch=$(mktemp -d)
server=0
cleanup() {
  if [ "$server" != 0 ]; then kill -9 "$server" 2>/dev/null || true; fi
  rm -rf "$scratch"
}
trap cleanup EXIT

# trace NAME BATCH CONCURRENCY ACCOUNTS
trace() {
  local name=$1 batch=$2 concurrency=$3 accounts=$4
  local dir="$scratch/$name" port=$((47700 + RANDOM % 500))
  "$build/server/ledgerd" init --data_dir="$dir" >/dev/null
  "$build/server/ledgerd" --durability=sync --data_dir="$dir" --listen=127.0.0.1:$port \
    --metrics_listen= >"$scratch/$name.server.log" 2>&1 &
  server=$!
  for _ in $(seq 1 100); do
    if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then break; fi
    sleep 0.05
  done
  "$build/client/ledger-loadtest" --target=127.0.0.1:$port --concurrency="$concurrency" \
    --batch="$batch" --duration="${seconds}s" --warmup=1s --accounts="$accounts" \
    --mix=deposit=100 --verify=false >"$scratch/$name.load.log" 2>&1
  kill -9 "$server"
  wait "$server" 2>/dev/null || true
  server=0
  cp -r "$dir/ledger_log" "$scratch/$name.log"
  echo -n "$name: "
  "$build/bench/ledger-log-trace" --log_dir="$scratch/$name.log" --out="$out/$name.trace"
}

trace unary 1 64 10000
trace apply 1000 8 100000
