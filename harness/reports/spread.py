"""A point measured several times (FullRun --repeat), as tables and plots show it (no luigi): one row with
each measured field's median and interval (harness/stats/noise.py), error bars, and its place on a
Pareto front that knows the noise: a point beaten only within the noise of the repeats is not beaten."""
from __future__ import annotations

from harness.stats import noise

#: A row's measured fields: with repeats, each is the median of its repeats, with its spread.
MEASURED = ("tokens_per_s", "samples_per_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
            "goodput_share", "goodput_samples_per_s", "latency_p90_ms")


def aggregate(rows: list[dict]) -> dict:
    """One point measured several times (FullRun --repeat) as one row: each measured field the median of
    the repeats, `spread` (field -> the median and its interval, harness/stats/noise.py) and `values`
    (field -> each repeat's); VALID and accuracy PASS only when every repeat is (`valid_repeats` counts);
    `observations` names every repeat's."""
    if len(rows) == 1:
        return rows[0]
    out = {**rows[0], "spread": {}, "values": {}, "repeats": len(rows)}
    for k in MEASURED:
        vals = [r.get(k) for r in rows]
        sp = noise.spread(vals)
        out[k] = None if sp is None else sp.median
        if sp is not None:
            out["spread"][k], out["values"][k] = sp.as_dict(), vals
    out["valid"] = all(r.get("valid") for r in rows)
    out["valid_repeats"] = f"{sum(bool(r.get('valid')) for r in rows)}/{len(rows)}"
    out["invalid_reason"] = next((r["invalid_reason"] for r in rows if r.get("invalid_reason")), None)
    passed = [r.get("accuracy_passed") for r in rows]
    out["accuracy_passed"] = None if all(p is None for p in passed) else all(p is not False for p in passed)
    out["relaunches"] = sum(r.get("relaunches") or 0 for r in rows)
    out["loadgen_errors"] = sum(r.get("loadgen_errors") or 0 for r in rows)
    out["observations"] = [r.get("observation") for r in rows]
    return out


def error_bar(rows: list[dict], k: str) -> list[list[float]] | None:
    """[[below], [above]] of each row's interval around its value (matplotlib's yerr), None without repeats."""
    spreads = [noise.from_dict((r.get("spread") or {}).get(k)) for r in rows]
    if not any(sp is not None and sp.confidence is not None for sp in spreads):
        return None
    return [[max(0.0, r[k] - sp.low) if sp else 0.0 for r, sp in zip(rows, spreads)],
            [max(0.0, sp.high - r[k]) if sp else 0.0 for r, sp in zip(rows, spreads)]]


FRONT, ALIKE, BEATEN = "front", "indistinguishable", "dominated"


def front_marks(rows: list[dict], x: str, y: str, x_higher: bool, y_higher: bool) -> list[str | None]:
    """Each row's place on the Pareto front of (`x`, `y`), by median: FRONT (no other row beats it on
    both), ALIKE (each row that beats it does so within the noise: the repeats of neither axis differ,
    harness/stats/noise.py), or BEATEN; None without both values. Without repeats (`values`) the noise is
    unknown and a beaten row is BEATEN."""
    def sign(v, higher):
        return v if higher else -v
    pts = [(i, sign(r[x], x_higher), sign(r[y], y_higher)) for i, r in enumerate(rows)
           if r.get(x) is not None and r.get(y) is not None]
    out: list[str | None] = [None] * len(rows)
    for i, xi, yi in pts:
        beaten_by = [j for j, xj, yj in pts if j != i and xj >= xi and yj >= yi and (xj > xi or yj > yi)]
        if not beaten_by:
            out[i] = FRONT
            continue
        out[i] = ALIKE if all(_alike(rows[i], rows[j], x, y, x_higher, y_higher) for j in beaten_by) else BEATEN
    return out


def _alike(a: dict, b: dict, x: str, y: str, x_higher: bool, y_higher: bool) -> bool:
    """Whether the noise cannot tell `a` from `b` on either axis (both measured 3 times at least)."""
    va, vb = a.get("values") or {}, b.get("values") or {}
    if not all(len(noise.finite(d.get(k) or ())) >= noise.MIN_REPEATS for d in (va, vb) for k in (x, y)):
        return False
    return not any(noise.change(va[k], vb[k], higher).judged for k, higher in ((x, x_higher), (y, y_higher)))
