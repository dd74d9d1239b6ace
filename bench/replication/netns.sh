#!/usr/bin/env bash
# Three replica hosts and a client host on one machine, for the replication spike of issue 17
# (docs/replication.md). Each host is a network namespace; a bridge in a fifth namespace joins
# them, so no address, route or process touches the root namespace.
#
#   netns.sh up                                   lrep-r1..3 = 10.99.0.1..3, lrep-c = 10.99.0.100
#                                                 (refused while any lrep-* namespace exists)
#   netns.sh proxy I PUBLIC_PORT LOCAL_PORT [US] [COUNT]
#                                                 in lrep-rI: 10.99.0.I:PUBLIC -> 127.0.0.1:LOCAL,
#                                                 US microseconds each way (default 500); COUNT
#                                                 consecutive ports from each (default 1)
#   netns.sh down                                 stop the proxies, delete the namespaces
#
# Why a proxy and not `tc netem delay 0.5ms`: the kernel here is built without sch_netem
# (`zcat /proc/config.gz | grep NETEM`). A server binds 127.0.0.1:LOCAL inside its namespace and
# advertises 10.99.0.I:PUBLIC; every connection from another host then crosses delay_proxy, which
# holds each byte US microseconds in each direction: with US=500, a 1 ms round trip between any two
# hosts, as netem's 0.5 ms on each host's egress would give.
set -euo pipefail

readonly BUILD="${LREP_BUILD:-$(cd "$(dirname "$0")/../.." && pwd)/build/replication}"
readonly RUN_DIR="${LREP_RUN_DIR:-/tmp/lrep}"
readonly HUB=lrep-hub
readonly HOSTS=(lrep-r1 lrep-r2 lrep-r3 lrep-c)
readonly ADDRESSES=(10.99.0.1 10.99.0.2 10.99.0.3 10.99.0.100)

up() {
  # The names are fixed and shared by run_raft.sh and run_nats.sh: taking them over would tear down
  # another run's hosts mid-measurement, so refuse instead. A run that was killed leaves them
  # behind; `netns.sh down` clears them.
  if ip netns list | grep -q '^lrep-'; then
    echo "netns.sh: lrep-* namespaces exist (another spike running, or one was killed);" \
      "netns.sh down first" >&2
    exit 1
  fi
  down_quietly
  mkdir -p "$RUN_DIR"
  ip netns add "$HUB"
  ip -n "$HUB" link add br0 type bridge
  ip -n "$HUB" link set br0 up
  for i in "${!HOSTS[@]}"; do
    local host="${HOSTS[$i]}"
    ip netns add "$host"
    # The host end is created inside the host's namespace, the bridge end moved to the hub.
    ip -n "$host" link add eth0 type veth peer name "p$i"
    ip -n "$host" link set "p$i" netns "$HUB"
    ip -n "$HUB" link set "p$i" master br0
    ip -n "$HUB" link set "p$i" up
    ip -n "$host" addr add "${ADDRESSES[$i]}/24" dev eth0
    ip -n "$host" link set eth0 up
    ip -n "$host" link set lo up
  done
  echo "netns: ${HOSTS[*]} up on $HUB/br0 (10.99.0.0/24)"
}

proxy() {
  local index="$1" public_port="$2" local_port="$3" delay_us="${4:-500}" count="${5:-1}"
  if [[ ! "$index" =~ ^[123]$ ]]; then
    echo "netns.sh: replica index must be 1, 2 or 3, got '$index'" >&2
    exit 2
  fi
  if [[ ! -x "$BUILD/delay_proxy" ]]; then
    echo "netns.sh: $BUILD/delay_proxy not built (cmake --build $BUILD)" >&2
    exit 1
  fi
  local pid_file="$RUN_DIR/proxy-$index-$public_port.pid"
  ip netns exec "lrep-r$index" "$BUILD/delay_proxy" "10.99.0.$index:$public_port" \
    "127.0.0.1:$local_port" "$delay_us" "$count" >>"$RUN_DIR/proxy-$index-$public_port.log" 2>&1 &
  echo $! >"$pid_file"
  # Wait until it listens, so that callers can connect at once.
  for _ in $(seq 1 100); do
    if ip netns exec "lrep-r$index" bash -c "exec 3<>/dev/tcp/10.99.0.$index/$public_port" \
      2>/dev/null; then
      echo "$!"
      return 0
    fi
    sleep 0.05
  done
  echo "netns.sh: proxy on 10.99.0.$index:$public_port did not start" >&2
  exit 1
}

down_quietly() {
  for pid_file in "$RUN_DIR"/proxy-*.pid; do
    [[ -e "$pid_file" ]] || continue
    kill "$(cat "$pid_file")" 2>/dev/null || true
    rm -f "$pid_file"
  done
  for host in "${HOSTS[@]}" "$HUB"; do
    ip netns del "$host" 2>/dev/null || true
  done
}

case "${1:-}" in
  up) up ;;
  proxy)
    shift
    proxy "$@"
    ;;
  down)
    down_quietly
    echo "netns: down"
    ;;
  *)
    echo "usage: netns.sh up | proxy I PUBLIC_PORT LOCAL_PORT [DELAY_US] [COUNT] | down" >&2
    exit 2
    ;;
esac
