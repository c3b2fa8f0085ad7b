"""MLPerf's early-stopping estimate at any percentile (harness/loadgen/early_stopping.py), as LoadGen
computes it for the percentile a scenario constrains: the query counts LoadGen asks for, the same t
as LoadGen's upward walk, and the estimate in the report of a run. Also the run's finish reasons
(stop / length), which come from the same per-request records."""
from __future__ import annotations

import numpy as np
import pytest

from harness.loadgen import early_stopping as E
from harness.loadgen.results import measured_stats
from harness.reports.report import build_report, render_markdown


def test_the_query_counts_loadgen_asks_for():
    """SingleStream's p90 needs 64 queries and p99 662 ("Need to process at least ... queries for early
    stopping"); a Server run with no query over its p99 limit needs 459."""
    assert E.queries_needed(0.9) == 64
    assert E.queries_needed(0.99) == 662
    assert E.min_passing(0, 0.99) == 459
    assert E.queries_needed(0.999) == 6636


@pytest.mark.parametrize("p", [0.5, 0.9, 0.99])
def test_the_binary_search_finds_the_t_of_loadgens_upward_walk(p):
    rng = np.random.default_rng(7)
    for n in (E.queries_needed(p), E.queries_needed(p) + 1, 700, 1000):
        v = np.sort(rng.lognormal(size=n))
        t = 1
        for i in range(2, n + 1):  # LoadGen: stop at the first i the run is too short for
            if n < E.min_passing(i, p) + i:
                t = i - 1
                break
        assert E.estimate(v, p) == v[n - t]
        assert E.estimate(v, p) >= np.percentile(v, 100 * p, method="lower")  # an estimate errs high


def test_too_few_queries_give_no_estimate():
    assert E.estimate(np.ones(63), 0.9) is None
    assert E.estimate(np.ones(64), 0.9) == 1.0


def test_a_run_reports_the_estimate_of_every_percentile_it_has_queries_for(tmp_path):
    """700 streamed requests: p50, p90 and p99 estimated, p99.9 (6,636 queries) not; the report shows them."""
    rng = np.random.default_rng(3)
    t0 = 1_000_000_000
    records = []
    for i in range(700):
        issue = t0 + i * 1_000_000
        first = issue + int(rng.uniform(5e6, 20e6))
        records.append((i, 0, issue, first, first + 31 * 2_000_000, 32, issue))
    m = measured_stats(records, from_send=False)
    es = m["early_stopping"]
    assert set(es) == {"latency_ms", "ttft_ms", "tpot_ms"}
    assert es["ttft_ms"]["p99_9"] is None and 5 <= es["ttft_ms"]["p50"] <= es["ttft_ms"]["p99"] <= 20
    assert es["ttft_ms"]["p99"] >= m["ttft_ms"]["p99"]
    perf = {"scenario": "Offline", "valid": True, "samples_per_s": 1.0, "tokens_per_s": 1.0, "measured": m}
    report = build_report({"FullRun": "ab" * 32}, perf, None, "tiny")
    assert report["performance"]["early_stopping_estimates"] == es
    md = render_markdown(report, [])
    assert "| ttft_ms early-stopping estimate p50 / p90 / p99 / p99.9 (client) |" in md


def test_finish_reasons_come_from_each_requests_own_output_limit():
    """A synthetic workload's samples carry their own limits: 'length' is a request that reached its own."""
    records = [(i, 0, 0, 1, 10, n, 0) for i, n in enumerate((8, 3, 16, 16, 2))]
    m = measured_stats(records, limits=np.array([8, 8, 16, 32, 8]))
    assert m["finish"] == {"stop": 3, "length": 2, "from": "token counts"}
    assert measured_stats(records)["finish"] is None  # no limits given: not guessed
