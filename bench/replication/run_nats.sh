#!/usr/bin/env bash
# Candidate (b) of issue 17 (docs/replication.md): ledgerd's journal as a NATS JetStream stream
# with three replicas. Builds nothing; expects build/replication/{nats_spike,delay_proxy}.
#
#   bash bench/replication/run_nats.sh            # about 3 minutes; prints a markdown report
#
# Three nats-server processes run in network namespaces lrep-r1..3 behind delay_proxy (0.5 ms each
# way, see netns.sh); the client runs in lrep-c. Everything started here is stopped by PID, and the
# namespaces removed, on any exit.
# Knobs (environment): DELAY_US (500), RUN_SECONDS (3), WARMUP_S (1), REPEATS (3; 0 skips the
# throughput runs), FAILOVERS (3 per placement), SKIP_STRACE (unset).
set -euo pipefail

readonly HERE="$(cd "$(dirname "$0")" && pwd)"
export LREP_BUILD="${LREP_BUILD:-$(cd "$HERE/../.." && pwd)/build/replication}"
export LREP_RUN_DIR="${LREP_RUN_DIR:-/tmp/lrep}"
readonly SPIKE="$LREP_BUILD/nats_spike"
readonly NATS_DIR="$LREP_RUN_DIR/nats"
readonly DELAY_US="${DELAY_US:-500}"
readonly RUN_SECONDS="${RUN_SECONDS:-3}" WARMUP_S="${WARMUP_S:-1}" REPEATS="${REPEATS:-3}"
readonly FAILOVERS="${FAILOVERS:-3}"
readonly CLIENT_PUBLIC=4222 CLIENT_LOCAL=14222 CLUSTER_PUBLIC=6222 CLUSTER_LOCAL=16222
readonly HTTP_LOCAL=8222
readonly SERVERS="nats://10.99.0.1:$CLIENT_PUBLIC,nats://10.99.0.2:$CLIENT_PUBLIC,nats://10.99.0.3:$CLIENT_PUBLIC"
readonly TICKS="$(getconf CLK_TCK)"

declare -A SERVER_PID=()  # replica index -> nats-server PID
declare -a EXTRA_PIDS=()  # background clients and tracers started here

log() { echo "[$(date +%T)] $*" >&2; }

# Installed once netns.sh up has succeeded: before that the namespaces may be another run's.
cleanup() {
  set +e
  for pid in "${EXTRA_PIDS[@]}"; do kill -9 "$pid" 2>/dev/null; done
  for i in "${!SERVER_PID[@]}"; do kill -9 "${SERVER_PID[$i]}" 2>/dev/null; done
  wait 2>/dev/null
  bash "$HERE/netns.sh" down >/dev/null 2>&1
}
trap 'exit 130' INT TERM

[[ -x "$SPIKE" && -x "$LREP_BUILD/delay_proxy" ]] || {
  echo "run_nats.sh: build first: cmake --build $LREP_BUILD" >&2
  exit 1
}

in_ns() { ip netns exec "$1" "${@:2}"; }
client() { in_ns lrep-c "$SPIKE" "$@"; }

# CPU seconds (user+system) a process has used so far, from /proc/PID/stat fields 14 and 15.
cpu_of() {
  awk -v t="$TICKS" '{ sub(/.*\) /, ""); printf "%.2f", ($12 + $13) / t }' "/proc/$1/stat" \
    2>/dev/null || echo 0
}
proxy_pids() { cat "$LREP_RUN_DIR"/proxy-*.pid 2>/dev/null; }
cpu_sum() {
  local total=0
  for pid in "$@"; do total="$(echo "$total + $(cpu_of "$pid")" | bc)"; done
  echo "$total"
}

start_server() {
  local i="$1"
  # Not through in_ns: a backgrounded shell function is a subshell, and $! would be its PID.
  ip netns exec "lrep-r$i" nats-server -c "$NATS_DIR/r$i.conf" -l "$NATS_DIR/r$i.log" &
  SERVER_PID[$i]=$!
  # `ip netns exec` execs the server, so $! is nats-server itself; make sure before we rely on it.
  sleep 0.2
  [[ "$(cat "/proc/${SERVER_PID[$i]}/comm" 2>/dev/null)" == nats-server ]] || {
    echo "run_nats.sh: PID ${SERVER_PID[$i]} is not nats-server" >&2
    return 1
  }
}

