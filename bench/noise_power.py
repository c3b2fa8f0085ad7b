"""What the noise model (harness/stats/noise.py) can tell at a given number of repeats: simulated, so it
depends on no host. For run-to-run noise of relative standard deviation s (normal, and a heavy-tailed
variant: one repeat in five on a busy neighbour, 3 s slower):

- the interval of the median: its coverage and its expected half-width, in units of s;
- the verdict: how often a shift of k x s is called worse (its power), and how often no shift is
  called anything (the false calls), with and without a 5% floor at s = 2%.

Prints the tables docs/measuring.md quotes and writes them to bench/results/noise_power-<utc>.json.
    .venv/bin/python bench/noise_power.py [--trials 2000]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.stats import noise  # noqa: E402

REPEATS = (3, 4, 5, 6, 8, 10, 15, 20)
SHIFTS = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0)


def draw(rng, n: int, shift: float, heavy: bool) -> np.ndarray:
    x = rng.normal(1.0 + shift, 1.0, n)
    if heavy:
        x = x + 3.0 * (rng.random(n) < 0.2)  # a busy neighbour now and then: one-sided
    return x


def interval_table(rng, trials: int) -> list[dict]:
    out = []
    for n in REPEATS:
        widths, covered, conf = [], 0, None
        for _ in range(trials):
            sp = noise.spread(rng.normal(0.0, 1.0, n) + 100.0)
            widths.append((sp.high - sp.low) / 2)
            covered += sp.low <= 100.0 <= sp.high
            conf = sp.confidence
        out.append({"repeats": n, "confidence": conf, "covered": covered / trials,
                    "half_width_in_sd": float(np.mean(widths))})
    return out


def power_table(rng, trials: int, heavy: bool) -> list[dict]:
    out = []
    for n in REPEATS[:6]:
        row = {"repeats": n, "heavy_tailed": heavy}
        for k in (0.0, *SHIFTS):
            # relative noise of 2% around 100: a shift of k sd is k x 2%; "worse" is a drop (higher is better)
            hits = sum(noise.change(100 * (1 + 0.02 * draw(rng, n, 0.0, heavy)),
                                    100 * (1 + 0.02 * draw(rng, n, -k, heavy)), True).judged for _ in range(trials))
            row[f"{k:g}sd"] = hits / trials
        floored = sum(noise.change(100 * (1 + 0.02 * draw(rng, n, 0.0, heavy)),
                                   100 * (1 + 0.02 * draw(rng, n, 0.0, heavy)), True, floor=0.05).judged
                      for _ in range(trials))
        row["false_calls_with_5pct_floor"] = floored / trials
        out.append(row)
    return out


def smallest_shift(rows: list[dict], power: float = 0.8) -> dict[int, str]:
    """Per repeats: the smallest simulated shift (in sd) called in at least `power` of trials."""
    out = {}
    for r in rows:
        hit = next((k for k in SHIFTS if r[f"{k:g}sd"] >= power), None)
        out[r["repeats"]] = f"{hit:g} sd" if hit is not None else f"> {SHIFTS[-1]:g} sd"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    rng = np.random.default_rng(47)
    intervals = interval_table(rng, args.trials)
    print("repeats  coverage  covered  half-width (x sd)")
    for r in intervals:
        print(f"{r['repeats']:>7}  {r['confidence']:>8.1%}  {r['covered']:>7.1%}  {r['half_width_in_sd']:>17.2f}")
    powers = {heavy: power_table(rng, args.trials // 2, heavy) for heavy in (False, True)}
    for heavy, rows in powers.items():
        print(f"\ncalled worse, by shift (noise {'heavy-tailed' if heavy else 'normal'}; 0sd: false calls)")
        print("repeats  " + "  ".join(f"{k:>6}" for k in ["0sd", *(f"{s:g}sd" for s in SHIFTS)]) + "  0sd, 5% floor")
        for r in rows:
            print(f"{r['repeats']:>7}  " + "  ".join(f"{r[k]:>6.1%}" for k in ["0sd", *(f"{s:g}sd" for s in SHIFTS)])
                  + f"  {r['false_calls_with_5pct_floor']:>13.1%}")
        print("smallest shift called in 8 of 10 trials: " + ", ".join(
            f"{n} repeats {s}" for n, s in smallest_shift(rows).items()))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"noise_power-{time.strftime('%Y-%m-%dT%H%M%SZ', time.gmtime())}.json"
    path.write_text(json.dumps({"trials": args.trials, "intervals": intervals,
                                "power": {"normal": powers[False], "heavy_tailed": powers[True]}}, indent=2))
    print(f"\nraw: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
