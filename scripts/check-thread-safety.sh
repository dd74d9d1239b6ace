#!/usr/bin/env bash
# Checks that a clang build tree compiled every tracked C++ source of the project, so that "clang's
# thread-safety analysis saw every file" stays true. GCC ignores ABSL_GUARDED_BY and friends; the
# clang tree (make asan-build: ASan+UBSan, -Wthread-safety -Werror from CMakeLists.txt) is the
# build that turns "this member is only touched under mu_" into a compile error. This script does
# not compile anything: it reads which sources the tree's compile commands name, directly or
# through the unity batches (cmake/LedgerUnityBuild.cmake), and fails naming any tracked .cc
# file that none of them covers.
#
# bench/replication/ is a CMake project of its own (make bench-replication) and not checked here.
#
# Usage: scripts/check-thread-safety.sh BUILD_DIR   (a configured and built clang tree)
set -euo pipefail

build_dir=${1:?usage: check-thread-safety.sh BUILD_DIR}
commands="$build_dir/compile_commands.json"
[ -f "$commands" ] || { echo "thread-safety: no $commands (configure the tree first)" >&2; exit 2; }
grep -q 'clang++' "$commands" || { echo "thread-safety: $build_dir is not a clang tree" >&2; exit 2; }
grep -q -- '-Wthread-safety' "$commands" || {
  echo "thread-safety: $build_dir does not compile with -Wthread-safety" >&2
  exit 2
}

repo="$(cd "$(dirname "$0")/.." && pwd)"
# Every file the tree compiles: the "file" of each command, and what each unity file includes.
compiled="$(mktemp)"
trap 'rm -f "$compiled"' EXIT
python3 - "$commands" "$repo" >"$compiled" <<'PY'
import json, os, re, sys
commands, repo = sys.argv[1], sys.argv[2]
for entry in json.load(open(commands)):
    path = os.path.normpath(os.path.join(entry["directory"], entry["file"]))
    if "/ledger_unity/" in path:  # cmake/LedgerUnityBuild.cmake's batches
        for line in open(path):
            m = re.match(r'\s*#include\s+"(.+)"', line)
            if m:
                # Included by its path in the source tree (found through -I of the root).
                print(os.path.normpath(m.group(1)))
    else:
        print(os.path.relpath(path, repo))
PY

mapfile -t sources < <(cd "$repo" && git ls-files '*.cc' | grep -v '^bench/replication/')
missing=()
for source in "${sources[@]}"; do
  grep -qxF "$source" "$compiled" || missing+=("$source")
done
echo "thread-safety: clang compiled all but ${#missing[@]} of ${#sources[@]} tracked .cc files" \
  "with -Wthread-safety -Werror (bench/replication/ is its own project)"
if ((${#missing[@]} > 0)); then
  echo "thread-safety: FAILED: not compiled by $build_dir: ${missing[*]}" >&2
  exit 1
fi
