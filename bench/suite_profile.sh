#!/usr/bin/env bash
# Where the suite's time goes (issue 28's 15-minute target): runs the README's test command's pytest
# (2 xdist workers) with a JUnit XML, samples vmstat every 10 s, and writes the wall time, the sum of
# test times, the CPU split (user/system/idle) and the 15 slowest modules and tests. Waits for a load
# average under 1 first. Writes bench/results/suite_profile-<utc>.txt (or $OUT/).
#   bash bench/suite_profile.sh [pytest args...]
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=${OUT:-bench/results}
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
log="$OUT/suite_profile-$stamp.txt"
work=$(mktemp -d /tmp/perfdag-suite-profile.XXXXXX)
trap 'kill "$vm" 2>/dev/null; rm -rf "$work"' EXIT

for _ in $(seq 90); do awk '{exit !($1 < 1)}' /proc/loadavg && break; sleep 2; done
load0=$(cut -d' ' -f1-3 /proc/loadavg)
vmstat -n 10 > "$work/vmstat.txt" &
vm=$!
t0=$(date +%s)
"$PY" -m pytest -q -p no:cacheprovider --junitxml="$work/suite.xml" "$@" > "$work/pytest.txt" 2>&1
rc=$?
wall=$(( $(date +%s) - t0 ))
kill "$vm" 2>/dev/null
{
  echo "== $(nproc) CPUs, load $load0 at start; commit $(git rev-parse --short HEAD); pytest exit $rc; wall $wall s"
  grep -E "^[0-9]+ (passed|failed)|^FAILED" "$work/pytest.txt"
  "$PY" - "$work/suite.xml" "$work/vmstat.txt" <<'PYEOF'
import collections, sys, xml.etree.ElementTree as ET
cases = [(float(c.get("time", 0)), c.get("classname", ""), c.get("name", "")) for c in ET.parse(sys.argv[1]).iter("testcase")]
mods = collections.Counter()
for t, cls, _ in cases:
    mods[cls.split(".")[-1]] += t
print(f"tests {len(cases)}, sum of test times {sum(t for t, *_ in cases):.0f} s")
rows = [ln.split() for ln in open(sys.argv[2]) if ln.split() and ln.split()[0].isdigit()][1:]  # the first is since boot
if rows:  # vmstat columns: ... us sy id wa st
    us, sy, idle = (sum(int(r[i]) for r in rows) / len(rows) for i in (12, 13, 14))
    print(f"CPU over {len(rows)} samples of 10 s: user {us:.0f}%, system {sy:.0f}%, idle {idle:.0f}%")
for lo, hi in ((0, 1), (1, 5), (5, 15), (15, 40), (40, 1e9)):
    sel = [t for t, *_ in cases if lo <= t < hi]
    print(f"tests of {lo}-{hi if hi < 1e9 else 'more'} s: {len(sel)}, {sum(sel):.0f} s")
print("slowest modules (sum of test times):")
for m, t in mods.most_common(15):
    print(f"  {t:7.1f} s  {m}")
print("slowest tests:")
for t, cls, name in sorted(cases, reverse=True)[:15]:
    print(f"  {t:7.1f} s  {cls.split('.')[-1]}::{name[:90]}")
PYEOF
  echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
} 2>&1 | tee "$log"
echo "raw results: $log"