# JetStream is ready when every server's /healthz says so (it checks the meta group and streams).
wait_ready() {
  for _ in $(seq 1 300); do
    local ok=0
    for i in 1 2 3; do
      in_ns "lrep-r$i" curl -sf "http://127.0.0.1:$HTTP_LOCAL/healthz" >/dev/null 2>&1 &&
        ok=$((ok + 1))
    done
    [[ $ok -eq 3 ]] && return 0
    sleep 0.1
  done
  echo "run_nats.sh: JetStream not ready after 30 s" >&2
  return 1
}

meta_leader() {
  for i in 1 2 3; do
    in_ns "lrep-r$i" curl -sf "http://127.0.0.1:$HTTP_LOCAL/jsz" 2>/dev/null |
      jq -r '.meta_cluster.leader // empty' && return 0
  done
}

# --- setup --------------------------------------------------------------------------------------
log "namespaces and proxies (delay ${DELAY_US} us each way)"
bash "$HERE/netns.sh" up >&2 # Refuses while another run holds the namespaces.
trap cleanup EXIT
for i in 1 2 3; do
  bash "$HERE/netns.sh" proxy "$i" "$CLIENT_PUBLIC" "$CLIENT_LOCAL" "$DELAY_US" >/dev/null
  bash "$HERE/netns.sh" proxy "$i" "$CLUSTER_PUBLIC" "$CLUSTER_LOCAL" "$DELAY_US" >/dev/null
done

rm -rf "$NATS_DIR"
mkdir -p "$NATS_DIR"
for i in 1 2 3; do
  mkdir -p "$NATS_DIR/r$i"
  sed -e "s|@I@|$i|g" -e "s|@CLIENT_LOCAL@|$CLIENT_LOCAL|g" -e "s|@CLIENT_PUBLIC@|$CLIENT_PUBLIC|g" \
    -e "s|@CLUSTER_LOCAL@|$CLUSTER_LOCAL|g" -e "s|@CLUSTER_PUBLIC@|$CLUSTER_PUBLIC|g" \
    -e "s|@HTTP_LOCAL@|$HTTP_LOCAL|g" -e "s|@STORE_DIR@|$NATS_DIR/r$i|g" \
    "$HERE/nats-server.conf.in" >"$NATS_DIR/r$i.conf"
  start_server "$i"
done
log "servers r1..r3 = PIDs ${SERVER_PID[1]} ${SERVER_PID[2]} ${SERVER_PID[3]}"
wait_ready
client setup --servers "$SERVERS" >"$NATS_DIR/setup.txt"
log "$(cat "$NATS_DIR/setup.txt") meta_leader=$(meta_leader)"

echo "# nats_spike results ($(date -u +%FT%TZ))"
echo
echo "- nats-server $(nats-server --version | awk '{print $2}'), libnats $(pkg-config --modversion libnats 2>/dev/null || echo 3.4.1); $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "- stream LEDGER, subject ledger.journal, file storage, Replicas=3; one op = 48 B, an entry of K ops = one message of K*48 B"
echo "- network: netns + delay_proxy, ${DELAY_US} us each way (1 ms RTT client<->server and server<->server)"
echo "- data dirs: $NATS_DIR/r{1,2,3}: $(df -T "$NATS_DIR" | awk 'NR==2 {print $2 " on " $1}') mounted $(findmnt -no TARGET,OPTIONS --target "$NATS_DIR" | xargs)"
echo "- windows: ${WARMUP_S} s warm-up + ${RUN_SECONDS} s measured, ${REPEATS} repeats, medians"
echo

