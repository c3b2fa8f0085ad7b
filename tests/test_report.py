"""What a run reports: why LoadGen called it INVALID (from real LoadGen logs), the report's plots,
the sweep's plots and rows, and third-party chatter kept out of the summary unless --verbose."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO

from harness.loadgen.results import parse_summary
from harness.reports.plots import arrival_bins, offsets, request_stats, stats_markdown
from harness.reports.report import plot
from harness.reports.sweep import lookup, point_kind, text_table, write_results

# A LoadGen run against a SUT that answers at once (after `delay_s`), in its own process (one
# LoadGen test per process): LoadGen's own verdicts, not made-up logs.
FAKE_SUT = textwrap.dedent("""
    import array, sys, threading, time, mlperf_loadgen as lg
    out, scenario, qps, min_ms, min_q, ttft_ms, delay_s = sys.argv[1:8]
    s = lg.TestSettings()
    s.FromConfig("", "llama2-70b", scenario, 0)   # mlperf.conf values and seeds, no user.conf
    s.scenario = getattr(lg.TestScenario, scenario)
    s.mode = lg.TestMode.PerformanceOnly
    s.min_duration_ms, s.min_query_count = int(min_ms), int(min_q)
    s.performance_sample_count_override = 64
    s.sample_concatenate_permutation = False
    if scenario == "Offline":
        s.offline_expected_qps = float(qps)
    else:
        s.server_target_qps, s.ttft_latency = float(qps), int(float(ttft_ms) * 1e6)
    keep = []
    def answer(samples):
        time.sleep(float(delay_s))
        for q in samples:
            a = array.array("i", [5, 6, 7, 8]); keep.append(a); p, _ = a.buffer_info()
            if scenario != "Offline":
                lg.FirstTokenComplete([lg.QuerySampleResponse(q.id, p, 4)])
            lg.QuerySamplesComplete([lg.QuerySampleResponse(q.id, p, 16, 4)])
    def issue(samples):
        threading.Thread(target=answer, args=(samples,)).start()
    sut = lg.ConstructSUT(issue, lambda: None)
    qsl = lg.ConstructQSL(64, 64, lambda x: None, lambda x: None)
    ls = lg.LogSettings(); ls.log_output.outdir = out; ls.log_output.copy_summary_to_stdout = False
    lg.StartTestWithLogSettings(sut, qsl, s, ls, "/nonexistent/audit.config")
