"""The search as a generator: it yields the probe it wants next and is sent that probe's Outcome, so
the same plan runs against luigi stages (pipeline/search.py) or a plain function (`drive`).

Bracket, then bisect: from `start` the load grows by `growth` while probes pass (or shrinks while they
fail) until one passes and the next fails; then the midpoint is probed until the bracket's width is
within `tolerance` of its low end (for a whole-number axis such as concurrency: until it is 1 wide).

The noise rule: a passing probe whose worst statistic lies within `noise` of its limit is run again
with other LoadGen seeds, `repeats` runs in all, and its load passes only if every run passes. A
failing run is never retried (one more run could only fail again or pass by luck), so the search errs
low: the load it reports passed every time it was run.

Every load is rounded to 4 significant digits before it is probed, so a rerun, a wider range or a
tighter tolerance asks for the same loads again and finds their probes cached.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Generator


@dataclass(frozen=True)
class Probe:
    value: float
    repeat: int = 0  # 0: the first run at this load; k: the k-th repeat (its own seed)


@dataclass
class Outcome:
    passed: bool
    reason: str = ""  # why it failed ("" when it passed)
    margin: float | None = None  # worst statistic over its limit (1.0: exactly at the limit)
    stats: dict = field(default_factory=dict)  # what the progress line and search.md show

    def near(self, noise: float) -> bool:
        return self.margin is not None and abs(self.margin - 1.0) <= noise


@dataclass(frozen=True)
class Plan:
    start: float
    lowest: float
    highest: float
    growth: float = 2.0
    tolerance: float = 0.02
    noise: float = 0.1
    repeats: int = 2
    max_probes: int = 30
    whole: bool = False  # a whole-number axis (concurrency)

    def at(self, value: float) -> float:
        """A load as it is probed: clamped to the range, rounded (stable keys), whole where the axis is."""
        v = min(max(value, self.lowest), self.highest)
        return float(max(1, round(v))) if self.whole else float(f"{v:.4g}")


@dataclass
class Result:
    found: float | None  # the highest load that passed (None: nothing passed down to `lowest`)
    low: float | None
    high: float | None  # the lowest load that failed (None: nothing failed up to `highest`)
    stopped: str  # why the search ended
    runs: list[tuple[Probe, Outcome]]


class _OutOfProbes(Exception):
    pass


def plan(p: Plan) -> Generator[Probe, Outcome, Result]:
    runs: list[tuple[Probe, Outcome]] = []
    judged: dict[float, bool] = {}

    def judge(value: float) -> Generator[Probe, Outcome, bool]:
        if value in judged:
            return judged[value]
        for k in range(p.repeats):
            if len(runs) >= p.max_probes:
                raise _OutOfProbes
            probe = Probe(value, k)
            out = yield probe
            runs.append((probe, out))
            if not out.passed or not out.near(p.noise):
                break
        judged[value] = all(o.passed for q, o in runs if q.value == value)
        return judged[value]

    low = high = None
    stopped = ""
    try:
        v = p.at(p.start)
        if (yield from judge(v)):
            low = v
            while high is None:
                if low >= p.highest:
                    stopped = f"every load passed up to the highest, {p.highest:g} (raise search.highest)"
                    break
                nxt = p.at(low * p.growth)
                if (yield from judge(nxt)):
                    low = nxt
                else:
                    high = nxt
        else:
            high = v
            while low is None:
                if high <= p.lowest:
                    stopped = f"no load passed down to the lowest, {p.lowest:g} (lower search.lowest)"
                    break
                nxt = p.at(high / p.growth)
                if (yield from judge(nxt)):
                    low = nxt
                else:
                    high = nxt
        while low is not None and high is not None and not stopped:
            if (high - low) <= p.tolerance * low or (p.whole and high - low <= 1):
                stopped = (f"the bracket [{low:g}, {high:g}] is within the tolerance"
                           + ("" if p.whole else f" ({p.tolerance:.0%})"))
                break
            mid = p.at((low + high) / 2)
            if mid in (low, high):  # rounding cannot split it further
                stopped = f"the bracket [{low:g}, {high:g}] cannot be split at 4 significant digits"
                break
            if (yield from judge(mid)):
                low = mid
            else:
                high = mid
    except _OutOfProbes:
        stopped = f"stopped after search.max_probes={p.max_probes} runs; bracket [{low}, {high}]"
    return Result(found=low, low=low, high=high, stopped=stopped, runs=runs)


def drive(p: Plan, probe: Callable[[Probe], Outcome]) -> Result:
    """Runs the plan with `probe` measuring each load in turn (tests; no cache)."""
    gen = plan(p)
    try:
        req = next(gen)
        while True:
            req = gen.send(probe(req))
    except StopIteration as stop:
        return stop.value
