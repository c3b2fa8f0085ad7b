#!/usr/bin/env bash
# The client-cost benches (harness_overhead.py over HTTP, driver_qps.py) on a lent quiet host that
# has python3 but not perfdag's dependencies and no network: installs the wheels carried in
# .whl-bench/ (cp312; gRPC's tritonserver is too large to carry, so Triton paths are left out)
# into a venv over the host's own packages (the benches start their workers with sys.executable, and
# perfdag's runner gives the LoadGen driver a clean environment, so PYTHONPATH would not reach them),
# checks the load average, and writes the raw results to $OUT (or bench/results/). Large wheels that
# would not fit the carry (numpy, scipy: the driver's early-stopping estimates) go as one xz tarball of
# their unpacked files (.whl-bench/*.tar.xz), unpacked into the venv's site-packages. To fill it:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#     -d .whl-bench <each runtime dependency, pinned as constraints/cpu.txt pins it>
#   (cd <dir with numpy's and scipy's wheels unzipped> && XZ_OPT=-9 tar cJf .../.whl-bench/np-sp.tar.xz .)
# httpx is left out of the HTTP rounds: never the best bare loop, and its paced runs would take the time.
# PIN_CPUS=0,1 runs the HTTP rounds under `taskset -c 0,1` (servers and clients on those CPUs only, the
# file named ...-pinned-0,1-...): whether perfdag's excess on a many-core host comes from its processes
# waking each other on idle cores, which a 2-CPU host does not show.
#   [PIN_CPUS=0,1] [SKIP_DRIVER=1] bash bench/quiet_host_client_cost.sh [ROUNDS]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results}
ROUNDS=${1:-3}
python3 -m venv --system-site-packages /tmp/bench-venv && /tmp/bench-venv/bin/python -m pip install -q --no-index \
  --no-deps .whl-bench/*.whl || exit 3
PY=/tmp/bench-venv/bin/python
SITE=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
for t in .whl-bench/*.tar.xz; do [ -e "$t" ] && { tar xJf "$t" -C "$SITE" || exit 3; }; done
echo "host: $(nproc) CPUs, $($PY -V), load $(cut -d' ' -f1-3 /proc/loadavg)"
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
quiet() {  # the load average under 1 before a bench starts (the one before raised it)
  for _ in $(seq 60); do awk '{exit !($1 < 1)}' /proc/loadavg && return; sleep 2; done
}
[ -n "${SKIP_DRIVER:-}" ] || { quiet; $PY bench/driver_qps.py --rounds "$ROUNDS" --out "$OUT/driver_qps-quiethost-$stamp.json" 2>&1 | tail -25; }
PIN=() NAME=quiethost
[ -z "${PIN_CPUS:-}" ] || { PIN=(taskset -c "$PIN_CPUS"); NAME="quiethost-pinned-$PIN_CPUS"; }
quiet
"${PIN[@]}" $PY bench/harness_overhead.py --protocols http,chat --rounds "$ROUNDS" --small 1000 --large 8000 \
  --clients perfdag,aiohttp-uvloop,aiohttp-asyncio,aiohttp-chat-uvloop,aiohttp-chat-asyncio --out "$OUT/harness_overhead-$NAME-$stamp.json" 2>&1 | grep -v '^round ' | tail -40
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
