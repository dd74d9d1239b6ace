#!/usr/bin/env bash
# Runs the libFuzzer targets of build DIR (cmake -DLEDGER_FUZZ=ON) one after another, each for a
# bounded time on its seed corpus fuzz/corpus/<target>/, and fails when any of them finds a crash,
# printing the input that reproduces it. Used by `make test-fuzz` and `make fuzz` (docs/fuzzing.md).
#
#   run_fuzzers.sh --build DIR --seconds N [--target NAME] [--mode test|explore] [--keep] [--jobs J]
#
#   --jobs J        runs J targets at a time (default 1); each still gets its N seconds. make test
#                   runs one per core, since a target keeps one core busy.
#   --mode test     (default) a fresh scratch corpus per run, deleted when the run passes.
#   --mode explore  the scratch corpus DIR/../fuzz-out/<target>/corpus persists between runs, so
#                   each run continues where the last one stopped.
#   --keep          after the run, merge into fuzz/corpus/<target>/ the new entries that add
#                   coverage (libFuzzer -merge=1): the only way anything is written to the repo.
#   --seconds 0     runs until interrupted (libFuzzer's -max_total_time=0).
# Crash, leak and timeout inputs go to DIR/../fuzz-out/<target>/artifacts/, never the repo.
set -euo pipefail

# Each target and its -max_len: a little beyond the largest valid input it sees (two 128-byte
# ids and a few varints for a request), so that "too long" is explored without wasting runs on
# megabyte inputs.
declare -A max_len=(
  [fuzz_apply_operation]=64
  [fuzz_record_decode]=512
  [fuzz_record_roundtrip]=1024
  [fuzz_request]=1024
)
all_targets=(fuzz_apply_operation fuzz_record_decode fuzz_record_roundtrip fuzz_request)

build="" seconds=20 only="" mode=test keep=0 jobs=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --target) only="$2"; shift 2 ;;
    --mode) mode="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    --jobs) jobs="$2"; shift 2 ;;
    *) echo "run_fuzzers: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ -n "$build" ] || { echo "run_fuzzers: --build DIR is required" >&2; exit 2; }
case "$mode" in test|explore) ;; *) echo "run_fuzzers: --mode is test or explore" >&2; exit 2 ;; esac
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "run_fuzzers: --seconds takes a whole number" >&2; exit 2; }
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "run_fuzzers: --jobs takes a whole number from 1" >&2; exit 2; }

repo="$(cd "$(dirname "$0")/.." && pwd)"
targets=("${all_targets[@]}")
if [ -n "$only" ]; then
  [ -n "${max_len[$only]:-}" ] || { echo "run_fuzzers: no target '$only' (${all_targets[*]})" >&2; exit 2; }
  targets=("$only")
fi
out_root="$(cd "$build/.." && pwd)/fuzz-out"

# A leak is a finding too; UBSan's report says where.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"

for target in "${targets[@]}"; do
  [ -x "$build/fuzz/$target" ] || { echo "run_fuzzers: $build/fuzz/$target is not built" >&2; exit 2; }
done

# Runs one target; prints what it found and returns non-zero when it found something.
run_target() {
  local target="$1"
  local binary="$build/fuzz/$target"
  local out="$out_root/$target"
  local corpus="$out/corpus"
  local log="$out/last-run.log"
  if [ "$mode" = test ]; then rm -rf "$corpus"; fi
  mkdir -p "$corpus" "$out/artifacts"
  echo "fuzz: $target for ${seconds}s (max_len ${max_len[$target]}, log $log)"
  # New entries go to the first corpus directory only: the scratch one, never the repository's.
  local rc=0
  "$binary" -max_total_time="$seconds" -max_len="${max_len[$target]}" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$out/artifacts/" \
    "$corpus" "$repo/fuzz/corpus/$target" >"$log" 2>&1 || rc=$?
  local runs rate
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  if [ "$rc" -ne 0 ]; then
    local artifact
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    grep -E "property violated|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error" "$log" \
      | head -5 || true
    echo "fuzz: $target FAILED (exit $rc) after ${runs:-?} runs; the input that reproduces it:"
    echo "  ${artifact:-(none written; see $log)}"
    if [ -n "$artifact" ]; then echo "  reproduce: $binary $artifact"; fi
    return 1
  fi
  echo "fuzz: $target passed: ${runs:-?} runs, ${rate:-?} exec/s, $(ls "$corpus" | wc -l) new corpus entries"
  if [ "$keep" -eq 1 ]; then
    "$binary" -merge=1 -max_len="${max_len[$target]}" "$repo/fuzz/corpus/$target" "$corpus" \
      >"$out/merge.log" 2>&1
    echo "fuzz: merged into fuzz/corpus/$target: $(ls "$repo/fuzz/corpus/$target" | wc -l) entries"
  fi
  if [ "$mode" = test ]; then rm -rf "$corpus"; fi
}

# Up to --jobs targets side by side. Each one's lines go to a file of its own and are printed
# together when it ends, so that targets running at once do not mix their output.
summaries="$(mktemp -d)"
trap 'rm -rf "$summaries"' EXIT
declare -A pid_of=()
for target in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  run_target "$target" >"$summaries/$target" 2>&1 &
  pid_of[$target]=$!
done
failed=()
for target in "${targets[@]}"; do
  wait "${pid_of[$target]}" || failed+=("$target")
  cat "$summaries/$target"
done

if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