# --- throughput and latency ---------------------------------------------------------------------
if ((REPEATS > 0)); then
  echo "## Commit throughput and latency"
  echo
  echo "| W in flight | K ops/entry | client via | entry bytes | commits/s | ops/s | p50 commit us | p99 commit us | client CPU (cores) | servers CPU (cores, sum of 3) | proxies CPU (cores) |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  for w in 1 64; do
    for k in 1 16 256; do
      log "bench W=$w K=$k"
      s0="$(cpu_sum "${SERVER_PID[@]}")"
      p0="$(cpu_sum $(proxy_pids))"
      t0="$(date +%s.%N)"
      client bench --servers "$SERVERS" --window "$w" --ops "$k" --warmup-s "$WARMUP_S" \
        --seconds "$RUN_SECONDS" --repeats "$REPEATS" >"$NATS_DIR/bench-w$w-k$k.txt"
      t1="$(date +%s.%N)"
      s1="$(cpu_sum "${SERVER_PID[@]}")"
      p1="$(cpu_sum $(proxy_pids))"
      # Server and proxy CPU is over the whole invocation (warm-ups included), per wall second.
      scpu="$(echo "scale=2; ($s1 - $s0) / ($t1 - $t0)" | bc)"
      pcpu="$(echo "scale=2; ($p1 - $p0) / ($t1 - $t0)" | bc)"
      cat "$NATS_DIR/bench-w$w-k$k.txt" >&2
      grep '^median' "$NATS_DIR/bench-w$w-k$k.txt" | sed 's/[a-zA-Z0-9_]*=//g' |
        awk -v s="$scpu" -v p="$pcpu" -v via="$(sed -n 's/.*via=//p' "$NATS_DIR/bench-w$w-k$k.txt")" \
          '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $2, $3, via, $4, $5, $6, $7, $8, $9, s, p }'
    done
  done
  echo
  echo "<details><summary>per-repeat lines</summary>"
  echo
  echo '```'
  cat "$NATS_DIR"/bench-w*-k*.txt | grep '^repeat'
  echo '```'
  echo "</details>"
  echo
fi

# --- durability: what a server does on disk per acked message ----------------------------------
# strace every server during a short W=1, K=1 run and count the syscalls that write or sync.
if [[ -n "${SKIP_STRACE:-}" ]]; then
  echo "(SKIP_STRACE set: durability section skipped)"
