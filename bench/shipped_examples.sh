#!/usr/bin/env bash
# Do the shipped CPU examples end VALID as written, on a quiet host and on a loaded one? Runs
# params/examples/openai-cpu.yaml (FullRun) and the sweeps params/sweeps/batch_and_qps.yaml and
# concurrency.yaml exactly as the docs give them, first with the load average under 1, then with
# LOAD busy-loop processes beside them (default: one per CPU), each pass on a fresh artifacts root,
# and prints one line per run or sweep point (VALID/INVALID, samples/s, the auto-sized rate). Writes
# bench/results/shipped_examples-<utc>.txt (or $OUT/).
#   bash bench/shipped_examples.sh [LOAD]
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=${OUT:-bench/results}
LOAD=${1:-$(nproc)}
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
log="$OUT/shipped_examples-$stamp.txt"
work=$(mktemp -d /tmp/perfdag-shipped.XXXXXX)
hogs=()
cleanup() { for pid in "${hogs[@]}"; do kill "$pid" 2>/dev/null; done; rm -rf "$work"; }
trap cleanup EXIT

quiet() {
  for _ in $(seq 90); do awk '{exit !($1 < 1)}' /proc/loadavg && return; sleep 2; done
  echo "load average still $(cut -d' ' -f1 /proc/loadavg) after 3 minutes"
}

verdicts() {  # one line per FullRun report under the root, and per sweep row
  "$PY" - "$1" <<'PYEOF'
import json, sys
from pathlib import Path
root = Path(sys.argv[1])
for f in sorted(root.glob("Sweep/*/sweep.json")):
    doc = json.loads(f.read_text())
    for r in doc["rows"]:
        point = ", ".join(f"{k}={r.get(k)}" for k in doc["varied"])
        print(f"  sweep {doc['name']}: {point}: {'VALID' if r['valid'] else 'INVALID: ' + str(r.get('invalid_reason'))}, "
              f"{r['samples_per_s']:.1f} samples/s, accuracy {'PASS' if r['accuracy_passed'] else 'FAIL'}")
for f in sorted(root.glob("RunLoadgen/*/result.json")):
    r = json.loads(f.read_text())
    auto = (r.get("offline_expected_qps_auto") or {}).get("offline_expected_qps")
    print(f"  RunLoadgen {f.parent.name} {r.get('scenario')}: {r.get('valid')}, {r.get('samples_per_s')} samples/s"
          + (f", auto-sized to {auto}" if auto else "") + (f" ({r.get('invalid_reason')})" if r.get("invalid_reason") else ""))
PYEOF
}

pass() {  # $1: name of the pass
  local root="$work/$1"
  echo "== $1: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg) at start"
  for cmd in "FullRun --params-file params/examples/openai-cpu.yaml" \
             "Sweep --sweep params/sweeps/batch_and_qps.yaml" \
             "Sweep --sweep params/sweeps/concurrency.yaml"; do
    t0=$SECONDS
    # shellcheck disable=SC2086 - the command's words
    PERFDAG_ARTIFACTS="$root" "$PY" -m luigi --module pipeline $cmd --local-scheduler >"$work/$1.log" 2>&1
    echo "  luigi $cmd: exit $? in $((SECONDS - t0)) s"
  done
  verdicts "$root"
}

exec > >(tee "$log") 2>&1  # not a { } | tee subshell: the busy loops must be this shell's, for the trap
quiet
pass quiet
for _ in $(seq "$LOAD"); do (trap - EXIT; while :; do :; done) & hogs+=($!); done
sleep 5
pass "loaded-$LOAD-busy-loops"
echo "raw results: $log"
