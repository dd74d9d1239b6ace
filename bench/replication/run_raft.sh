#!/usr/bin/env bash
# Measures candidate (a) of issue 17, Raft in-process with libraft 0.15, on three replicas in
# network namespaces (netns.sh) with a 1 ms round trip between them (delay_proxy, 0.5 ms each
# way). Prints a markdown report on stdout; progress goes to stderr.
#
#   bench/replication/run_raft.sh            # as root (namespaces); about 2-3 minutes
#
# What it runs, each on a fresh three-replica cluster (empty data dirs, bootstrapped):
#   1. throughput/latency: entry sizes K = 1, 16, 256 ops (48 B each) x window W = 1, 64,
#      REPEATS times each; the leader warms up, then measures for RUN_SECONDS.
#   2. failover: the leader proposes continuously (K=16, W=1); we kill -9 it and time from the
#      kill to the first entry committed by the new leader, for three timeout settings.
#   0. before both: the round trip through a relay and the disk's sync time (probe.py).
#   3. syscalls: one short run under strace, to show what libraft does per append.
# Environment knobs: LREP_BUILD (binaries), LREP_RUN_DIR (data dirs and logs, default /tmp/lrep),
# REPEATS (3), RUN_SECONDS (3), WARMUP_MS (1000), DELAY_US (500), FAILOVERS (3),
# SNAPSHOT_THRESHOLD (1024, libraft's default: entries between snapshots), SKIP_STRACE (unset).
set -euo pipefail

readonly HERE="$(cd "$(dirname "$0")" && pwd)"
readonly BUILD="${LREP_BUILD:-$(cd "$HERE/../.." && pwd)/build/replication}"
export LREP_RUN_DIR="${LREP_RUN_DIR:-/tmp/lrep}" # netns.sh keeps the proxies' PID files here too.
readonly DATA_ROOT="$LREP_RUN_DIR"
# Kept per invocation (they are small), so that a report's raw logs outlive the next run.
readonly LOGS="$DATA_ROOT/raft-logs-$(date -u +%Y%m%dT%H%M%SZ)"
readonly REPEATS="${REPEATS:-3}"
readonly RUN_SECONDS="${RUN_SECONDS:-3}"
readonly WARMUP_MS="${WARMUP_MS:-1000}"
readonly DELAY_US="${DELAY_US:-500}"
readonly FAILOVERS="${FAILOVERS:-3}"
readonly SNAPSHOT_THRESHOLD="${SNAPSHOT_THRESHOLD:-1024}"
readonly PUBLIC_PORTS=(0 7101 7102 7103) # Index = replica id; what peers dial (the proxy).
readonly LOCAL_PORTS=(0 9101 9102 9103)  # What raft_spike binds on 127.0.0.1.
readonly PEERS="1=10.99.0.1:7101,2=10.99.0.2:7102,3=10.99.0.3:7103"
export LREP_BUILD="$BUILD"

REPLICA_PIDS=(0 0 0 0)
PROXY_PIDS=()

log() { echo "[run_raft $(date +%T)] $*" >&2; }

now_ns() { echo "${EPOCHREALTIME/./}000"; }

kill_replicas() {
  for i in 1 2 3; do
    local pid="${REPLICA_PIDS[$i]}"
    if [[ "$pid" != 0 ]]; then
      kill -9 "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
      REPLICA_PIDS[$i]=0
    fi
  done
}

# Installed once netns.sh up has succeeded: before that the namespaces may be another run's.
cleanup() {
  local status=$?
  kill_replicas
  bash "$HERE/netns.sh" down >/dev/null 2>&1 || true
  exit "$status"
}
trap 'exit 130' INT TERM

