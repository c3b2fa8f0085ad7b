"""--repeat's summary and --converge (harness/reports/repeats.py): each observation of the run, what the
scenario is judged by as median [interval of the median], and when repeating may stop."""
from __future__ import annotations

from harness.reports.repeats import converged, judged_values, repeats_text


def report(tokens: float, scenario: str = "Offline", tpot99: float = 20.0, busy: bool = False, i: int = 1) -> dict:
    return {"model": "tiny", "stages": {"Bench": "b" * 64},
            "performance": {"scenario": scenario, "valid": True, "tokens_per_second": tokens,
                            "samples_per_second": tokens / 32, "ttft_ms": {"p50": 5.0, "p99": 9.0},
                            "tpot_ms": {"p50": 2.0, "p99": tpot99}, "goodput": {"samples_per_s": tokens / 32},
                            "sources": {"ttft_ms": "LoadGen", "tpot_ms": "LoadGen"}},
            "accuracy": None, "host": {"busy": busy}, "observations": {"FullRun": f"run.{i}"}}


def test_what_each_scenario_is_judged_by_and_whose_it_is():
    assert list(judged_values([report(600.0), report(610.0)])) == ["tokens/s"]
    server = judged_values([report(600.0, "Server"), report(600.0, "Server", tpot99=21.0)])
    assert list(server) == ["TTFT p99 (ms) (LoadGen)", "TPOT p99 (ms) (LoadGen)", "goodput (samples/s)"]
    assert server["TPOT p99 (ms) (LoadGen)"] == [20.0, 21.0]


def test_the_summary_gives_each_observation_and_the_interval_of_the_median():
    reports = [report(t, i=i, busy=i == 2) for i, t in enumerate((600.0, 580.0, 630.0), 1)]
    text = repeats_text("Bench", "b" * 64, reports, 3)
    assert "perfdag Bench bbbbbbbbbbbbbbbb: 3 observations in this run" in text
    assert "  1       run.1" in text and "busy" in text and "quiet" in text
    assert "judged by, median [interval of the median, 75% confidence] over 3 repeats:" in text
    assert "    tokens/s  600 [580..630]  (+-4.2%)" in text
    assert "WARNING    1 of 3 repeats ran on a busy host" in text


def test_repeating_stops_once_the_median_is_known_within_the_width_at_95_percent():
    steady = [report(600.0 + d) for d in (0.0, 1.0, -1.0, 2.0, -2.0, 0.5)]
    assert not converged(steady[:5], 0.01)  # 5 repeats: no 95% interval yet
    assert converged(steady, 0.01) and not converged(steady, 0.001)
    text = repeats_text("FullRun", "f" * 64, steady, 20)
    assert "6 observations in this run (of --repeat 20: converged)" in text
    noisy = [report(t) for t in (600.0, 700.0, 500.0, 650.0, 550.0, 620.0)]
    assert not converged(noisy, 0.05)
