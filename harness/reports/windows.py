"""A run cut into equal windows of time: what happened in each, from the client's request log
(requests.csv), so a run that slowed down, queued up or warmed late shows it in numbers, not only in
the throughput and latency-over-time plots.

Per window: the requests that completed in it and their tokens (throughput at completion), and the
TTFT and TPOT of the requests issued in it (latency as the load of that moment met it). Every figure
is the client's: perfdag's request log, one clock for every request of the run.
"""
from __future__ import annotations

WINDOWS = 10
BASIS = ("client-side (perfdag's request log): completions and their tokens by when they completed; "
         "TTFT and TPOT of the requests issued in the window")


def time_slices(requests: list[dict], windows: int = WINDOWS) -> dict | None:
    """{"window_s", "basis", "windows": [{start_s, end_s, completed, samples_per_s, tokens_per_s,
    ttft_ms: {p50, p99}, tpot_ms: {p50, p99}}]}, or None for a run with no timed request."""
    import numpy as np  # heavy: only where a report is written

    done = [r for r in requests if r.get("latency_ms") is not None and r.get("issue_ms") is not None]
    if not done:
        return None
    issue = np.array([r["issue_ms"] for r in done], dtype=float)
    end = issue + np.array([r["latency_ms"] for r in done], dtype=float)
    tokens = np.array([r.get("n_tokens") or 0 for r in done], dtype=float)
    span = float(end.max())
    if span <= 0:
        return None
    width = span / windows
    out = []
    for i in range(windows):
        lo, hi = i * width, (i + 1) * width
        last = i == windows - 1  # the last window holds the run's last completion
        ended = (end >= lo) & ((end <= hi) if last else (end < hi))
        issued = (issue >= lo) & ((issue <= hi) if last else (issue < hi))
        out.append({"start_s": round(lo / 1e3, 3), "end_s": round(hi / 1e3, 3), "completed": int(ended.sum()),
                    "samples_per_s": round(float(ended.sum()) / (width / 1e3), 3),
                    "tokens_per_s": round(float(tokens[ended].sum()) / (width / 1e3), 1),
                    "issued": int(issued.sum()),
                    "ttft_ms": _pcts([r.get("ttft_ms") for r, x in zip(done, issued) if x]),
                    "tpot_ms": _pcts([r.get("tpot_ms") for r, x in zip(done, issued) if x])})
    return {"window_s": round(width / 1e3, 3), "basis": BASIS, "windows": out}


def _pcts(values) -> dict | None:
    import numpy as np

    v = np.array([x for x in values if x is not None], dtype=float)
    if not v.size:
        return None
    return {"p50": round(float(np.percentile(v, 50)), 3), "p99": round(float(np.percentile(v, 99)), 3)}


def markdown(slices: dict | None) -> list[str]:
    """The windows as a table, labelled whose the numbers are."""
    if not slices:
        return []
    rows = ["", f"## Over time ({len(slices['windows'])} windows of {slices['window_s']:g} s)", "",
            f"Whose: {slices['basis']}.", "",
            "| window s | completed | samples/s | tokens/s | issued | TTFT ms p50 / p99 | TPOT ms p50 / p99 |",
            "|---|---|---|---|---|---|---|"]
    for w in slices["windows"]:
        rows.append(f"| {w['start_s']:g}-{w['end_s']:g} | {w['completed']:,} | {w['samples_per_s']:,.2f} | "
                    f"{w['tokens_per_s']:,.1f} | {w['issued']:,} | {_pair(w['ttft_ms'])} | {_pair(w['tpot_ms'])} |")
    return rows


def _pair(q: dict | None) -> str:
    return "-" if not q else f"{q['p50']:,.2f} / {q['p99']:,.2f}"