# start_cluster TAG FLAGS... : fresh data dirs, three replicas, each in its own namespace. With
# STRACE_SYSCALLS set, each replica runs under `strace -e trace=$STRACE_SYSCALLS` writing
# $LOGS/strace.rN.txt, and REPLICA_PIDS holds strace's PID (the replica is its child).
start_cluster() {
  local tag="$1"
  shift
  local tracer=()
  for i in 1 2 3; do
    rm -rf "$DATA_ROOT/raft-r$i"
    mkdir -p "$DATA_ROOT/raft-r$i"
    if [[ -n "${STRACE_SYSCALLS:-}" ]]; then
      tracer=(strace -f -qq -o "$LOGS/strace.r$i.txt" -e "trace=$STRACE_SYSCALLS")
    fi
    # `ip netns exec` execs the program, so $! is its own PID.
    ip netns exec "lrep-r$i" "${tracer[@]}" "$BUILD/raft_spike" --id "$i" \
      --data "$DATA_ROOT/raft-r$i" --bind "127.0.0.1:${LOCAL_PORTS[$i]}" --peers "$PEERS" \
      --snapshot-threshold "$SNAPSHOT_THRESHOLD" "$@" >"$LOGS/$tag.r$i.log" 2>&1 &
    REPLICA_PIDS[$i]=$!
  done
}

# wait_for SECONDS PATTERN FILE... : poll until a file has a line matching PATTERN.
wait_for() {
  local deadline=$((SECONDS + $1)) pattern="$2"
  shift 2
  until grep -qE "$pattern" "$@" 2>/dev/null; do
    if ((SECONDS >= deadline)); then return 1; fi
    if [[ ! -e /run/netns/lrep-r1 ]]; then
      # Someone else's netns.sh up/down: their namespaces now, so no `down` from us.
      echo "run_raft.sh: the lrep namespaces vanished mid-run (another netns.sh down?)" >&2
      kill_replicas
      trap - EXIT
      exit 1
    fi
    sleep 0.02
  done
}

# CPU ticks (utime + stime, 1/CLK_TCK s) of the given PIDs, summed.
cpu_ticks() {
  local total=0 pid stat f
  for pid in "$@"; do
    stat="$(cat "/proc/$pid/stat" 2>/dev/null)" || continue
    read -r -a f <<<"${stat##*) }" # Fields from 3 (state) on: utime is f[11], stime f[12].
    total=$((total + f[11] + f[12]))
  done
  echo "$total"
}

# One throughput/latency run: prints a TSV row to $LOGS/runs.tsv.
measure() {
  local k="$1" w="$2" rep="$3" tag="m-k$1-w$2-$3"
  start_cluster "$tag" --entry-ops "$k" --window "$w" --seconds "$RUN_SECONDS" \
    --warmup-ms "$WARMUP_MS"
  local logs=("$LOGS/$tag".r{1,2,3}.log) # Listed, not globbed: they may not exist yet.
  if ! wait_for 20 '^measure_start' "${logs[@]}"; then
    log "$tag: no leader started measuring"
    kill_replicas
    return 0
  fi
  local t0 r0 p0 t1 r1 p1
  t0="$(now_ns)"
  r0="$(cpu_ticks "${REPLICA_PIDS[@]:1}")"
  p0="$(cpu_ticks "${PROXY_PIDS[@]}")"
  if ! wait_for $((RUN_SECONDS + 15)) '^result' "${logs[@]}"; then
    log "$tag: no result (leadership lost?)"
    kill_replicas
    return 0
  fi
  t1="$(now_ns)"
  r1="$(cpu_ticks "${REPLICA_PIDS[@]:1}")"
  p1="$(cpu_ticks "${PROXY_PIDS[@]}")"
  local result
  result="$(grep -h '^result' "${logs[@]}" | head -1)"
  kill_replicas
  # CPU in % of one core over the measured window (2 cores = 200 %).
  local wall_ms=$(((t1 - t0) / 1000000))
  local hz
  hz="$(getconf CLK_TCK)"
  local replica_pct=$(((r1 - r0) * 1000 * 100 / hz / wall_ms))
  local proxy_pct=$(((p1 - p0) * 1000 * 100 / hz / wall_ms))
  log "$tag: $result replicas_cpu=${replica_pct}% proxies_cpu=${proxy_pct}%"
  printf '%s\t%s\t%s\t%s\treplicas_cpu_pct=%s proxies_cpu_pct=%s\n' "$k" "$w" "$rep" "$result" \
    "$replica_pct" "$proxy_pct" >>"$LOGS/runs.tsv"
}

