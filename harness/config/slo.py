"""A service-level objective as users write it: `ttft_p99_ms<=500,tpot_p99_ms<=40`.

One limit per comma-separated term: a metric (`ttft`: time to first token, `tpot`: time per output
token after the first, `e2e`: a request's whole latency), a statistic (`p50`, `p90`, `p99` or
`mean`) and a bound in milliseconds. A run meets the SLO when every statistic is at or under its
bound; a request meets it when its own TTFT, TPOT and latency are (goodput counts those requests).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from harness.errors import InputError

METRICS = ("ttft", "tpot", "e2e")
STATS = ("p50", "p90", "p99", "mean")
#: result.json's field for each metric's statistics.
RESULT_FIELDS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "latency_ms"}

_TERM = re.compile(r"^(?P<metric>[a-z0-9]+)_(?P<stat>[a-z0-9]+)_ms\s*<=\s*(?P<bound>[0-9]+(?:\.[0-9]*)?)$")


class SloError(InputError):
    pass


@dataclass(frozen=True)
class Limit:
    metric: str  # ttft, tpot or e2e
    stat: str  # p50, p90, p99 or mean
    bound_ms: float

    @property
    def name(self) -> str:
        return f"{self.metric}_{self.stat}_ms"

    def __str__(self) -> str:
        return f"{self.name}<={self.bound_ms:g}"


def parse_slo(text: str) -> tuple[Limit, ...]:
    """The limits of an SLO string (empty: none); a bad term is one error naming it and the form."""
    limits: list[Limit] = []
    for term in (t.strip() for t in text.split(",")):
        if not term:
            continue
        m = _TERM.match(term)
        if not m or m["metric"] not in METRICS or m["stat"] not in STATS or float(m["bound"]) <= 0:
            raise SloError(f"SLO term {term!r}: write <metric>_<stat>_ms<=<bound> with metric one of "
                           f"{', '.join(METRICS)}, stat one of {', '.join(STATS)} and a bound > 0 "
                           "(e.g. ttft_p99_ms<=500,tpot_p99_ms<=40)")
        limit = Limit(m["metric"], m["stat"], float(m["bound"]))
        if any(x.name == limit.name for x in limits):
            raise SloError(f"SLO term {term!r}: {limit.name} is bounded twice; keep one")
        limits.append(limit)
    return tuple(limits)


def mlperf_limits(ttft_ms: float | None, tpot_ms: float | None) -> tuple[Limit, ...]:
    """MLPerf's latency limits as an SLO: TTFT and TPOT at the 99th percentile (none for Offline)."""
    return tuple(Limit(metric, "p99", float(v)) for metric, v in (("ttft", ttft_ms), ("tpot", tpot_ms)) if v)
