"""A run cut into windows (harness/reports/windows.py): each window's completions, tokens and latency,
whose they are, in report.json and report.md."""
from __future__ import annotations

import pytest

from harness.reports.windows import markdown, time_slices


def _req(issue_ms, latency_ms, tokens=10, ttft=5.0, tpot=1.0):
    return {"issue_ms": issue_ms, "latency_ms": latency_ms, "n_tokens": tokens, "ttft_ms": ttft, "tpot_ms": tpot}


def test_a_run_that_slows_down_shows_it_window_by_window():
    """The first half answers in 100 ms with a 5 ms TTFT, the second in 400 ms with 50 ms: the windows
    say when; every completion is counted once, the last at the run's end included."""
    fast = [_req(t, 100, ttft=5) for t in range(0, 900, 100)]        # issued 0-800 ms, done 100-900 ms
    slow = [_req(t, 400, ttft=50) for t in range(1000, 1700, 100)]   # issued 1000-1600 ms, done 1400-2000 ms
    s = time_slices(fast + slow, windows=4)
    assert s["window_s"] == pytest.approx(0.5) and "client-side" in s["basis"]
    w = s["windows"]
    assert [x["completed"] for x in w] == [4, 5, 1, 6]  # the last window holds the run's last completion
    assert [x["issued"] for x in w] == [5, 4, 5, 2]
    assert [x["ttft_ms"]["p50"] for x in w] == [5, 5, 50, 50]
    assert w[0]["tokens_per_s"] == pytest.approx(4 * 10 / 0.5) and w[2]["samples_per_s"] == pytest.approx(2)
    table = markdown(s)
    assert table[1] == "## Over time (4 windows of 0.5 s)" and table[3].startswith("Whose: client-side")
    assert table[-1].startswith("| 1.5-2 | 6 | 12.00 | 120.0 | 2 | 50.00 / 50.00 |")


def test_no_timed_request_no_windows():
    assert time_slices([]) is None and time_slices([{"issue_ms": 0, "latency_ms": None}]) is None
    assert markdown(None) == []