""")


def loadgen_run(tmp_path: Path, name: str, *args) -> dict:
    out = tmp_path / name
    out.mkdir()
    subprocess.run([sys.executable, "-c", FAKE_SUT, str(out), *map(str, args)], check=True, timeout=120,
                   capture_output=True)
    return parse_summary(out)


def test_invalid_runs_name_their_reason_from_loadgen_logs(tmp_path):
    # Offline: 11 samples answered at once, but 2 s were required
    r = loadgen_run(tmp_path, "offline", "Offline", 10, 2000, 1, 0, 0)
    assert r["valid"] == "INVALID" and r["invalid_reason"].startswith("min duration not met")
    assert "offline_expected_qps" in r["invalid_reason"] and "< min_duration 2.0 s" in r["invalid_reason"]
    # Server: 64 queries are too few for early stopping to judge the 99th percentile
    r = loadgen_run(tmp_path, "server", "Server", 100, 100, 64, 2000, 0)
    assert r["valid"] == "INVALID"
    assert "early stopping not met" in r["invalid_reason"] and "processed 64 queries" in r["invalid_reason"]
    assert r["invalid_reasons"] and all(x for x in r["invalid_reasons"])
    # Server: every first token takes 20 ms, the limit is 1 ms
    r = loadgen_run(tmp_path, "latency", "Server", 100, 100, 64, 1, 0.02)
    assert "latency constraint not met: TTFT p99" in r["invalid_reason"] and "> 1.0 ms" in r["invalid_reason"]
    # a VALID run has no reason
    r = loadgen_run(tmp_path, "valid", "Offline", 1000, 100, 1, 0, 0.3)
    assert r["valid"] == "VALID" and r["invalid_reason"] is None and r["invalid_reasons"] == []


def requests_at(rate_per_s: float, seconds: float, tokens: int = 32, ttft: float | None = 5.0) -> list[dict]:
    n = int(rate_per_s * seconds)
    return [{"sample_index": i, "server": 0, "issue_ms": i * 1000 / rate_per_s, "latency_ms": 40.0,
             "ttft_ms": ttft, "n_tokens": tokens, "tpot_ms": 1.1 if ttft else None} for i in range(n)]


@pytest.mark.parametrize("seconds", [10.05, 10.3, 10.9, 3.02])
def test_throughput_bins_do_not_fake_a_drop_at_the_end(seconds):
    """A steady 100 requests/s: every bin after the first (completions start 40 ms in), the partial
    last one included, reads ~3200 tokens/s."""
    edges, rates = arrival_bins(requests_at(100, seconds))
    widths = np.diff(edges)
    assert edges[0] == 0 and abs(edges[-1] - (seconds + 0.04)) < 0.02  # up to the last completion
    assert min(widths) >= 0.5 * max(widths[:-1] if len(widths) > 1 else widths)
    assert all(abs(r - 3200) / 3200 < 0.15 for r in rates[1:-1]), rates


def test_offline_bins_hold_several_completions_and_streamed_tokens_count_when_they_arrive():
    """Non-streamed: 2,048 requests of 32 tokens completing evenly over 6.4 s read ~10,240 tokens/s
    in every bin (a bin holds several completions: no staircase of whole requests). Streamed: one
    request whose 11 tokens arrive from 1 s to 3 s counts them there, not at its completion."""
    reqs = [{"sample_index": i, "issue_ms": 0.0, "latency_ms": 3.125 * (i + 1), "ttft_ms": None, "n_tokens": 32,
             "tpot_ms": None} for i in range(2048)]
    edges, rates = arrival_bins(reqs)
    assert abs(sum(rates * np.diff(edges)) - 2048 * 32) < 1e-6  # every token counted once
    assert all(abs(r - 10240) / 10240 < 0.1 for r in rates), rates
    one = [{"sample_index": 0, "issue_ms": 0.0, "ttft_ms": 1000.0, "latency_ms": 3000.0, "n_tokens": 11, "tpot_ms": 200.0}]
    edges, rates = arrival_bins(one)
    tokens = rates * np.diff(edges)
    assert abs(tokens.sum() - 11) < 1e-9 and tokens[edges[:-1] < 0.99].sum() == 0  # nothing before the first token


def test_report_plots_and_per_request_stats(tmp_path):
    perf = {"tokens_per_second": 3200.0, "ttft_limit_ms": 2000.0, "tpot_limit_ms": 200.0,
            "ttft_ms": {"p99": 5.5}, "tpot_ms": {"p99": 1.2}, "latency_ms": {"p99": 41.0}}
    reqs = [{**r, "input_tokens": 8 + i % 5} for i, r in enumerate(requests_at(100, 5))]
    files = plot(reqs, tmp_path, "t Server", perf)
    assert files == ["throughput.png", "latency_over_time.png", "distributions.png", "lengths.png"]
    assert all((tmp_path / f).stat().st_size > 5000 for f in files)
    offline = tmp_path / "offline"
    offline.mkdir()
    assert plot(requests_at(100, 5, ttft=None), offline, "t Offline", {}) == ["throughput.png", "lengths.png"]
    stats = request_stats(reqs)
    assert stats["ttft_ms"]["p99"] == 5.0 and stats["input_tokens"]["max"] == 12 and stats["output_tokens"]["std"] == 0
    assert set(stats["latency_ms"]) == {"min", "mean", "std", "p50", "p90", "p99", "max", "n"}
    offs = offsets(perf, stats)
    assert offs["ttft_ms"]["client_minus_loadgen"] == -0.5  # the client's clock reads 0.5 ms under LoadGen's
    md = "\n".join(stats_markdown(stats, offs))
    assert "| TTFT | ms | 500 | 5 | 5 | 0 | 5 | 5 | 5 | 5 |" in md
    assert "TTFT 5 vs 5.50 ms (-0.50 ms)" in md and "Client-side" in md


def test_sweep_plots_keep_scenarios_apart_and_mark_invalid_points(tmp_path):
    base = {"samples_per_s": 1.0, "accuracy_passed": True, "fullrun_key": "k"}
    rows = [{**base, "build.max_batch_size": b, "loadgen.scenario": "Offline", "scenario": "Offline",
             "tokens_per_s": 9000.0 + b, "ttft_p99_ms": None, "tpot_p99_ms": None, "valid": b == 32} for b in (8, 32)]
    rows.append({**base, "build.max_batch_size": 32, "loadgen.scenario": "Server", "scenario": "Server",
                 "tokens_per_s": 600.0, "ttft_p99_ms": 20.0, "tpot_p99_ms": 2.0, "valid": True})
    files = write_results(tmp_path, "s", ["build.max_batch_size", "loadgen.scenario"], rows)
    # no tokens/s-vs-scenario plot (it would put Offline and Server tokens/s on one axis)
    assert files == ["tokens_per_s_vs_build_max_batch_size.png", "pareto_tpot.png"]
    assert [point_kind(r) for r in rows] == ["invalid", "ok", "ok"]
    assert "| Offline | 8 |" in (tmp_path / "sweep.md").read_text()


def batch_and_qps_rows() -> tuple[list[str], list[dict]]:
    """params/sweeps/batch_and_qps.yaml's shape: a batch x Offline-QPS grid and one Server point."""
    base = {"accuracy_passed": True, "fullrun_key": "k", "invalid_reason": None, "ttft_p99_ms": None,
            "tpot_p99_ms": None, "samples_per_s": 60.0, "valid": True}
    rows = [{**base, "build.max_batch_size": b, "loadgen.offline_expected_qps": q, "loadgen.scenario": "Offline",
             "loadgen.server_target_qps": 20, "scenario": "Offline", "tokens_per_s": 2000.0 + 30 * b + q / 2}
            for b in (8, 32) for q in (300, 600)]
    rows.append({**base, "build.max_batch_size": 32, "loadgen.offline_expected_qps": 300, "loadgen.scenario": "Server",
                 "loadgen.server_target_qps": 20, "scenario": "Server", "tokens_per_s": 617.4, "ttft_p99_ms": 480.93,
                 "tpot_p99_ms": 10.05})
    return ["build.max_batch_size", "loadgen.offline_expected_qps", "loadgen.scenario", "loadgen.server_target_qps"], rows


