"""Goodput: the share of a run's requests that met the SLO in force, and the throughput they make up.

A request meets the SLO when its own TTFT, TPOT and latency are at or under the bounds of the limits
on them (a percentile bounds a run; a request has one value of each). By default the SLO in force is
MLPerf's latency limits for the run's benchmark and scenario (TTFT and TPOT; Offline has none, so
every completed request counts). Read from requests.csv, the client's own per-request timings.
"""
from __future__ import annotations

from harness.config.slo import Limit

#: requests.csv's column for each SLO metric.
COLUMNS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "latency_ms"}


def meets(request: dict, limits: tuple[Limit, ...]) -> bool:
    """Whether one request met every limit (a metric it does not have, e.g. TTFT unstreamed, fails it)."""
    for limit in limits:
        got = request.get(COLUMNS[limit.metric])
        if got is None or got > limit.bound_ms:
            return False
    return True


def goodput(requests: list[dict], limits: tuple[Limit, ...]) -> dict | None:
    """{slo, requests, good, share, samples_per_s, tokens_per_s}: the throughputs over the run's span
    (first issue to last completion), counting the requests that met the SLO. None without requests."""
    from harness.loadgen.results import latency_start_ms  # numpy: the summary's goodput_line needs none

    if not requests:
        return None
    good = [r for r in requests if meets(r, limits)]
    # a closed loop's latency starts at the send, not the issue
    span_s = (max(latency_start_ms(r) + r["latency_ms"] for r in requests) - min(r["issue_ms"] for r in requests)) / 1e3
    return {"slo": ",".join(map(str, limits)),  # empty: no limits in force (Offline)
            "requests": len(requests), "good": len(good), "share": round(len(good) / len(requests), 4),
            "samples_per_s": round(len(good) / span_s, 3) if span_s > 0 else None,
            "tokens_per_s": round(sum(r["n_tokens"] for r in good) / span_s, 3) if span_s > 0 else None}


def goodput_line(g: dict | None) -> str:
    """The summary's and report's words for it."""
    if not g:
        return "-"
    said = f"met {g['slo']}" if g["slo"] else "completed (no latency limits in force)"
    return (f"{g['share']:.1%} of {g['requests']} requests {said}: "
            f"{_n(g['samples_per_s'])} samples/s, {_n(g['tokens_per_s'])} tokens/s")


def _n(v) -> str:
    return "-" if v is None else f"{v:,.1f}"
