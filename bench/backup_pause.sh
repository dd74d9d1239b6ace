#!/bin/bash
# How much an online backup pauses writes (issue 31, item 6: at most 50 ms): unary Deposits at a
# fixed rate against a durable ledgerd over mutual TLS, with ledgerd pinned to CPU 0 and the load
# test and ledgerctl to CPU 1, in pairs of runs side by side: one without a backup, one with
# `ledgerctl backup` started every BACKUP_EVERY seconds (at nice 19: an open-loop client counts
# its own delays as latency, so the load test, which shares its core, must not be the one
# delayed). Compares the load test's p99, p99.9 and slowest call (which a write pause would show)
# and prints how long each step of each backup took (ledgerd's log).
#
#   bench/backup_pause.sh BUILD [ROUNDS] [SECONDS] [RATE] [BACKUP_EVERY]
#
# LEDGERD_FLAGS adds flags to ledgerd's command line; BACKUP_ROOT puts the backups elsewhere than
# the temporary directory (/dev/shm: no disk I/O of ledgerctl's own).
# Certificates are made with openssl in a temporary directory; the ledger is filled first by the
# warm-up so that the backup copies a real database.
set -euo pipefail
build=$1 rounds=${2:-3} seconds=${3:-12} rate=${4:-5000} every=${5:-3}
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT
cd "$dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj '/CN=bench CA' \
  -keyout ca.key -out ca.pem 2>/dev/null
cert() {
  echo "subjectAltName=$3" >"$1.ext"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$2" -keyout "$1.key" \
    -out "$1.csr" 2>/dev/null
  openssl x509 -req -days 2 -in "$1.csr" -CA ca.pem -CAkey ca.key -set_serial "$RANDOM" \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
}
cert server localhost "DNS:localhost,IP:127.0.0.1"
cert ops ops "DNS:ops"
cert load load "DNS:load"
cat >policy.json <<'JSON'
{"name": "bench", "allow_rules": [
  {"name": "health", "source": {"principals": ["*"]}, "request": {"paths": ["/grpc.health.v1.Health/*"]}},
  {"name": "load", "source": {"principals": ["load"]}, "request": {"paths": ["/ledger.v1.Ledger/*"]}},
  {"name": "ops", "source": {"principals": ["ops"]}, "request": {"paths": ["/ledger.v1.LedgerAdmin/Backup"]}}]}
JSON
client_tls=(--tls_ca_file=ca.pem)

one_run() {  # $1: "with" or "without"
  local port=$((47800 + RANDOM % 500))
  local backups=${BACKUP_ROOT:-$dir}/backups
  rm -rf data "$backups" && mkdir -p "$backups"
  "$build/server/ledgerd" init --data_dir=data >/dev/null
  taskset -c 0 "$build/server/ledgerd" --data_dir=data --listen=127.0.0.1:$port --metrics_listen= \
    --tls_cert_file=server.pem --tls_key_file=server.key --tls_client_ca_file=ca.pem \
    --authz_policy_file=policy.json ${LEDGERD_FLAGS:-} >server.log 2>&1 &
  local server=$!
  sleep 1
  taskset -c 1 "$build/client/ledger-loadtest" --target=127.0.0.1:$port "${client_tls[@]}" \
    --tls_cert_file=load.pem --tls_key_file=load.key --rate="$rate" --duration="${seconds}s" \
    --warmup=3s --accounts=100000 --mix=deposit=100 --verify=false --json_file=report.json \
    >load.log 2>&1 &
  local load=$!
  if [ "$1" = with ]; then
    sleep 3
    local n=0
    while kill -0 $load 2>/dev/null; do
      sleep "$every"
      kill -0 $load 2>/dev/null || break
      nice -n 19 taskset -c 1 "$build/client/ledgerctl" --target=127.0.0.1:$port "${client_tls[@]}" \
        --tls_cert_file=ops.pem --tls_key_file=ops.key backup --to="$backups/$n" >/dev/null
      n=$((n + 1))
    done
  fi
  wait $load
  kill $server
  wait $server 2>/dev/null || true
  python3 - "$1" <<'PY'
import json, re, sys
report = json.load(open("report.json"))
ok = report["latency_us"]["ok"]
steps = re.findall(r"bytes \((applier held .*)\)", open("server.log").read())
ms = lambda key: f"{ok.get(key, 0) / 1000:.2f}"
print(f"{sys.argv[1]:8s} backups {len(steps):2d}: {report['ok_per_second']:,.0f} OK/s, "
      f"p99 {ms('p99')} ms, p99.9 {ms('p999')} ms, max {ms('max')} ms")
for line in steps:
    print(f"    {line}")
PY
}

for round in $(seq 1 "$rounds"); do
  echo "round $round"
  one_run without
  # BACKUP_EVERY 0: the runs without backups only (to compare ledgerd flags, LEDGERD_FLAGS).
  [ "$every" = 0 ] || one_run with
done
