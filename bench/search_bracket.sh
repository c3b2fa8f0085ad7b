#!/usr/bin/env bash
# Does a dense sweep bracket what the search found? On the CPU default in Server: the search for the
# highest server_target_qps that LoadGen calls VALID (MLPerf's limits, early stopping; default probes
# of 5 s and 512 queries), then a dense sweep of fresh runs (another LoadGen seed) at 0.8, 1.0, 1.1,
# 1.25 and 1.5 times the found load, at the probes' settings, each point's verdict printed. Waits for
# a load average under 1 first. Writes bench/results/search_bracket-<utc>.txt (or $OUT/).
#   bash bench/search_bracket.sh [TOLERANCE]
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=${OUT:-bench/results}
TOL=${1:-0.1}
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
log="$OUT/search_bracket-$stamp.txt"
root=$(mktemp -d /tmp/perfdag-bracket.XXXXXX)
trap 'rm -rf "$root"' EXIT
export PERFDAG_ARTIFACTS=$root
SERVER="loadgen.scenario=Server"

{
  for _ in $(seq 90); do awk '{exit !($1 < 1)}' /proc/loadavg && break; sleep 2; done
  echo "== $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg) at start; commit $(git rev-parse --short HEAD)"
  echo "== python -m pipeline search --overrides $SERVER --tolerance $TOL"
  "$PY" -m pipeline search --overrides "$SERVER" --tolerance "$TOL" 2>&1 | grep -E "search probe|^perfdag FindMaxLoad|^  "
  found=$("$PY" -c 'import json, glob, sys; print(json.load(open(glob.glob(sys.argv[1] + "/FindMaxLoad/*/search.json")[0]))["found"])' "$root")
  echo "found: $found"
  if [ "$found" != "None" ]; then
    grid=$("$PY" -c "import sys; f = float(sys.argv[1]); print(','.join(f'{f * k:.4g}' for k in (0.8, 1.0, 1.1, 1.25, 1.5)))" "$found")
    echo "== dense sweep, fresh runs (loadgen.seed=4242) at the probes' settings: $grid"
    "$PY" -m luigi --module pipeline Sweep --local-scheduler --grid "loadgen.server_target_qps=$grid" \
      --overrides "$SERVER,loadgen.min_duration_ms=5000,loadgen.min_query_count=512,loadgen.seed=4242" 2>&1 \
      | sed -n '/perfdag Sweep/,/report/p'
  fi
  echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
} 2>&1 | tee "$log"
echo "raw results: $log"
