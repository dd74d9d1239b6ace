#!/usr/bin/env bash
# Installs the Debian 12 packages that ledgerd needs and that this machine lacks. Idempotent and
# quiet when everything is present; runs as root or through sudo.
#
#   install-deps.sh               building, testing and running (make test): every list below
#                                 but the engine's
#   install-deps.sh --build-only  building the binaries and their unit tests, nothing else (the
#                                 image's build stage: no PostgreSQL, Prometheus, Node.js or npm)
#   install-deps.sh --image       a Docker engine and debootstrap for make test-image, only
#   install-deps.sh --replication-spike
#                                 the consensus engines that make bench-replication measures
#                                 (issue 17, docs/replication.md), only
set -euo pipefail

# What compiling ledgerd, ledgerctl, ledger-loadtest and the unit tests needs.
build_packages=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc grpc-proto
  libprotobuf-dev protobuf-compiler
  libabsl-dev
  librocksdb-dev
  prometheus-cpp-dev
  libgtest-dev libgmock-dev
  # ledgerd's allocator (server/CMakeLists.txt); the image's runtime stage installs libjemalloc2.
  libjemalloc-dev
  # crc32 for the log benchmark (bench/log_bench.cc); librocksdb-dev pulls it in as well.
  zlib1g-dev
  # The replicated log (storage/raft_log.cc, issue 32): canonical's libraft 0.15 and its libuv I/O.
  libraft-dev libuv1-dev
)

# What the rest of make test, the benchmarks and the developer targets add.
packages=(
  # Every compile goes through it when present (CMakeLists.txt), so a second build of the same
  # sources, in this clone or another one, is mostly cache hits (docs/testing.md).
  ccache
  prometheus
  libbenchmark-dev
  clang-format clang-tidy
  # clang 14 builds make test's ASan+UBSan tree: its thread-safety analysis (GCC ignores the
  # annotations) and the fuzz targets, with libFuzzer's, ASan's and UBSan's runtimes (not in
  # build_packages: the image's build stage does neither).
  clang clang-14 libclang-rt-14-dev
  python3 python3-yaml curl
  openssl
  nghttp2-client python3-h2 haproxy
  # The cluster's fault tests give each replica a network namespace and cut links between them
  # (tests/e2e/replica_network.h).
  iproute2 iptables
  postgresql
  docker-compose
)

# make test-image: an engine to build and run the image, and debootstrap to make its base image
# locally where none can be pulled.
image_packages=(
  docker.io
  debootstrap
  docker-compose
  python3
)

# make bench-replication (bench/replication/): the two candidate engines, their build tooling,
# iproute2 for the network namespaces, strace to see what each one syncs per write, and what
# run_nats.sh reads the servers' monitoring endpoints and sums CPU with.
replication_spike_packages=(
  build-essential cmake ninja-build pkg-config
  libraft-dev libuv1-dev
  nats-server libnats-dev
  iproute2 strace
  curl jq bc python3
)

mode="${1:-all}"
case "$mode" in
  all) wanted=("${build_packages[@]}" "${packages[@]}") ;;
  --build-only) wanted=("${build_packages[@]}") ;;
  --image) wanted=("${image_packages[@]}") ;;
  --replication-spike) wanted=("${replication_spike_packages[@]}") ;;
  *)
    echo "install-deps: unknown mode '$mode' (none, --build-only, --image or --replication-spike)" >&2
    exit 2
    ;;
esac

# An engine already here (Docker's own docker-ce, say) is used as it is: docker.io would conflict.
if [ "$mode" = --image ] && { command -v dockerd >/dev/null 2>&1 || docker info >/dev/null 2>&1; }; then
  wanted=("${wanted[@]/docker.io}")
fi

# Node.js runs the cross-language test; the machine may ship its own, else Debian's.
if [ "$mode" = all ] && { ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; }; then
  wanted+=(nodejs npm)
fi

missing=()
for pkg in "${wanted[@]}"; do
  [ -n "$pkg" ] || continue
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
install_node_modules() {
  # The Node.js test's packages, exactly as package-lock.json pins them; only when missing.
  [ "$mode" = all ] || return 0
  local dir
  dir="$(cd "$(dirname "$0")/.." && pwd)/tests/node"
  if [ ! -d "$dir/node_modules/@grpc/grpc-js" ]; then
    echo "install-deps: npm ci in tests/node" >&2
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  fi
}

if [ ${#missing[@]} -eq 0 ]; then
  install_node_modules
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
install_node_modules