def test_sweep_table_columns_come_from_what_was_varied_and_fit_each_row(tmp_path):
    varied, rows = batch_and_qps_rows()
    write_results(tmp_path, "s", varied, rows)
    lines = (tmp_path / "sweep.md").read_text().splitlines()
    header = next(x for x in lines if x.startswith("| scenario"))
    assert header.count("scenario") == 1  # not both loadgen.scenario and scenario
    assert "fullrun_key" not in header and "invalid_reason" not in header
    assert any(x.startswith("| Offline | 8 | 300 | - | 2390 |") for x in lines)  # 300 not 300.00; no server QPS
    assert any(x.startswith("| Server | 32 | - | 20 | 617.4 |") for x in lines)  # no Offline QPS on a Server row
    assert "|" not in text_table(varied, rows).splitlines()[0] and "617.4" in text_table(varied, rows)


def test_sweep_plots_only_over_what_varied_with_one_series_per_other_value(tmp_path, monkeypatch):
    varied, rows = batch_and_qps_rows()
    files = write_results(tmp_path, "s", varied, rows)
    # server_target_qps took one value on the one Server point: no plot over it (nor Offline points against it)
    assert files == ["tokens_per_s_vs_build_max_batch_size.png", "tokens_per_s_vs_loadgen_offline_expected_qps.png",
                     "pareto_tpot.png"]
    import harness.reports.sweep as sweep_mod

    drawn, real = [], sweep_mod._series_panel

    def spy(ax, key, others, pts):
        real(ax, key, others, pts)
        drawn.append((key, pts, [t.get_text() for t in ax.get_legend().get_texts()]))

    monkeypatch.setattr(sweep_mod, "_series_panel", spy)
    write_results(tmp_path, "s", varied, rows)
    (pts, labels), = [(p, lab) for k, p, lab in drawn if k == "loadgen.offline_expected_qps"]
    assert {r["scenario"] for r in pts} == {"Offline"} and len(pts) == 4  # the Server point has no Offline QPS
    assert labels[:2] == ["build.max_batch_size=8", "build.max_batch_size=32"]  # a series per batch size


