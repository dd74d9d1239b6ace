#!/usr/bin/env bash
# Runs a command as one named stage of make test and says how long it took, so that a slow stage
# is seen at once. With LEDGER_TIMINGS set to a file, also appends "seconds<TAB>stage<TAB>exit"
# there (.ci/run prints those lines as a table at the end).
#
# Usage: scripts/timed.sh STAGE COMMAND [ARGS...]
set -uo pipefail
stage="$1"
shift
started=$(date +%s.%N)
"$@"
rc=$?
seconds=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
echo "[stage] $stage: ${seconds} s$( ((rc == 0)) || echo ", FAILED (exit $rc)")"
if [ -n "${LEDGER_TIMINGS:-}" ]; then
  printf '%s\t%s\t%s\n' "$seconds" "$stage" "$rc" >>"$LEDGER_TIMINGS"
fi
exit "$rc"
