#!/usr/bin/env bash
# Installs every Debian 12 package that building, testing and running ledgerd needs and that this
# machine lacks. Idempotent and quiet when everything is present; runs as root or through sudo.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc grpc-proto
  libprotobuf-dev protobuf-compiler
  libabsl-dev
  prometheus-cpp-dev
  prometheus
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-format clang-tidy
  python3 curl
)

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

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