# One failover: kill -9 the leader while it proposes; time to the new leader's first commit.
failover() {
  local election="$1" heartbeat="$2" pre_vote="$3" rep="$4" tag="f-e$1-h$2-pv$3-$4"
  start_cluster "$tag" --entry-ops 16 --window 1 --seconds 0 --election-ms "$election" \
    --heartbeat-ms "$heartbeat" --pre-vote "$pre_vote"
  local logs=("$LOGS/$tag".r{1,2,3}.log) # Listed, not globbed: they may not exist yet.
  if ! wait_for 20 '^first_commit' "${logs[@]}"; then
    log "$tag: no first leader"
    kill_replicas
    return 0
  fi
  sleep 1.5 # Steady state: followers have heard heartbeats and entries for a while.
  local leader
  leader="$(grep -h '^leader' "${logs[@]}" | tail -1 | sed -E 's/.*id=([0-9]+).*/\1/')"
  local survivors=() lines=() i
  for i in 1 2 3; do
    if [[ "$i" != "$leader" ]]; then
      survivors+=("$i")
      lines+=("$(wc -l <"$LOGS/$tag.r$i.log")")
    fi
  done
  local kill_ns
  kill_ns="$(now_ns)"
  kill -9 "${REPLICA_PIDS[$leader]}"
  wait "${REPLICA_PIDS[$leader]}" 2>/dev/null || true
  REPLICA_PIDS[$leader]=0
  # Only lines written after the kill count (a survivor may have led before).
  local deadline=$((SECONDS + 20)) new_leader="" commit_line="" leader_line=""
  while [[ -z "$commit_line" ]] && ((SECONDS < deadline)); do
    for j in 0 1; do
      local f="$LOGS/$tag.r${survivors[$j]}.log"
      commit_line="$(tail -n +"$((lines[j] + 1))" "$f" | grep '^first_commit' | head -1 || true)"
      if [[ -n "$commit_line" ]]; then
        new_leader="${survivors[$j]}"
        leader_line="$(tail -n +"$((lines[j] + 1))" "$f" | grep '^leader' | head -1 || true)"
        break
      fi
    done
    sleep 0.02
  done
  kill_replicas
  if [[ -z "$commit_line" ]]; then
    log "$tag: no new leader committed within 20 s"
    return 0
  fi
  local commit_ns elected_ns
  commit_ns="$(sed -E 's/.*realtime_ns=([0-9]+).*/\1/' <<<"$commit_line")"
  elected_ns="$(sed -E 's/.*realtime_ns=([0-9]+).*/\1/' <<<"$leader_line")"
  local to_commit_ms to_elected_ms
  to_commit_ms="$(awk -v a="$commit_ns" -v b="$kill_ns" 'BEGIN { printf "%.1f", (a - b) / 1e6 }')"
  to_elected_ms="$(awk -v a="$elected_ns" -v b="$kill_ns" 'BEGIN { printf "%.1f", (a - b) / 1e6 }')"
  log "$tag: killed r$leader, r$new_leader elected after ${to_elected_ms} ms, first commit after ${to_commit_ms} ms"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$election" "$heartbeat" "$pre_vote" "$rep" \
    "$leader" "$new_leader" "$to_elected_ms" "$to_commit_ms" >>"$LOGS/failovers.tsv"
}

