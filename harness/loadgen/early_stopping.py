"""MLPerf's early-stopping estimate of a latency percentile, for every percentile a report shows.

LoadGen computes it for the one percentile a scenario constrains (SingleStream's p90, Server's
TTFT/TPOT p99: loadgen/early_stopping.cc and PerformanceSummary::EarlyStopping in results.cc at
the round's commit). The same rule, at any percentile p:

- A run of n queries whose t highest latencies are "over" the estimate passes at confidence
  c = 0.99 (tolerance d = 0) when the chance of at most t over-latency queries among h + t,
  if the true share under it were p, is below 1 - c: BetaRegularized(p - d, h, 1 + t) < 1 - c.
  `min_passing(t, p)` is the least such h.
- LoadGen needs at least min_passing(1, p) + 1 queries; then t is the largest count with
  min_passing(t, p) + t <= n, and the estimate is the (n - t)-th smallest latency (0-based), so
  the t - 1 highest are discarded.

LoadGen walks t upwards from 2; t -> min_passing(t) + t only grows, so a binary search over t
finds the same t in log n steps.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

CONFIDENCE = 0.99
TOLERANCE = 0.0


def _odds(h: int, t: int, p: float, d: float = TOLERANCE) -> float:
    """P(at most t of h + t queries over), each under with probability p - d."""
    from scipy.special import betainc

    return float(betainc(h, 1 + t, p - d))


def min_passing(t: int, p: float, d: float = TOLERANCE, c: float = CONFIDENCE) -> int:
    """The least h with _odds(h, t, p, d) < 1 - c."""
    lo, hi = 1, max(2, math.ceil(math.log(1 - c) / math.log(p - d)))
    while _odds(hi, t, p, d) >= 1 - c:  # grow the bracket (t over-latency queries need more under)
        lo, hi = hi, hi * 2
    while lo < hi:
        mid = (lo + hi) // 2
        if _odds(mid, t, p, d) < 1 - c:
            hi = mid
        else:
            lo = mid + 1
    return lo


def queries_needed(p: float) -> int:
    """The fewest queries LoadGen estimates percentile p from."""
    return min_passing(1, p) + 1


def estimate(values: Sequence[float] | np.ndarray, p: float) -> float | None:
    """The early-stopping estimate of percentile p (0 < p < 1) of `values`; None with too few."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    n = int(v.size)
    if n < queries_needed(p):
        return None
    lo, hi = 1, n  # the largest t with min_passing(t) + t <= n (t = 1 always qualifies here)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if min_passing(mid, p) + mid <= n:
            lo = mid
        else:
            hi = mid - 1
    return float(v[n - lo])
