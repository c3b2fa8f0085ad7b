"""Goodput (harness/loadgen/goodput.py): the share of requests that met the SLO in force and the
throughput they make up, in result.json, the summary and report.md."""
from __future__ import annotations

import pytest

from harness.config.slo import mlperf_limits, parse_slo
from harness.loadgen.goodput import goodput, goodput_line, meets
from harness.reports.report import build_report, render_markdown, summary_text


def _req(issue, ttft, latency, n=10, tpot=None):
    return {"sample_index": 0, "server": 0, "issue_ms": issue, "ttft_ms": ttft, "latency_ms": latency,
            "n_tokens": n, "tpot_ms": tpot if tpot is not None else (None if ttft is None else (latency - ttft) / (n - 1))}


def test_a_request_meets_the_slo_only_when_each_of_its_own_values_is_within_its_bound():
    """Every bounded metric of the request counts, on the bound (<=) passes, a metric it lacks fails."""
    slo = parse_slo("ttft_p99_ms<=100,tpot_p99_ms<=10")
    assert meets(_req(0, 100, 190), slo)  # TTFT on the bound, TPOT exactly 10
    assert not meets(_req(0, 100.5, 190), slo)
    assert not meets(_req(0, 50, 200), slo)  # TPOT 16.7
    assert not meets(_req(0, None, 50), slo)  # not streamed: no TTFT to meet it with
    assert meets(_req(0, None, 50), parse_slo("e2e_p50_ms<=50")) and meets(_req(0, None, 5000), ())


def test_goodput_counts_the_good_requests_over_the_runs_span():
    """share = good / all; the throughputs count good requests (and their tokens) over first issue to last
    completion; MLPerf's limits by default, none in Offline (every completed request counts)."""
    reqs = [_req(0, 50, 500), _req(500, 3000, 3500), _req(1000, 80, 1000, n=20)]  # the second misses TTFT 2000
    g = goodput(reqs, mlperf_limits(2000.0, 200.0))
    assert g == {"slo": "ttft_p99_ms<=2000,tpot_p99_ms<=200", "requests": 3, "good": 2, "share": pytest.approx(0.6667),
                 "samples_per_s": pytest.approx(2 / 4.0), "tokens_per_s": pytest.approx(30 / 4.0)}
    offline = goodput(reqs, mlperf_limits(None, None))
    assert offline["good"] == 3 and offline["slo"] == "" and goodput([], ()) is None
    assert "3 requests completed (no latency limits in force)" in goodput_line(offline)
    assert goodput_line(g).startswith("66.7% of 3 requests met ttft_p99_ms<=2000,tpot_p99_ms<=200: 0.5 samples/s")


def test_goodput_is_in_the_report_and_the_summary(tmp_path):
    """report.json carries result.json's goodput; report.md and the terminal summary say it."""
    perf = {"scenario": "Server", "valid": "VALID", "samples_per_s": 10.0, "tokens_per_s": 320.0,
            "ttft_ms": {"p50": 1.0, "p90": 2.0, "p99": 3.0}, "tpot_ms": None, "latency_ms": None,
            "goodput": goodput([_req(0, 50, 500), _req(500, 3000, 3500)], mlperf_limits(2000.0, 200.0))}
    accuracy = {"scores": {"rouge1": 1.0}, "required": ["rouge1"], "target": 0.99, "reference_scores": {"rouge1": 1.0},
                "passed": True}
    report = build_report({"RunLoadgen": "k" * 64}, perf, accuracy, "m")
    assert report["performance"]["goodput"]["good"] == 1
    line = "50.0% of 2 requests met ttft_p99_ms<=2000,tpot_p99_ms<=200"
    assert line in render_markdown(report, []) and f"goodput    {line}" in summary_text(report, tmp_path)


def test_a_closed_loops_goodput_spans_first_issue_to_last_completion(tmp_path):
    """Offline at one request in flight: LoadGen issues all four at once, the client sends each as the
    last completes, and latency starts at the send. The run spans 0..400 ms, so 10 requests/s, not the
    40 that the first issue plus one request's latency would give (requests.csv's start_ms says where
    each latency starts)."""
    from harness.loadgen.results import read_requests_csv, write_requests_csv

    ms = 1_000_000
    records = [(i, 0, 0, 0, (i + 1) * 100 * ms, 8, i * 100 * ms) for i in range(4)]  # issued at 0, sent in turn
    write_requests_csv(tmp_path / "requests.csv", records, 0, from_send=True)
    reqs = read_requests_csv(tmp_path / "requests.csv")
    assert [r["latency_ms"] for r in reqs] == [100.0] * 4 and [r["start_ms"] for r in reqs] == [0, 100, 200, 300]
    g = goodput(reqs, ())
    assert g["samples_per_s"] == pytest.approx(10.0) and g["tokens_per_s"] == pytest.approx(80.0)
