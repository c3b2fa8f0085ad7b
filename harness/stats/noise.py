"""The noise model behind every verdict on a number: compare, Nightly, the frontier and sweep tables,
the search and `--repeat`'s summaries all read their intervals and their "worse" / "better" here.

Measuring one configuration again gives other numbers: the host's other work, the order in which
requests meet the server's batches, its caches. Nothing is assumed about that noise's shape (a busy
neighbour makes it one-sided and heavy-tailed), only that the repeats of one configuration are
independent draws from one distribution. So the statistics are distribution-free:

- A configuration's number is the median of its repeats, with the distribution-free confidence
  interval of the median: the order statistics x(k) and x(n+1-k) for the largest k whose coverage,
  1 - 2 P(Binomial(n, 1/2) < k), reaches CONFIDENCE. Under 6 repeats no k reaches 95%: the interval
  is then the whole range, and says its coverage (75% at 3 repeats, 94% at 5).
- Two configurations differ when the Mann-Whitney U test of their repeats (two-sided; exact, or an
  exact permutation test where values tie) gives p <= ALPHA *and* their medians differ by more than
  the caller's floor, the least change worth a verdict. 3 repeats against 3 can reach p = 0.10 at
  best (every repeat of one beyond every repeat of the other), which is why ALPHA is 0.10; fewer
  repeats cannot show any change at that level, and their difference is "not judged".

docs/measuring.md states what this detects at 3 repeats, and how many repeats a precision needs.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Iterable

CONFIDENCE = 0.95
ALPHA = 0.10
#: The fewest repeats per side that can show a change at ALPHA (3 against 3: p = 0.10).
MIN_REPEATS = 3

WORSE, BETTER, WITHIN, NOT_JUDGED = "worse", "better", "within noise", "not judged"


def finite(values: Iterable) -> list[float]:
    """The numbers among `values` (None, booleans, NaN and infinities left out)."""
    out = []
    for v in values:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out.append(float(v))
    return out


@dataclass(frozen=True)
class Spread:
    """The median of n repeats and its confidence interval [low, high] (`confidence`: its coverage;
    None for one value, which has no interval)."""
    median: float
    low: float
    high: float
    n: int
    confidence: float | None

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def half_width(self) -> float | None:
        """Half the interval's width over the median (None: no interval, or a zero median)."""
        if self.confidence is None or not self.median:
            return None
        return (self.high - self.low) / 2 / abs(self.median)


@lru_cache(maxsize=None)
def _coverage(n: int, k: int) -> float:
    """How often [x(k), x(n+1-k)] holds the true median: 1 - 2 P(Binomial(n, 1/2) <= k - 1), summed exactly
    in integers (scipy.stats' binom gives the same; importing it costs a second, which history and compare
    then spent on every call)."""
    return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n


def spread(values: Iterable) -> Spread | None:
    """The median of `values` and the distribution-free interval of the median (None: no number)."""
    xs = sorted(finite(values))
    n = len(xs)
    if not n:
        return None
    median = (xs[(n - 1) // 2] + xs[n // 2]) / 2
    if n == 1:
        return Spread(median, median, median, 1, None)
    k = 1
    while k + 1 <= n // 2 and _coverage(n, k + 1) >= CONFIDENCE:
        k += 1
    return Spread(median, xs[k - 1], xs[n - k], n, round(_coverage(n, k), 4))


def from_dict(d: dict | None) -> Spread | None:
    """A Spread written by `as_dict` (None: none, or not one)."""
    try:
        return Spread(float(d["median"]), float(d["low"]), float(d["high"]), int(d["n"]),
                      None if d.get("confidence") is None else float(d["confidence"]))
    except (TypeError, KeyError, ValueError):
        return None


def least_p(n_a: int, n_b: int) -> float:
    """The smallest two-sided p Mann-Whitney's test can give for these sizes (complete separation)."""
    if n_a < 1 or n_b < 1:
        return 1.0
    return min(1.0, 2 / math.comb(n_a + n_b, n_a))


def mann_whitney_p(a: list[float], b: list[float]) -> float:
    """Two-sided p of the Mann-Whitney U test: exact without ties, an exact permutation test with them
    (scipy falls back to a normal approximation there, which is wrong at 3 repeats)."""
    from scipy import stats  # scipy is heavy: kept off the no-op path (a cached run, status)

    if len(set(a) | set(b)) == 1:
        return 1.0
    if len(set(a + b)) == len(a) + len(b):
        return float(stats.mannwhitneyu(a, b, alternative="two-sided", method="exact").pvalue)
    method = stats.PermutationMethod(n_resamples=9999, rng=0)  # exact below 9,999 arrangements
    return float(stats.mannwhitneyu(a, b, alternative="two-sided", method=method).pvalue)


@dataclass(frozen=True)
class Change:
    """B against A: `verdict` (worse, better, within noise, not judged), the relative change of the
    medians, Mann-Whitney's p (None where not computed) and the evidence in words."""
    verdict: str
    rel: float | None
    p: float | None
    why: str

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def judged(self) -> bool:
        return self.verdict in (WORSE, BETTER)


def change(a: Iterable, b: Iterable, higher_is_better: bool | None, floor: float = 0.0,
           alpha: float = ALPHA) -> Change:
    """Whether B's repeats differ from A's by more than their noise, and which way is worse."""
    xa, xb = finite(a), finite(b)
    sa, sb = spread(xa), spread(xb)
    if sa is None or sb is None:
        return Change(NOT_JUDGED, None, None, "a side has no value")
    rel = (sb.median - sa.median) / abs(sa.median) if sa.median else (0.0 if sb.median == sa.median else None)
    if higher_is_better is None:
        return Change(NOT_JUDGED, rel, None, "shown only")
    sizes = f"{len(xa)} against {len(xb)} repeats"
    if least_p(len(xa), len(xb)) > alpha:
        return Change(NOT_JUDGED, rel, None, f"{sizes} cannot show a change at p <= {alpha:g}; "
                                             f"measure {MIN_REPEATS} each (--repeat {MIN_REPEATS})")
    p = mann_whitney_p(xa, xb)
    test = f"Mann-Whitney p = {p:.3g}, {sizes}"
    if p > alpha:
        return Change(WITHIN, rel, p, f"{test} > {alpha:g}")
    if rel is None or abs(rel) <= floor or rel == 0:
        return Change(WITHIN, rel, p, f"{test}, but the medians differ by no more than the {floor:.0%} floor")
    worse = (rel < 0) if higher_is_better else (rel > 0)
    return Change(WORSE if worse else BETTER, rel, p,
                  f"{test} <= {alpha:g}" + (f", beyond the {floor:.0%} floor" if floor else ""))


def converged(values: Iterable, width: float) -> bool:
    """Whether the median's interval, at CONFIDENCE or more, is within +-`width` of the median (needs 6
    repeats at least: fewer have no such interval)."""
    s = spread(values)
    return (s is not None and s.confidence is not None and s.confidence >= CONFIDENCE
            and s.half_width is not None and s.half_width <= width)


def fmt_spread(s: Spread | None, fmt=lambda v: f"{v:g}") -> str:
    """'617 [600..630]' (one value: '617'; none: '-'), the numbers as `fmt` writes them."""
    if s is None:
        return "-"
    if s.confidence is None or s.low == s.high:
        return fmt(s.median)
    return f"{fmt(s.median)} [{fmt(s.low)}..{fmt(s.high)}]"
