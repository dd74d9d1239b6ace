#!/usr/bin/env bash
# Compiles every project translation unit with clang and -Wthread-safety -Werror (plus the
# project's -Wall -Wextra -Wpedantic): GCC ignores ABSL_GUARDED_BY and friends, so this is the
# build that turns "this member is only touched under mu_" into a compile error.
#
# The cheapest form that still checks everything: object files only, at -O0 without debug
# information, in their own clang tree. Nothing is linked for its own sake (the analysis is in the
# front end); only the binaries that e2e test targets name in add_dependencies are, because CMake
# makes those tests' objects wait for them, and with them the generated protobuf/gRPC sources
# they link. Those are built with -Wno-error (proto/CMakeLists.txt) and their headers are
# -isystem, so generated code cannot fail this build. Objects go through ccache when
# CMAKE_CXX_COMPILER_LAUNCHER says so.
#
# Usage: scripts/check-thread-safety.sh [BUILD_DIR] [JOBS]
set -euo pipefail

build_dir=${1:-build/clang}
jobs=${2:-$(nproc)}
cxx=${CLANG_CXX:-clang++-14}

cmake -S . -B "$build_dir" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE= \
  >/dev/null

# Every C++ object of the tree except the generated ones. Building an object first runs the
# protoc commands its target depends on, so the generated headers exist.
mapfile -t objects < <(ninja -C "$build_dir" -t targets all |
  sed -n 's/^\(.*\.cc\.o\): .*/\1/p' |
  grep -v -e '\.pb\.cc\.o$' -e '/ledger_descriptor_set\.cc\.o$')

# Say which tracked sources this tree does not compile (for example a target behind an option
# that is off), so that "every translation unit" stays true or visibly is not.
mapfile -t sources < <(git ls-files '*.cc')
missing=()
for source in "${sources[@]}"; do
  if ! printf '%s\n' "${objects[@]}" | grep -q "/${source##*/}\.o$"; then missing+=("$source"); fi
done
echo "thread-safety: clang checks ${#objects[@]} translation units (${#sources[@]} tracked .cc files)"
if ((${#missing[@]} > 0)); then
  echo "thread-safety: NOTE: not compiled in this tree: ${missing[*]}"
fi

ninja -C "$build_dir" -j "$jobs" "${objects[@]}"
