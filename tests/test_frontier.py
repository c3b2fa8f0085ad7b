"""The frontier: a streamed closed-loop concurrency sweep per engine, drawn as tokens/s per user
against tokens/s per system (per GPU where GPUs serve), with the Pareto front of the VALID points.

End to end on two engines of the FAST model: each engine built once, each level held exactly its
concurrency, the table, JSON and plot written; and TTFT in a closed loop starts at the client's
send, not at LoadGen's issue of every sample at once (which made level 1's TTFT p99 seconds)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import FAST, REPO, copied_root, tritonservers_under

from harness.reports.frontier import frontier_rows, levels, parse_levels

pytestmark = pytest.mark.timeout(900)


def test_default_levels_follow_the_endpoints_regions():
    """1..32 up to the declared maximum, doubling beyond it, and last 1.1x it."""
    assert levels(1) == [1]
    assert levels(8) == [1, 2, 4, 8, 9]
    assert levels(32) == [1, 2, 4, 8, 16, 32, 36]
    assert levels(100) == [1, 2, 4, 8, 16, 32, 64, 110]
    assert parse_levels("4, 1,2,2") == [1, 2, 4]
    for bad in ("0,1", "x", ""):
        with pytest.raises(ValueError, match="--levels"):
            parse_levels(bad)


def _row(engine, c, tps, tpot50, valid=True):
    return {"build.max_batch_size": engine, "harness.max_in_flight": c, "tokens_per_s": tps, "tpot_p50_ms": tpot50,
            "ttft_p50_ms": 1.0, "ttft_p99_ms": 2.0, "tpot_p99_ms": tpot50 * 2, "valid": valid}


def test_the_front_holds_the_valid_points_no_other_beats_on_both_axes():
    rows = frontier_rows([_row(4, 1, 500, 2.0), _row(4, 8, 2000, 5.0), _row(8, 1, 450, 2.5),
                          _row(8, 8, 2400, 4.0), _row(8, 16, 9000, 1.0, valid=False)],
                         ["build.max_batch_size"], gpus=2)
    front = {(r["engine"], r["concurrency"]) for r in rows if r["on_front"]}
    # (8,1) is beaten by (4,1) on both; (4,8) by (8,8); the INVALID point beats all and is no trade-off
    assert front == {("build.max_batch_size=4", 1), ("build.max_batch_size=8", 8)}
    assert rows[0]["tokens_per_s_per_user"] == 500.0 and rows[0]["tokens_per_s_per_gpu"] == 250.0
    assert frontier_rows([_row(4, 1, 500, 2.0)], ["build.max_batch_size"], gpus=0)[0]["tokens_per_s_per_gpu"] is None


def _repeated(engine, c, tps: list, tpot50: list):
    """A point measured len(tps) times (FullRun --repeat) as the sweep aggregates it: medians, spreads, values."""
    from harness.reports.spread import aggregate

    return aggregate([{**_row(engine, c, t, p), "repeat": i} for i, (t, p) in enumerate(zip(tps, tpot50), 1)])


def test_points_that_differ_only_by_noise_are_marked_indistinguishable_and_a_real_gap_is_not(tmp_path):
    """The issue's case: at concurrency 1 the batch limit cannot matter, yet one engine beat the other by
    noise. Measured 3 times each, with repeats that interleave, the beaten one is `~` (the noise cannot
    tell it from the point that beats it); an engine 30% slower on both axes is beaten for real. Without
    repeats the table says the noise is not measured. The table and plot give intervals (error bars)."""
    from harness.reports.frontier import text_table, write_frontier

    rows = frontier_rows([_repeated(4, 1, [480, 500, 520], [2.05, 2.0, 1.95]),
                          _repeated(8, 1, [490, 530, 510], [1.9, 2.0, 1.95]),
                          _repeated(16, 1, [350, 340, 360], [2.9, 2.8, 3.0])], ["build.max_batch_size"], gpus=0)
    marks = {r["engine"]: r["front"] for r in rows}
    assert marks == {"build.max_batch_size=4": "indistinguishable", "build.max_batch_size=8": "front",
                     "build.max_batch_size=16": "dominated"}
    text = text_table(rows, 0)
    assert "VALID 3/3 ~" in text and "500 [480..520]" in text
    files = write_frontier(tmp_path, "noise", ["build.max_batch_size"], 0, rows)
    md = (tmp_path / "frontier.md").read_text()
    assert "`~`: beaten only by points the noise cannot tell it from" in md and "75% confidence" in md
    assert (tmp_path / "frontier.png").stat().st_size > 0 and "frontier.png" in files
    single = frontier_rows([_row(4, 1, 500, 2.0), _row(8, 1, 510, 1.95)], ["build.max_batch_size"], gpus=0)
    assert [r["front"] for r in single] == ["dominated", "front"]
    write_frontier(tmp_path, "single", ["build.max_batch_size"], 0, single)
    assert "One observation per point: the noise is not measured" in (tmp_path / "frontier.md").read_text()


def _frontier(root, *args):
    return subprocess.run([sys.executable, "-m", "pipeline", "frontier", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=800, env={**os.environ, "PERFDAG_ARTIFACTS": str(root)})


def test_a_bad_engine_axis_is_refused_before_anything_runs(tmp_path):
    root = tmp_path / "artifacts"
    proc = _frontier(root, "--engines", "harness.frontends=1,2")
    assert proc.returncode == 2 and "--engines: harness.frontends is not an engine parameter" in proc.stdout
    assert not root.exists()


def _published(root, stage: str) -> set[str]:
    return {d.name for d in (root / stage).iterdir() if not d.name.startswith(".")} if (root / stage).is_dir() else set()


def test_a_frontier_over_two_engines_builds_each_once_and_draws_the_front(built_fast, tmp_path):
    # A copy of the session's FAST root (its model, quantized checkpoint, batch-32 engine and 24 samples):
    # the frontier builds only its two engines, as a fresh root would, without training the model again.
    short = (f"{FAST},dataset.num_samples=24,loadgen.min_duration_ms=1000,loadgen.min_query_count=32,"
             "accuracy.num_samples=8,accuracy.target=0.05")
    with copied_root(built_fast, tmp_path / "artifacts") as root:
        engines_before = _published(root, "BuildEngine")
        proc = _frontier(root, "--levels", "1,4", "--engines", "build.max_batch_size=4,8", "--overrides", short)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "perfdag Frontier frontier-default: 4 point(s), 2 engine(s)" in proc.stdout, proc.stdout[-3000:]
        assert len(_published(root, "BuildEngine") - engines_before) == 2  # one engine per batch size, each built once
        (out,) = [d for d in (root / "Frontier").iterdir() if not d.name.startswith(".")]
        assert {"frontier.md", "frontier.json", "frontier.png"} <= {p.name for p in out.iterdir()}
        doc = json.loads((out / "frontier.json").read_text())
        assert doc["gpus"] == 0 and doc["y"] == "tokens/s per system"
        got = sorted((r["engine"], r["concurrency"]) for r in doc["rows"])
        assert got == [(f"build.max_batch_size={b}", c) for b in (4, 8) for c in (1, 4)]
        assert all(r["valid"] and r["tokens_per_s_per_user"] > 0 and r["ttft_p99_ms"] for r in doc["rows"])
        assert any(r["on_front"] for r in doc["rows"])
        assert "| build.max_batch_size=4 | 1 |" in (out / "frontier.md").read_text()
        results = [json.loads(p.read_text()) for p in root.glob("RunLoadgen/*/result.json")]
        held = sorted((r["harness"]["max_in_flight"], r["harness"]["peak_in_flight"]) for r in results)
        assert held == [(1, 1), (1, 1), (4, 4), (4, 4)], held
        for r in results:
            m = r["measured"]
            assert m["latency_from"] == "send" and r["ttft_source"] == "harness"
            if r["harness"]["max_in_flight"] == 1:  # every sample issued at once, sent one at a time
                assert m["ttft_ms"]["p99"] < 0.25 * m["queue_ms"]["p50"], (m["ttft_ms"], m["queue_ms"])
        assert tritonservers_under(root) == []


def test_frontier_repeat_3_gives_each_point_its_interval(built_fast, tmp_path):
    """`frontier --repeat 3` measures the point three times, each an observation of its own, and the table,
    frontier.json and the plot give tokens/s per user and per system as median [interval], VALID 3/3."""
    tiny = (f"{FAST},dataset.num_samples=16,loadgen.min_duration_ms=300,loadgen.min_query_count=16,"
            "loadgen.offline_expected_qps=50,accuracy.num_samples=8,accuracy.target=0.05,harness.warmup_queries=2")
    with copied_root(built_fast, tmp_path / "artifacts") as root:
        proc = _frontier(root, "--levels", "2", "--repeat", "3", "--overrides", tiny)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        (out,) = [d for d in (root / "Frontier").iterdir() if not d.name.startswith(".")]
        (row,) = json.loads((out / "frontier.json").read_text())["rows"]
        assert row["repeats"] == 3 and row["valid_repeats"] == "3/3"
        for k in ("tokens_per_s_per_user", "tokens_per_s"):
            sp = row["spread"][k]
            assert sp["n"] == 3 and sp["low"] <= row[k] <= sp["high"] and sp["confidence"] == 0.75
        assert "VALID 3/3" in proc.stdout and "[" in proc.stdout and "75% confidence" in proc.stdout
        md = (out / "frontier.md").read_text()
        assert "median [interval of the median, 75% confidence]" in md and (out / "frontier.png").stat().st_size
        (fr16,) = [d.name for d in (root / "FullRun").iterdir() if not d.name.startswith(".")]
        assert len(list((root / "observations" / "FullRun" / fr16).iterdir())) == 2  # 3 kept: 1 latest, 2 earlier
        for stage in ("RunLoadgen", "RunAccuracy"):  # every kind of run records the host around it
            for result in root.glob(f"{stage}/*/result.json"):
                host = json.loads(result.read_text())["host"]
                assert len(host["load_after"]) == 3 and host["servers"][0]["from"] == "pid", host["servers"]


def _cli(root, *args):
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PERFDAG_ARTIFACTS": str(root)})


def test_frontier_no_accuracy_measures_each_level_without_an_accuracy_run(built_fast, tmp_path):
    """`frontier --no-accuracy` (issue 48): each level is a PerformanceRun, the same report without
    RunAccuracy or CheckAccuracy (a FullRun level runs one accuracy run per level: RunAccuracy's key
    covers harness.max_in_flight); its points are observations history and compare take."""
    tiny = (f"{FAST},dataset.num_samples=16,loadgen.min_duration_ms=300,loadgen.min_query_count=16,"
            "loadgen.offline_expected_qps=50,harness.warmup_queries=2")
    with copied_root(built_fast, tmp_path / "artifacts") as root:
        before = {s: _published(root, s) for s in ("RunAccuracy", "CheckAccuracy", "FullRun")}
        proc = _frontier(root, "--levels", "1,2", "--no-accuracy", "--overrides", tiny)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "perfdag Frontier frontier-default: 2 point(s), 1 engine(s)" in proc.stdout, proc.stdout[-3000:]
        assert {s: _published(root, s) for s in before} == before  # no accuracy run, no FullRun
        runs = sorted(_published(root, "PerformanceRun"))
        assert len(runs) == 2
        for key16 in runs:
            report = json.loads((root / "PerformanceRun" / key16 / "report.json").read_text())
            assert report["accuracy"] is None and "RunAccuracy" not in report["stages"]
            assert report["observations"]["PerformanceRun"]
        (out,) = [d for d in (root / "Frontier").iterdir() if not d.name.startswith(".")]
        rows = json.loads((out / "frontier.json").read_text())["rows"]
        assert sorted(r["concurrency"] for r in rows) == [1, 2] and all(r["valid"] for r in rows)
        hist = _cli(root, "history", runs[0])
        assert hist.returncode == 0 and "PerformanceRun" in hist.stdout, hist.stdout + hist.stderr
        comp = _cli(root, "compare", runs[0], runs[1])
        assert comp.returncode == 0, comp.stdout + comp.stderr
        assert runs[0] in comp.stdout and runs[1] in comp.stdout
        again = _frontier(root, "--levels", "1,2", "--no-accuracy", "--overrides", tiny)  # a rerun measures nothing
        assert again.returncode == 0 and _published(root, "PerformanceRun") == set(runs)
        assert tritonservers_under(root) == []


def test_no_accuracy_is_in_the_frontiers_key_only_where_it_changes_the_points():
    from pipeline.frontier import Frontier, SessionsFrontier

    def key(flow, **kw):
        return flow(levels="1,2", overrides=FAST, **kw).key

    assert key(Frontier, no_accuracy=True) != key(Frontier)
    assert key(SessionsFrontier, no_accuracy=True) == key(SessionsFrontier)  # a replay runs no accuracy anyway
