"""How fast nothing happens: a fully cached FullRun and `status`, and that neither imports torch.

    .venv/bin/python bench/noop_speed.py [--artifacts DIR] [--repeat 5]

Runs FullRun once (building whatever is missing: the first call on a fresh root takes minutes),
then times `luigi --module pipeline FullRun` (fully cached) and `python -m pipeline status`,
and lists the heavy modules each imported (python -X importtime). Goals: FullRun < 1 s,
status < 0.5 s, no torch.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "modelopt", "numpy", "pandas", "matplotlib", "tritonclient", "grpc")


def timed(argv: list[str], env: dict, repeat: int) -> tuple[float, set[str]]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(argv, cwd=REPO, env=env, capture_output=True, check=False)
        times.append(time.perf_counter() - t0)
    trace = subprocess.run([sys.executable, "-X", "importtime", *argv[1:]], cwd=REPO, env=env, capture_output=True,
                           text=True)
    heavy = {line.rsplit("|", 1)[-1].strip() for line in trace.stderr.splitlines() if "import time:" in line}
    return statistics.median(times), {m for m in heavy if m in HEAVY}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--artifacts", default=str(REPO / "artifacts"))
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    env = {**os.environ, "PERFDAG_ARTIFACTS": args.artifacts}
    fullrun = [sys.executable, "-m", "luigi", "--module", "pipeline", "FullRun", "--local-scheduler"]
    status = [sys.executable, "-m", "pipeline", "status"]
    subprocess.run(fullrun, cwd=REPO, env=env, capture_output=True, check=False)  # make sure it is cached
    for name, argv, goal in (("cached FullRun", fullrun, 1.0), ("status", status, 0.5)):
        t, heavy = timed(argv, env, args.repeat)
        verdict = "ok" if t < goal and "torch" not in heavy else "MISSED"
        print(f"{name:<15} median {t:.2f} s over {args.repeat} (goal < {goal} s) {verdict}; "
              f"heavy imports: {', '.join(sorted(heavy)) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
