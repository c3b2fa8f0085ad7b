"""How fast nothing happens: a fully cached FullRun against `python -c 'import luigi'`, and `status`.

    .venv/bin/python bench/noop_speed.py [--artifacts DIR] [--pairs 7] [--overrides K=V,...]

Runs FullRun once (building whatever is missing: the first call on a fresh root takes minutes), then
times `luigi --module pipeline FullRun --local-scheduler` (fully cached) and `python -c 'import luigi'`
as interleaved pairs (FullRun, luigi, FullRun, luigi, ...: a load change hits both alike), and prints
each one's median wall time and the median of the pairs' ratios (issue 51's goal: <= 1.5x). Then
`python -m pipeline status`, and the heavy modules each command imported (python -X importtime).
Raw times go to bench/results/noop_speed-<utc>.json (or --out). Asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "modelopt", "numpy", "pandas", "matplotlib", "tritonclient", "grpc", "httpx")


def wall(argv: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, check=False)
    took = time.perf_counter() - t0
    if proc.returncode not in (0, 10, 11, 12):  # FullRun's exit code is its verdict (pipeline/full_run.py)
        sys.exit(f"{' '.join(argv[1:])}: exit {proc.returncode}\n{proc.stderr.decode()[-2000:]}")
    return took


def heavy_imports(argv: list[str], env: dict) -> list[str]:
    trace = subprocess.run([sys.executable, "-X", "importtime", *argv[1:]], cwd=REPO, env=env, capture_output=True,
                           text=True, check=False)
    mods = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in trace.stderr.splitlines() if "import time:" in line}
    return sorted(mods & set(HEAVY))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--artifacts", default=str(REPO / "artifacts"))
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--overrides", default="", help="FullRun's --overrides (the root's run)")
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = ap.parse_args()
    # Timed commands read compiled bytecode, as an installed perfdag does: with PYTHONDONTWRITEBYTECODE set
    # (some shells and CI images set it), an editable checkout compiles its own modules again in every run.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    env = {**os.environ, "PERFDAG_ARTIFACTS": args.artifacts}
    fullrun = [sys.executable, "-m", "luigi", "--module", "pipeline", "FullRun", "--local-scheduler"]
    if args.overrides:
        fullrun += ["--overrides", args.overrides]
    luigi_only = [sys.executable, "-c", "import luigi"]
    status = [sys.executable, "-m", "pipeline", "status"]
    wall(fullrun, env)  # make sure it is cached
    runs, bases = [], []
    for _ in range(args.pairs):
        runs.append(wall(fullrun, env))
        bases.append(wall(luigi_only, env))
    statuses = [wall(status, env) for _ in range(args.pairs)]
    ratios = [r / b for r, b in zip(runs, bases)]
    heavy = {"cached FullRun": heavy_imports(fullrun, env), "status": heavy_imports(status, env)}
    print(f"{'command':<26} {'median s':>9}  heavy imports")
    print(f"{'cached FullRun':<26} {statistics.median(runs):>9.3f}  {', '.join(heavy['cached FullRun']) or 'none'}")
    print(f"{'python -c import luigi':<26} {statistics.median(bases):>9.3f}")
    print(f"{'status':<26} {statistics.median(statuses):>9.3f}  {', '.join(heavy['status']) or 'none'}")
    print(f"cached FullRun / import luigi: median of {args.pairs} interleaved pairs {statistics.median(ratios):.2f}x "
          f"(range {min(ratios):.2f}-{max(ratios):.2f}; goal <= 1.5x)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime())
    raw = {"commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                    text=True).stdout.strip(),
           "cpus": os.cpu_count(), "load_at_end": os.getloadavg(), "artifacts": args.artifacts,
           "overrides": args.overrides, "fullrun_s": runs, "import_luigi_s": bases, "status_s": statuses,
           "ratios": ratios, "heavy_imports": heavy}
    path = out / f"noop_speed-{stamp}.json"
    path.write_text(json.dumps(raw, indent=1) + "\n")
    print(f"raw: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
