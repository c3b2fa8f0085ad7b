"""The noise model (harness/stats/noise.py): intervals of the median, and changes called only outside the
noise, checked on synthetic series with a known shift and with none."""
from __future__ import annotations

import numpy as np
import pytest

from harness.stats import noise
from harness.stats.noise import BETTER, NOT_JUDGED, WITHIN, WORSE, change, converged, spread


def test_the_median_and_its_distribution_free_interval():
    assert spread([]) is None and spread([None, float("nan")]) is None
    one = spread([5.0])
    assert (one.median, one.low, one.high, one.confidence) == (5.0, 5.0, 5.0, None) and one.half_width is None
    three = spread([3.0, 1.0, 2.0])
    assert (three.median, three.low, three.high, three.confidence) == (2.0, 1.0, 3.0, 0.75)
    four = spread([1, 2, 3, 10])
    assert four.median == 2.5 and four.confidence == 0.875
    # 9 repeats: [x(2), x(8)] covers 96.1%, the narrowest interval that reaches 95%
    nine = spread(range(1, 10))
    assert (nine.low, nine.high, nine.confidence) == (2.0, 8.0, 0.9609)
    assert noise.fmt_spread(three) == "2 [1..3]" and noise.fmt_spread(one) == "5" and noise.fmt_spread(None) == "-"
    assert noise.from_dict(three.as_dict()) == three and noise.from_dict({"x": 1}) is None


def test_too_few_repeats_are_not_judged_and_one_configuration_never_differs_from_itself():
    c = change([100.0], [60.0], higher_is_better=True)
    assert c.verdict == NOT_JUDGED and c.rel == pytest.approx(-0.4) and "--repeat 3" in c.why
    assert change([100, 101], [60, 61], True).verdict == NOT_JUDGED  # 2 against 2: p >= 1/3
    assert change([5, 5, 5], [5, 5, 5], False).verdict == WITHIN
    assert change([1, 2, 3], [7, 8, 9], None).verdict == NOT_JUDGED  # no direction: shown only


def test_direction_floor_and_ties():
    up = change([100, 101, 102], [120, 121, 119], higher_is_better=True)
    assert up.verdict == BETTER and up.p == pytest.approx(0.1) and "Mann-Whitney" in up.why
    assert change([100, 101, 102], [120, 121, 119], higher_is_better=False).verdict == WORSE
    assert change([100, 101, 102], [103, 104, 105], True, floor=0.05).verdict == WITHIN  # separated, under 5%
    tied = change([10, 10, 11, 11], [20, 20, 21, 21], True)  # ties: an exact permutation test
    assert tied.verdict == BETTER and tied.p == pytest.approx(2 / 70)


@pytest.mark.parametrize("sd", [0.03, 0.10])
def test_series_that_differ_only_by_noise_are_within_noise_at_the_stated_rate(sd):
    """No shift: the share of trials called worse or better stays at or under ALPHA (it is ALPHA
    exactly at 3 repeats: 2 of the 20 equally likely orders separate the two sets)."""
    rng = np.random.default_rng(47)
    trials = 600  # the rate's standard error: 0.012
    called = sum(change(rng.lognormal(0, sd, 3) * 600, rng.lognormal(0, sd, 3) * 600, True).judged
                 for _ in range(trials))
    assert called / trials <= noise.ALPHA + 0.035
    # the same with Nightly's 5% floor: fewer still
    floored = sum(change(rng.lognormal(0, sd, 3) * 600, rng.lognormal(0, sd, 3) * 600, True, floor=0.05).judged
                  for _ in range(trials))
    assert floored <= called


def test_a_real_shift_of_the_stated_size_is_called():
    """docs/measuring.md: at 3 repeats each, a shift of 3x the run-to-run noise (relative sd) is called in
    about 9 trials of 10, and 2.6x in 8 of 10; a 20% drop under 5% noise (4x) in 49 of 50."""
    rng = np.random.default_rng(7)
    trials = 600  # the rates' standard error: about 0.015
    for shift_sd, at_least in ((3.0, 0.85), (2.6, 0.75)):
        hits = sum(change(rng.normal(1, 0.05, 3), rng.normal(1 - shift_sd * 0.05, 0.05, 3), True).verdict == WORSE
                   for _ in range(trials))
        assert hits / trials >= at_least, (shift_sd, hits / trials)
    assert sum(change(rng.normal(600, 30, 3), rng.normal(480, 30, 3), True).verdict == WORSE
               for _ in range(200)) >= 190


def test_convergence_needs_a_95_percent_interval_within_the_width():
    assert not converged([100, 100.5, 99.5], 0.05)  # 3 repeats: a 75% interval only
    assert converged([100, 100.5, 99.5, 100.2, 99.8, 100.1], 0.01)
    assert not converged([100, 130, 70, 110, 90, 100], 0.05)