def test_a_sweep_point_that_leaves_a_parameter_at_its_default_shows_the_default(tmp_path):
    from luigi.task_register import Register

    from pipeline import Sweep

    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"name: s\nbase: {REPO / 'params' / 'default.yaml'}\ngrid:\n  build.max_batch_size: [8]\n"
                     "points:\n  - {loadgen.scenario: Server}\n")
    Register.clear_instance_cache()
    task = Sweep(sweep=str(sweep))
    values = [lookup(t.params.model_dump(mode="json"), "build.max_batch_size") for t in task.upstream().values()]
    assert values == [8, 32]  # the Server point ran with the default batch size, not None


THIRD_PARTY_CHATTER = textwrap.dedent("""
    import sys, warnings
    from tasks import lifecycle
    lifecycle.setup(verbose=sys.argv[1] == "1")
    exec("print('Inserted 56 quantizers'); import warnings; warnings.warn('transformers is not tested')",
         {"__name__": "modelopt.torch.quantization"})
    print("perfdag summary line")
""")


@pytest.mark.parametrize("verbose", [False, True])
def test_third_party_chatter_is_kept_out_unless_verbose(tmp_path, verbose):
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(tmp_path / "a"), "PYTHONPATH": str(REPO)}
    env.pop("PERFDAG_RUN_ID", None)
    p = subprocess.run([sys.executable, "-c", THIRD_PARTY_CHATTER, "1" if verbose else "0"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "perfdag summary line" in p.stdout
    shown = "Inserted 56 quantizers" in p.stdout and "transformers is not tested" in p.stderr
    assert shown == verbose
    logs = list((tmp_path / "a" / "runs").glob("*/third_party.log"))
    if not verbose:
        (log,) = logs
        assert "Inserted 56 quantizers" in log.read_text() and "transformers is not tested" in log.read_text()
        assert "third_party.log (--verbose shows them)" in p.stderr


@pytest.mark.parametrize("bound", [True, False])
def test_report_and_summary_warn_when_the_client_was_the_bottleneck(tmp_path, bound):
    from harness.loadgen.results import client_usage
    from harness.reports.report import build_report, render_markdown, summary_text

    busy = {"cpu_s": 1.9, "wall_s": 2.0, "demand": 0.97 if bound else 0.4}
    usage = client_usage({"cpu_s": 0.1, "wall_s": 2.0, "demand": 0.05}, {0: {**busy, "peak_in_flight": 64}})
    perf = {"scenario": "Offline", "valid": "VALID", "samples_per_s": 10.0, "tokens_per_s": 320.0,
            "client_bound": usage["client_bound"], "client_bound_reason": usage["client_bound_reason"],
            "harness": {"max_in_flight": 64, "peak_in_flight": usage["peak_in_flight"]}}
    acc = {"scores": {"rouge1": 1.0, "rouge2": 1.0, "rougeL": 1.0, "tokens_per_sample": 32.0}, "target": 0.99,
           "reference_scores": {"rouge1": 1.0, "rouge2": 1.0, "rougeL": 1.0, "tokens_per_sample": 32.0},
           "passed": True}
    report = build_report({}, perf, acc, "tiny")
    md, summary = render_markdown(report, []), summary_text(report, tmp_path)
    assert "| in flight: limit / peak | 64 / 64 |" in md and "in flight  limit 64, peak 64" in summary
    assert ("client may have been the bottleneck" in md) is bound
    assert ("WARNING    client-bound: frontend 0 was busy 97%" in summary) is bound
    assert ("raise harness.frontends" in md) is bound
