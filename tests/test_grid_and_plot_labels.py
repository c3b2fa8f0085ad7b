"""Sweeps from the command line (`Sweep --grid`), and plots that say what they cannot show to scale:
an off-scale limit is written on the plot, Pareto points carry their QPS."""
from __future__ import annotations

import matplotlib
import pytest

from harness.config import ParamsError
from harness.config.sweeps import SweepError, parse_grid
from harness.reports import plots, sweep
from pipeline.sweep import Sweep

matplotlib.use("Agg")
from matplotlib.axes import Axes  # noqa: E402


# --- --grid ---------------------------------------------------------------------------------------

def test_grid_axes_are_read_like_a_sweep_files():
    """Values type as YAML (numbers, booleans, text); axes split on ';' or spaces."""
    assert parse_grid("loadgen.server_target_qps=10,20,40") == {"loadgen.server_target_qps": [10, 20, 40]}
    assert parse_grid("loadgen.scenario=Offline,Server; runtime.enable_chunked_context=true,false "
                      "loadgen.server_target_qps=2.5") == {
        "loadgen.scenario": ["Offline", "Server"], "runtime.enable_chunked_context": [True, False],
        "loadgen.server_target_qps": [2.5]}


@pytest.mark.parametrize("text, needle", [
    ("qps=10,20", "'qps=10,20' is not section.key=v1,v2"),
    ("loadgen.server_target_qps=", "is not section.key=v1,v2"),
    ("loadgen.server_target_qps=1;loadgen.server_target_qps=2", "given twice"),
    ("  ", "no axis given"),
])
def test_a_bad_grid_is_refused_naming_the_axis(text, needle):
    with pytest.raises(SweepError, match=needle):
        parse_grid(text)


def test_sweep_grid_builds_one_fullrun_per_value_without_a_file(artifacts):
    """`Sweep --grid` on --params-file: one FullRun point per value, each with its value as an override
    (the same points a sweep file with that grid makes); a key that does not exist is refused for
    the points, naming it."""
    task = Sweep(grid="loadgen.scenario=Server;loadgen.server_target_qps=10,20,40")
    assert task.definition_name() == "grid"
    ups = list(task.upstream().values())
    assert [u.params.loadgen.server_target_qps for u in ups] == [10, 20, 40]
    assert {u.params.loadgen.scenario for u in ups} == {"Server"}
    assert len({u.key for u in ups}) == 3
    with pytest.raises(ParamsError, match="loadgen.nope"):
        Sweep(grid="loadgen.nope=1,2")
    with pytest.raises(ParamsError, match="give --sweep FILE or --grid"):
        Sweep()
    both = Sweep(sweep="params/sweeps/batch_and_qps.yaml", grid="build.max_batch_size=4")
    assert both.definition.grid["build.max_batch_size"] == [4]  # the command line's axis replaces the file's
    added = Sweep(sweep="params/sweeps/batch_and_qps.yaml", grid="loadgen.min_duration_ms=3000,6000")
    assert added.definition.grid == {"build.max_batch_size": [8, 32], "loadgen.min_duration_ms": [3000, 6000]}


# --- off-scale limits, labelled points ---------------------------------------------------------

@pytest.fixture
def drawn(monkeypatch):
    """What the plots drew: every horizontal/vertical line's position and every annotation's text (all in
    this process: no figure drawn in a forked child)."""
    monkeypatch.setattr(plots, "FORK", False)
    seen = {"hlines": [], "vlines": [], "notes": []}
    for name, key in (("axhline", "hlines"), ("axvline", "vlines")):
        orig = getattr(Axes, name)

        def spy(self, pos=0, *a, _orig=orig, _key=key, **kw):
            seen[_key].append(pos)
            return _orig(self, pos, *a, **kw)
        monkeypatch.setattr(Axes, name, spy)
    orig_note = Axes.annotate

    def note(self, text, *a, **kw):
        seen["notes"].append(text)
        return orig_note(self, text, *a, **kw)
    monkeypatch.setattr(Axes, "annotate", note)
    return seen


def _requests(ttft_ms: float) -> list[dict]:
    return [{"sample_index": i, "server": 0, "issue_ms": 50.0 * i, "ttft_ms": ttft_ms + i % 5, "latency_ms": 300.0,
             "n_tokens": 16, "tpot_ms": 2.0, "input_tokens": 10} for i in range(40)]


def test_a_limit_far_above_the_data_is_written_not_drawn(drawn, tmp_path):
    """TTFT data near 50 ms and a 2,000 ms limit: no line at 2,000 (the axes would be scaled to it and the
    data squashed at the bottom); the limit is named on the plot instead."""
    perf = {"ttft_ms": {"p99": 54.0}, "ttft_limit_ms": 2000.0, "tpot_limit_ms": 200.0, "tpot_ms": {"p99": 2.0}}
    plots.plot_all(_requests(50.0), tmp_path, "t", perf)
    assert 2000.0 not in drawn["hlines"] + drawn["vlines"]
    assert any("2,000 ms: off scale" in n for n in drawn["notes"])
    assert 54.0 in drawn["hlines"]  # LoadGen's p99 is data: still drawn


def test_figures_drawn_by_a_forked_child_come_back_in_order_and_its_failure_is_raised():
    """_render: where the host has a second CPU, every other figure is drawn in a forked child; the names
    come back in the jobs' order, and a figure that fails there fails the report here, with its traceback."""
    import os

    names = plots._render([lambda i=i: f"{i}-{os.getpid()}.png" for i in range(5)])
    assert [n.split("-")[0] for n in names] == ["0", "1", "2", "3", "4"]
    pids = {n.split("-")[1] for n in names}
    assert len(pids) == (2 if (os.cpu_count() or 1) >= 2 else 1), names

    def broken():
        raise ValueError("no such axis")
    with pytest.raises((RuntimeError, ValueError), match="no such axis"):
        plots._render([lambda: "a.png", broken, lambda: "c.png"])


def test_a_limit_near_the_data_is_still_drawn(drawn, tmp_path):
    """A limit within OFF_SCALE of the data is drawn as a line, as before."""
    perf = {"ttft_ms": {"p99": 900.0}, "ttft_limit_ms": 2000.0}
    plots.plot_all(_requests(800.0), tmp_path, "t", perf)
    assert 2000.0 in drawn["hlines"] and not any("off scale" in n for n in drawn["notes"])
    assert plots.off_scale(2000, [50, 399]) and not plots.off_scale(2000, [400.1]) and not plots.off_scale(5, [])


def test_pareto_points_are_labelled_with_their_qps(drawn, tmp_path):
    """Every streamed point in pareto_tpot.png carries its target QPS."""
    rows = [{"scenario": "Server", "loadgen.server_target_qps": q, "target_qps": q, "tokens_per_s": 10.0 * q,
             "tpot_p99_ms": 1.0 + q / 10, "valid": True, "accuracy_passed": True, "loadgen_errors": 0}
            for q in (10, 20, 40)]
    files = sweep.write_results(tmp_path, "t", ["loadgen.server_target_qps"], rows)
    assert "pareto_tpot.png" in files
    assert {"10 qps", "20 qps", "40 qps"} <= set(drawn["notes"])