elif command -v strace >/dev/null; then
  log "strace during a 2 s W=1 K=1 run"
  for i in 1 2 3; do
    strace -f -qq -e trace=fsync,fdatasync,sync_file_range,msync,syncfs,write,pwrite64,writev \
      -o "$NATS_DIR/strace-r$i.txt" -p "${SERVER_PID[$i]}" &
    EXTRA_PIDS+=($!)
  done
  sleep 1
  client bench --servers "$SERVERS" --window 1 --ops 1 --warmup-s 0 --seconds 2 --repeats 1 \
    >"$NATS_DIR/strace-bench.txt"
  sleep 0.5
  for pid in "${EXTRA_PIDS[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
  for pid in "${EXTRA_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  EXTRA_PIDS=()
  acks="$(awk '/^median/ { for (i = 1; i <= NF; i++) if ($i ~ /^commits_per_s=/) { sub(/.*=/, "", $i); print $i * 2 } }' "$NATS_DIR/strace-bench.txt")"
  leader="$(client info --servers "$SERVERS" | sed 's/.*leader=\([^ ]*\).*/\1/')"
  echo "## Durability per acked message (strace, 2 s W=1 K=1 run, ~${acks} acks; stream leader $leader)"
  echo
  echo "| server | fsync | fdatasync | sync_file_range/msync/syncfs | write | pwrite64 | writev | files written (fd -> path) |"
  echo "|---|---|---|---|---|---|---|---|"
  for i in 1 2 3; do
    f="$NATS_DIR/strace-r$i.txt"
    c() { grep -c "$1(" "$f" || true; }
    # Files (not sockets) the server wrote to, resolved through /proc while it is still running.
    files=""
    for fd in $(grep -oE '(write|pwrite64|fsync|fdatasync)\([0-9]+' "$f" | sed 's/.*(//' | sort -u); do
      p="$(readlink "/proc/${SERVER_PID[$i]}/fd/$fd" 2>/dev/null || true)"
      if [[ "$p" == /* ]]; then
        files+="fd $fd ${p#"$NATS_DIR/"}: $(grep -cE "(write|pwrite64)\($fd," "$f" || true) writes, $(grep -cE "(fsync|fdatasync)\($fd\)" "$f" || true) syncs; "
      fi
    done
    echo "| r$i | $(c fsync) | $(c fdatasync) | $(($(c sync_file_range) + $(c msync) + $(c syncfs))) | $(c write) | $(c pwrite64) | $(c writev) | $files |"
  done
  echo
  printf 'jetstream {\n  store_dir: "%s"\n  sync_interval: always\n}\n' "$NATS_DIR/t" >"$NATS_DIR/t.conf"
  echo "Per-write sync option: \`nats-server -t\` on a config with \`sync_interval: always\` says: $(nats-server -c "$NATS_DIR/t.conf" -t 2>&1 | grep -m1 . || true)"
  echo
else
  echo "(strace not installed: durability section skipped)"
fi

# --- failover -----------------------------------------------------------------------------------
# Two placements, because they are two different failures: the killed server leads only the
# stream's Raft group ("apart"), or it also leads the cluster-wide meta group ("together"), which
# must then elect its own leader too. The stream's leadership is moved with JetStream's step-down
# until the placement holds.
place_stream_leader() {
  local want="$1" leader meta
  for _ in $(seq 1 10); do
    leader="$(client info --servers "$SERVERS" | sed -n 's/.*leader=\(r[0-9]\).*/\1/p')"
    meta="$(meta_leader)"
    if [[ -n "$leader" && -n "$meta" ]] &&
      { [[ "$want" == together && "$leader" == "$meta" ]] ||
        [[ "$want" == apart && "$leader" != "$meta" ]]; }; then
      return 0
    fi
    client stepdown --servers "$SERVERS" >&2 || true
  done
  log "could not place the stream leader $want with the meta leader"
  return 1
}

echo "## Failover: kill -9 the stream leader during W=1 publishing"
echo
echo "| run | stream leader vs meta leader | killed (stream leader) | meta leader | client connected to | kill -> first ack ms | last ack before kill ms | new leader | publish timeouts | no responders | other errors | client disconnected/reconnected after kill ms |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
kill_file="$NATS_DIR/kill_ns"
for run in $(seq 1 "$FAILOVERS"); do
  for placement in apart together; do
    place_stream_leader "$placement" || continue
    rm -f "$kill_file"
    out="$NATS_DIR/failover-$placement-$run.txt"
    client failover --servers "$SERVERS" --kill-file "$kill_file" --pub-timeout-ms 250 >"$out" &
    fpid=$!
    EXTRA_PIDS+=("$fpid")
    for _ in $(seq 1 300); do
      grep -q '^leader=' "$out" && break
      sleep 0.1
    done
    victim="$(sed -n 's/^leader=r\([0-9]\).*/\1/p' "$out")"
    connected="$(sed -n 's/^leader=.* connected=\(.*\)/\1/p' "$out")"
    meta="$(meta_leader)"
    sleep 2  # steady publishing first
    log "failover $placement $run: kill -9 r$victim (PID ${SERVER_PID[$victim]}), meta leader $meta"
    "$SPIKE" kill "${SERVER_PID[$victim]}" "$kill_file" >&2
    wait "${SERVER_PID[$victim]}" 2>/dev/null || true
    wait "$fpid" || true
    EXTRA_PIDS=()
    cat "$out" >&2
    r="$(tail -1 "$out")"
    v() { echo "$r" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
    echo "| $run | $placement | r$victim | $meta | $connected | $(v kill_to_first_ack_ms) | $(v last_ack_before_to_kill_ms) | $(v new_leader) | $(v timeouts) | $(v no_responders) | $(v other_errors) | $(v disconnected_ms)/$(v reconnected_ms) |"
    # Bring the killed server back on its data dir so the next run starts from three replicas.
    start_server "$victim"
    wait_ready
  done
done
echo
for placement in apart together; do
  # No runs (FAILOVERS=0) is no line, not a failure.
  ms="$(cat "$NATS_DIR"/failover-$placement-*.txt 2>/dev/null | grep -o 'kill_to_first_ack_ms=[0-9.-]*' |
    sed 's/.*=//' | sort -n || true)"
  [[ -n "$ms" ]] || continue
  n="$(echo "$ms" | wc -l)"
  echo "- $placement: median kill -> first ack $(echo "$ms" | sed -n "$(((n + 1) / 2))p") ms over $n runs (each: $(echo $ms | tr ' ' ','))"
done
echo
echo "Client: js_Publish MaxWait 250 ms, 1 ms pause after a failed publish, reconnect wait 50 ms, no jitter, ping 250 ms x2."
echo
echo "## Server CPU over the whole run"
echo
for i in 1 2 3; do echo "- r$i (PID ${SERVER_PID[$i]}, since its last start): $(cpu_of "${SERVER_PID[$i]}") CPU s"; done
log "done"
