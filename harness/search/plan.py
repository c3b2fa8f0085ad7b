"""The search as a generator: it yields the probe it wants next and is sent that probe's Outcome, so
the same plan runs against luigi stages (pipeline/search.py) or a plain function (`drive`).

Bracket, then bisect: from `start` the load grows by `growth` while probes pass (or shrinks while they
fail) until one passes and the next fails; then the midpoint is probed until the bracket's width is
within `tolerance` of its low end (for a whole-number axis such as concurrency: until it is 1 wide).

The noise rule: a load whose first run's worst statistic lies within `noise` of its limit (a pass or a
fail near the knee) is run `repeats` times in all, with other LoadGen seeds, as aiperf runs trials; a
load far from every limit is run once. A load passes only if every run passes, so the search errs
low: the load it reports passed every time it was run. A load whose runs disagree flips: the knee
lies there, and it is tried again, up to `repeats` more times, while the search's budget of `retries`
lasts, so each load's evidence (runs that passed / runs, `Result.tried`) says how sure its verdict is.

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
    loadgen: str = ""  # LoadGen's own verdict where an SLO judged instead (not asked: shown as what it is)

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
    repeats: int = 3
    retries: int = 3
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

    @property
    def tried(self) -> dict[float, tuple[int, int]]:
        """Each load probed: (runs that passed, runs), in the order first probed."""
        out: dict[float, tuple[int, int]] = {}
        for probe, out_ in self.runs:
            passes, runs = out.get(probe.value, (0, 0))
            out[probe.value] = (passes + bool(out_.passed), runs + 1)
        return out


class _OutOfProbes(Exception):
    pass


def plan(p: Plan) -> Generator[Probe, Outcome, Result]:
    runs: list[tuple[Probe, Outcome]] = []
    judged: dict[float, bool] = {}
    budget = [p.retries]  # further tries, search-wide, for loads whose runs disagree

    def run(value: float, k: int) -> Generator[Probe, Outcome, Outcome]:
        if len(runs) >= p.max_probes:
            raise _OutOfProbes
        probe = Probe(value, k)
        out = yield probe
        runs.append((probe, out))
        return out

    def judge(value: float) -> Generator[Probe, Outcome, bool]:
        if value in judged:
            return judged[value]
        tries = [(yield from run(value, 0))]
        if tries[0].near(p.noise):  # near the knee: its trials
            while len(tries) < p.repeats:
                tries.append((yield from run(value, len(tries))))
        while len({o.passed for o in tries}) > 1 and budget[0] > 0 and len(tries) < 2 * p.repeats:  # it flips
            budget[0] -= 1
            tries.append((yield from run(value, len(tries))))
        judged[value] = all(o.passed for o in tries)
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
