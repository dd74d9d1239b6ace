#!/usr/bin/env bash
# Installs every Debian 12 package that building, testing and running ledgerd needs and that this
# machine lacks. Idempotent and quiet when everything is present; runs as root or through sudo.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc grpc-proto
  libprotobuf-dev protobuf-compiler
  libabsl-dev
  librocksdb-dev
  prometheus-cpp-dev
  prometheus
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-format clang-tidy
  python3 python3-yaml curl
  openssl
  nghttp2-client python3-h2 haproxy
  postgresql
  docker-compose
)

# Node.js runs the cross-language test; the machine may ship its own, else Debian's.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
install_node_modules() {
  # The Node.js test's packages, exactly as package-lock.json pins them; only when missing.
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
