"""How one probe is judged: by LoadGen's verdict (MLPerf's rules: its latency limits, early stopping,
minimum duration and query count, no LoadGen error), or by a user's SLO (every bounded statistic at or
under its bound, no LoadGen or request error; LoadGen's own verdict is then not asked)."""
from __future__ import annotations

from harness.config.slo import RESULT_FIELDS, Limit, mlperf_limits
from harness.loadgen.verdict import error_count, invalid_reason, is_valid
from harness.search.plan import Outcome


def limits_in_force(result: dict, slo: tuple[Limit, ...]) -> tuple[Limit, ...]:
    """The user's SLO, else MLPerf's TTFT/TPOT p99 limits the run was held to (none in Offline)."""
    return slo or mlperf_limits(result.get("ttft_constraint_ms"), result.get("tpot_constraint_ms"))


def statistic(result: dict, limit: Limit) -> float | None:
    return ((result.get(RESULT_FIELDS[limit.metric]) or {}).get(limit.stat))


def judge(result: dict, slo: tuple[Limit, ...] = ()) -> Outcome:
    """The Outcome of a probe's result.json: passed, why not, and its margin (the worst statistic over
    its limit) and each statistic against its limit."""
    limits = limits_in_force(result, slo)
    stats, breaches, margins = {}, [], []
    for limit in limits:
        got = statistic(result, limit)
        stats[limit.name] = {"value": got, "limit": limit.bound_ms}
        if got is None:
            breaches.append(f"{limit.name} not measured" + (" (Offline does not stream: bound e2e_*)"
                                                            if limit.metric != "e2e" else ""))
            continue
        margins.append(got / limit.bound_ms)
        if got > limit.bound_ms:
            breaches.append(f"{limit.metric.upper()} {limit.stat} {got:.1f} ms > {limit.bound_ms:g} ms")
    margin = max(margins) if margins else None
    if not slo:
        reason = "" if is_valid(result) else (invalid_reason(result) or "INVALID")
        return Outcome(is_valid(result), reason, margin, stats)
    errors = error_count(result) + int(((result.get("harness") or {}).get("request_errors")) or 0)
    if errors:
        breaches.insert(0, f"{errors} error(s) in the run")
    said = "VALID" if is_valid(result) else f"INVALID ({invalid_reason(result) or 'no reason given'})"
    return Outcome(not breaches, "; ".join(breaches), margin, stats, loadgen=said)


def progress_line(n: int, axis: str, value: float, repeat: int, out: Outcome, low, high, how: str) -> str:
    """One line per probe: the load, the verdict with its reason, each statistic against its limit,
    and the bracket so far."""
    stats = ", ".join(f"{name} {('-' if s['value'] is None else format(s['value'], '.1f'))}/{s['limit']:g}"
                      for name, s in out.stats.items())
    bracket = f"[{'-' if low is None else format(low, 'g')}, {'-' if high is None else format(high, 'g')}]"
    verdict = ("PASS" if out.passed else f"FAIL ({out.reason})") + (" by the SLO" if out.loadgen else "")
    # Under an SLO, LoadGen's own verdict is not asked: a short probe is often INVALID to it (early
    # stopping needs more queries than a probe has), which is a short run's estimate, not a failed probe.
    lg = f"; LoadGen's own verdict, not asked: {out.loadgen}" if out.loadgen and out.loadgen != "VALID" else ""
    return (f"probe {n}: {axis}={value:g}{f' (repeat {repeat})' if repeat else ''} ({how}): {verdict}"
            f"{'; ' + stats if stats else ''}; bracket {bracket}{lg}")
