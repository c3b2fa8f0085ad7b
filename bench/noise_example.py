"""The measured example of docs/measuring.md's noise model: one configuration of the CPU default measured
N times (FullRun --repeat N, every observation kept), its run-to-run noise, the interval of its median,
and how many repeats a precision needs on this host; then, with --against, a second configuration
measured as often and the two compared (`python -m pipeline compare`).

Run it on a quiet host (it waits for a load average under 1 first, up to 10 minutes):
    .venv/bin/python bench/noise_example.py --repeat 10 --against build.max_batch_size=4
Prints the tables and writes bench/results/noise_example-<utc>.json (the raw values and host states).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from noise_power import interval_table  # noqa: E402

from harness.stats import noise  # noqa: E402


def wait_quiet(limit: float = 1.0, patience_s: float = 600) -> float:
    deadline = time.monotonic() + patience_s
    while os.getloadavg()[0] >= limit and time.monotonic() < deadline:
        time.sleep(10)
    return os.getloadavg()[0]


def measure(root: Path, overrides: str, repeat: int) -> dict:
    """FullRun --repeat N; every observation of its key, oldest first, with tokens/s and the host."""
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
    cmd = [sys.executable, "-m", "luigi", "--module", "pipeline", "FullRun", "--local-scheduler", "--repeat",
           str(repeat), *(["--overrides", overrides] if overrides else [])]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode not in (0, 10, 11, 12):
        raise SystemExit(f"FullRun failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    print(proc.stdout.strip().split("\n\n")[-1])  # --repeat's summary
    hist = subprocess.run([sys.executable, "-m", "pipeline", "history", "params/default.yaml", "--json",
                           *(["--overrides", overrides] if overrides else [])], cwd=REPO, env=env,
                          capture_output=True, text=True, check=True)
    doc = json.loads(hist.stdout)
    obs = [o for o in reversed(doc["observations"]) if not o["refused"]]
    hosts = []
    for o in obs:
        report = json.loads((Path(o["dir"]) / "report.json").read_text())
        hosts.append(report.get("host") or {})
    return {"key": doc["key"], "overrides": overrides, "wall_s": round(wall, 1),
            "tokens_per_s": [o["tokens_per_s"] for o in obs], "observations": [o["observation"] for o in obs],
            "busy": [h.get("busy") for h in hosts], "others_cpus": [h.get("others_cpus") for h in hosts]}


def describe(name: str, m: dict, factors: dict[int, float]) -> dict:
    values = m["tokens_per_s"]
    sp = noise.spread(values)
    rel_sd = statistics.stdev(values) / statistics.mean(values) if len(values) > 1 else None
    print(f"\n{name}: {len(values)} observations of FullRun {m['key'][:16]} ({m['overrides'] or 'the CPU default'}), "
          f"{sum(bool(b) for b in m['busy'])} on a busy host")
    print(f"  tokens/s: {', '.join(f'{v:,.1f}' for v in values)}")
    print(f"  median [interval of the median, {sp.confidence:.0%}]: {noise.fmt_spread(sp, lambda v: f'{v:,.1f}')}"
          f" (+-{sp.half_width:.1%})")
    need = {}
    if rel_sd:
        print(f"  run-to-run noise: relative sd {rel_sd:.2%}")
        for width in (0.01, 0.02, 0.05):
            n = next((n for n, f in sorted(factors.items()) if f * rel_sd <= width and n >= 6), None)
            need[f"{width:.0%}"] = n
            print(f"  repeats for a 95% interval of the median within +-{width:.0%}: "
                  f"{n if n else 'more than ' + str(max(factors))}")
    return {**m, "median": sp.median, "low": sp.low, "high": sp.high, "confidence": sp.confidence,
            "relative_sd": rel_sd, "repeats_needed": need}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--overrides", default="", help="the first configuration (default: the CPU default)")
    ap.add_argument("--against", default="", help="a second configuration's overrides, compared with the first")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--no-wait", action="store_true", help="start at once, quiet host or not (a smoke run)")
    ap.add_argument("--root", default="", help="an artifacts root to use (default: a fresh one, removed after)")
    args = ap.parse_args()
    load = os.getloadavg()[0] if args.no_wait else wait_quiet()
    print(f"load average {load:.2f} when it began")
    factors = {r["repeats"]: r["half_width_in_sd"] for r in interval_table(np.random.default_rng(47), 1000)}
    out = REPO / args.out
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"noise_example-{time.strftime('%Y-%m-%dT%H%M%SZ', time.gmtime())}.json"
    with tempfile.TemporaryDirectory(prefix="perfdag-noise-") as tmp:
        root = Path(args.root) if args.root else Path(tmp) / "artifacts"
        doc = {"load_before": load, "a": describe("A", measure(root, args.overrides, args.repeat), factors)}
        path.write_text(json.dumps(doc, indent=2))  # the first half kept, should the second be stopped
        if args.against:
            both = ",".join(x for x in (args.overrides, args.against) if x)
            doc["b"] = describe("B", measure(root, both, args.repeat), factors)
            env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
            cmp = subprocess.run([sys.executable, "-m", "pipeline", "compare", doc["a"]["key"][:16],
                                  doc["b"]["key"][:16]], cwd=REPO, env=env, capture_output=True, text=True)
            print("\n" + cmp.stdout)
            doc["compare"] = cmp.stdout
    path.write_text(json.dumps(doc, indent=2))
    print(f"raw: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