# A short run with every replica under strace: which syscalls make an append durable.
strace_run() {
  local tag="strace" i
  STRACE_SYSCALLS=fsync,fdatasync,io_submit,io_getevents,pwrite64,pwritev,pwritev2,sync_file_range,openat,fallocate,fcntl \
    start_cluster "$tag" --entry-ops 16 --window 1 --seconds 2 --warmup-ms 500
  local logs=("$LOGS/$tag".r{1,2,3}.log) # Listed, not globbed: they may not exist yet.
  wait_for 30 '^result' "${logs[@]}" || log "strace: no result"
  # End each replica (strace's child, by PID) so strace sees it exit and flushes its output.
  for i in 1 2 3; do
    pkill -TERM -P "${REPLICA_PIDS[$i]}" 2>/dev/null || true
  done
  sleep 0.5
  kill_replicas
  local f leader
  f="$(grep -l '^result' "${logs[@]}" | head -1 || true)"
  [[ -n "$f" ]] || return 0
  leader="$(sed -E 's/.*\.r([0-9])\.log/\1/' <<<"$f")"
  local entries
  entries="$(grep -h '^result' "$f" | sed -E 's/.*fsm_entries=([0-9]+).*/\1/')"
  {
    echo "leader=r$leader fsm_entries_applied_on_leader=$entries (whole run incl. warm-up)"
    for i in 1 2 3; do
      local t="$LOGS/strace.r$i.txt"
      echo "r$i: io_submit=$(grep -c 'io_submit(' "$t" || true)" \
        "io_submit_RWF_NOWAIT=$(grep -c 'io_submit(.*RWF_NOWAIT' "$t" || true)" \
        "segments_opened_O_DSYNC=$(grep -c 'openat(.*/open-[0-9]*".*O_DSYNC' "$t" || true)" \
        "fcntl_O_DIRECT=$(grep -c 'fcntl(.*O_DIRECT' "$t" || true)" \
        "fallocate_8MiB=$(grep -c 'fallocate(.*, 8388608)' "$t" || true)" \
        "EAGAIN_fallbacks=$(grep -c 'res=-11' "$t" || true)" \
        "fsync=$(grep -c 'fsync(' "$t" || true) fdatasync=$(grep -c 'fdatasync(' "$t" || true)" \
        "pwrite64=$(grep -c 'pwrite64(' "$t" || true)" \
        "iov_lens=$(grep -o 'iov_len=[0-9]*' "$t" | sort | uniq -c | sort -rn | head -3 |
          awk '{printf "%s:%s ", $2, $1}')"
    done
  } >"$LOGS/strace_summary.txt"
  log "strace: $(tr '\n' ';' <"$LOGS/strace_summary.txt")"
}

# The round trip through a relay (client namespace -> replica 1) and the disk's small-write sync
# time, measured now, beside the figures that depend on them.
probe() {
  local echo_pid proxy_pid
  ip netns exec lrep-r1 python3 "$HERE/probe.py" echo 9199 &
  echo_pid=$!
  proxy_pid="$(bash "$HERE/netns.sh" proxy 1 7199 9199 "$DELAY_US")"
  ip netns exec lrep-c python3 "$HERE/probe.py" rtt 10.99.0.1 7199 >"$LOGS/probe.txt" || true
  kill "$echo_pid" "$proxy_pid" 2>/dev/null || true
  wait "$echo_pid" 2>/dev/null || true
  python3 "$HERE/probe.py" fsync "$DATA_ROOT" >>"$LOGS/probe.txt" || true
  log "probe: $(tr '\n' ' ' <"$LOGS/probe.txt")"
}

main() {
  [[ "$(id -u)" == 0 ]] || { echo "run_raft.sh: needs root (network namespaces)" >&2; exit 1; }
  [[ -x "$BUILD/raft_spike" && -x "$BUILD/delay_proxy" ]] ||
    { echo "run_raft.sh: build first: cmake --build $BUILD" >&2; exit 1; }
  mkdir -p "$DATA_ROOT"
  rm -rf "$LOGS"
  mkdir -p "$LOGS"
  : >"$LOGS/runs.tsv"
  : >"$LOGS/failovers.tsv"

  bash "$HERE/netns.sh" up >&2 # Refuses while another run holds the namespaces.
  trap cleanup EXIT
  for i in 1 2 3; do
    PROXY_PIDS+=("$(bash "$HERE/netns.sh" proxy "$i" "${PUBLIC_PORTS[$i]}" "${LOCAL_PORTS[$i]}" \
      "$DELAY_US")")
  done
  log "proxies ${PROXY_PIDS[*]} (delay ${DELAY_US} us each way)"
  probe

  local started=$SECONDS k w rep
  for rep in $(seq 1 "$REPEATS"); do
    for k in 1 16 256; do
      for w in 1 64; do
        measure "$k" "$w" "$rep"
      done
    done
  done
  for rep in $(seq 1 "$FAILOVERS"); do
    failover 1000 100 0 "$rep" # libraft's defaults
    failover 300 50 0 "$rep"
    failover 300 50 1 "$rep" # with pre-vote, as the design proposes
  done
  if [[ -z "${SKIP_STRACE:-}" ]] && command -v strace >/dev/null; then strace_run; fi
  log "done in $((SECONDS - started)) s"

  report
}

# The markdown report: medians over repeats.
report() {
  local fs
  fs="$(df -T "$DATA_ROOT" | awk 'NR == 2 { print $2 " on " $1 }')"
  python3 - "$LOGS/runs.tsv" "$LOGS/failovers.tsv" "$fs" "$SNAPSHOT_THRESHOLD" "$LOGS/probe.txt" <<'EOF'
import statistics, sys

runs_path, failovers_path, fs, snapshot_threshold, probe_path = sys.argv[1:6]

def fields(text):
    return dict(w.split("=", 1) for w in text.split() if "=" in w)

runs = {}
for line in open(runs_path):
    k, w, rep, result, cpu = line.rstrip("\n").split("\t")
    row = fields(result) | fields(cpu)
    runs.setdefault((int(k), int(w)), []).append(row)

print("## libraft 0.15, 3 replicas, 1 ms RTT (delay_proxy), data on " + fs
      + ", a snapshot every " + snapshot_threshold + " entries\n")
print("Medians over repeats; latency = raft_apply -> apply callback on the leader. Measured now: "
      + open(probe_path).read().replace("\n", "; ").strip("; ") + "\n")
print("| K ops/entry | W in flight | runs | commits/s | ops/s | p50 ms | p99 ms | max ms "
      "| replicas CPU % | proxies CPU % | per-run commits/s |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for (k, w) in sorted(runs):
    rows = runs[(k, w)]
    med = lambda key: statistics.median(float(r[key]) for r in rows)
    print(f"| {k} | {w} | {len(rows)} | {med('commits_per_s'):.0f} | {med('ops_per_s'):.0f} "
          f"| {med('p50_us') / 1e3:.2f} | {med('p99_us') / 1e3:.2f} | {med('max_us') / 1e3:.1f} "
          f"| {med('replicas_cpu_pct'):.0f} | {med('proxies_cpu_pct'):.0f} "
          f"| {', '.join(r['commits_per_s'] for r in rows)} |")

fails = {}
for line in open(failovers_path):
    e, h, pv, rep, old, new, elected, commit = line.rstrip("\n").split("\t")
    fails.setdefault((int(e), int(h), int(pv)), []).append(
        (old, new, float(elected), float(commit)))
print("\n## Failover: kill -9 of the leader -> first commit by the new leader\n")
print("| election ms | heartbeat ms | pre-vote | runs | median kill->elected ms "
      "| median kill->commit ms | each kill->commit ms (old->new) |")
print("|---:|---:|---|---:|---:|---:|---|")
for (e, h, pv) in sorted(fails, key=lambda key: (-key[0], key[2])):
    rows = fails[(e, h, pv)]
    each = ", ".join(f"{c:.0f} (r{o}->r{n})" for o, n, _, c in rows)
    print(f"| {e} | {h} | {'on' if pv else 'off'} | {len(rows)} | {statistics.median(r[2] for r in rows):.0f} "
          f"| {statistics.median(r[3] for r in rows):.0f} | {each} |")
EOF
  if [[ -s "$LOGS/strace_summary.txt" ]]; then
    echo
    echo "## Syscalls on a short K=16 W=1 run under strace (slows it; counts only)"
    echo
    echo '```'
    cat "$LOGS/strace_summary.txt"
    echo '```'
  fi
  echo
  echo "Raw logs: $LOGS"
}

main "$@"
