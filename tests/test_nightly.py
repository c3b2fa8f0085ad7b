"""Nightly's comparison on synthetic sweep rows: every metric the scenario is judged by, medians
over repeats, changes counted only outside the measured spread, and a readable nightly.md."""
from __future__ import annotations

import re

from harness.reports import nightly

VARIED = ["build.max_batch_size", "loadgen.scenario"]


def srow(tokens=3000.0, ttft=50.0, tpot=10.0, scenario="Server", valid=True, acc=True, repeat=1):
    return {"build.max_batch_size": 32, "loadgen.scenario": scenario, "scenario": scenario, "tokens_per_s": tokens,
            "samples_per_s": tokens / 100, "ttft_p99_ms": ttft, "tpot_p99_ms": tpot, "valid": valid,
            "invalid_reason": None if valid else "TPOT p99 40.0 ms > 30.0 ms", "accuracy_passed": acc,
            "ttft_limit_ms": 2000.0 if scenario != "Offline" else None,
            "tpot_limit_ms": 30.0 if scenario != "Offline" else None, "repeat": repeat}


def doc_for(points, prev="2026-11-01"):
    return {"date": "2026-11-02", "compared_with": prev, "repeats": 1, "floors": None, "points": points}


def test_slower_tpot_is_a_regression_while_throughput_is_unchanged():
    (p,) = nightly.compare([srow(tpot=14.0)], [srow(tpot=10.0)], VARIED)
    by = {c["metric"]: c for c in p["checks"]}
    assert by["tpot_p99_ms"]["verdict"] == "regression"
    assert by["tokens_per_s"]["verdict"] == "shown only"  # Server: fixed by the target QPS, never judged
    assert by["ttft_p99_ms"]["verdict"] == "within noise"
    assert len(p["reasons"]) == 1 and "TPOT p99 (ms) 10.0 -> 14.0 (+40.0%)" in p["reasons"][0]
    assert abs(by["tpot_p99_ms"]["headroom"] - (1 - 14 / 30)) < 1e-9


def test_offline_is_judged_by_throughput_only():
    (p,) = nightly.compare([srow(tokens=2500.0, tpot=None, ttft=None, scenario="Offline")],
                           [srow(tokens=3000.0, tpot=None, ttft=None, scenario="Offline")], VARIED)
    # TTFT, TPOT, SingleStream's p90, goodput (judged at a streaming scenario's fixed load), a search's load
    assert [c["verdict"] for c in p["checks"]] == ["regression", "-", "-", "-", "-", "-"]
    assert "tokens/s fell" in p["reasons"][0]
    (same,) = nightly.compare([srow(tokens=2950.0, scenario="Offline")], [srow(tokens=3000.0, scenario="Offline")], VARIED)
    assert same["reasons"] == []  # -1.7% is under the 5% floor


def test_repeats_compare_medians_and_ignore_changes_inside_the_spread():
    noisy_prev = [srow(tokens=t, scenario="Offline", repeat=i) for i, t in enumerate((3350.0, 6046.0, 11888.0))]
    inside = [srow(tokens=t, scenario="Offline", repeat=i) for i, t in enumerate((4000.0, 5000.0, 9000.0))]
    (p,) = nightly.compare(inside, noisy_prev, VARIED)
    tps = p["checks"][0]
    assert tps["previous"]["median"] == 6046.0 and tps["now"]["median"] == 5000.0
    assert tps["verdict"] == "within noise" and p["reasons"] == []  # -17% but the ranges overlap
    below = [srow(tokens=t, scenario="Offline", repeat=i) for i, t in enumerate((2000.0, 2100.0, 2200.0))]
    (q,) = nightly.compare(below, noisy_prev, VARIED)
    assert q["checks"][0]["verdict"] == "regression"


def test_validity_accuracy_and_the_limit_are_judged_everywhere():
    (p,) = nightly.compare([srow(tpot=40.0, valid=False, acc=False)], [srow()], VARIED)
    text = "; ".join(p["reasons"])
    assert "INVALID in 1 of 1" in text and "accuracy failed in 1 of 1" in text
    assert "over its limit 30.0" in text
    (first,) = nightly.compare([srow()], [], VARIED)  # no previous night: nothing to compare
    assert first["reasons"] == [] and {c["verdict"] for c in first["checks"]
                                       if c["now"] is not None} <= {"new", "shown only"}


def test_goodput_at_a_fixed_load_is_judged_in_server():
    now, before = srow(), srow()
    now["goodput_samples_per_s"], before["goodput_samples_per_s"] = 17.0, 20.0  # fewer requests met the limits
    (p,) = nightly.compare([now], [before], VARIED)
    by = {c["metric"]: c for c in p["checks"]}
    assert by["goodput_samples_per_s"]["verdict"] == "regression"
    assert p["reasons"] == ["goodput (samples/s) 20.0 -> 17.0 (-15.0%), outside the spread and the 5% floor"]
    off_now, off_before = srow(scenario="Offline"), srow(scenario="Offline")
    off_now["goodput_samples_per_s"], off_before["goodput_samples_per_s"] = 17.0, 20.0
    (o,) = nightly.compare([off_now], [off_before], VARIED)  # Offline: its throughput is judged instead
    assert {c["metric"]: c for c in o["checks"]}["goodput_samples_per_s"]["verdict"] == "shown only"


def search_row(max_load, tpot=10.0, valid=True):
    """A point that is a search: its found load, and the confirming run's numbers at that load."""
    return {**srow(tpot=tpot, valid=valid, acc=None), "search_axis": "server_target_qps", "max_load": max_load}


def test_a_searched_point_is_judged_by_the_load_it_found_alone():
    (p,) = nightly.compare([search_row(30.0, tpot=5.0)], [search_row(40.0, tpot=10.0)], VARIED)
    by = {c["metric"]: c for c in p["checks"]}
    assert by["max_load"]["verdict"] == "regression" and by["max_load"]["judged"]
    assert not by["tpot_p99_ms"]["judged"]  # measured at another load than last night's: shown only
    assert p["reasons"] == ["max VALID load 40.0 -> 30.0 (-25.0%), outside the spread and the 5% floor"]
    (same,) = nightly.compare([search_row(39.0, tpot=20.0)], [search_row(40.0)], VARIED)
    assert same["reasons"] == []  # -2.5%, under the floor; no accuracy run is no accuracy failure
    (none,) = nightly.compare([search_row(None, valid=False)], [search_row(40.0)], VARIED)
    assert any("INVALID in 1 of 1" in r for r in none["reasons"])  # nothing passed tonight
    md = nightly.render_markdown({**doc_for([p]), "rows": [search_row(30.0)]})
    assert "| max VALID load | 40.0 | 30.0 | -10.0 (-25.0%) | - | **regression** |" in md, md


def test_a_search_sweeps_table_names_the_best_point():
    from harness.reports.sweep import table, text_table

    rows = [{**search_row(30.0), "build.max_batch_size": 8}, {**search_row(45.0), "build.max_batch_size": 32},
            {**search_row(None, valid=False), "build.max_batch_size": 1, "invalid_reason": "nothing passed"}]
    header, cells, _ = table(["build.max_batch_size"], rows)
    assert header[:2] == ["build.max_batch_size", "max server_target_qps"]
    assert [c[:2] for c in cells] == [["8", "30"], ["32", "45"], ["1", "-"]] and cells[0][-1] == "-"
    assert text_table(["build.max_batch_size"], rows).endswith("best: build.max_batch_size=32, server_target_qps=45")


def test_markdown_shows_previous_delta_verdict_and_formats_numbers():
    points = nightly.compare([srow(tpot=14.0, tokens=3123.456789)], [srow(tpot=10.0, tokens=3000.0)], VARIED)
    md = nightly.render_markdown(doc_for(points))
    assert "None" not in md and not re.search(r"\d\.\d{3,}", md)  # no None, no unrounded floats
    line = next(x for x in md.splitlines() if x.startswith("| TPOT p99"))
    assert line == "| TPOT p99 (ms) | 10.0 | 14.0 | +4.00 (+40.0%) | 53% of 30.0 | **regression** |"
    assert "| tokens/s | 3,000 | 3,123 |" in md and "## Regressions" in md
    assert "build.max_batch_size=32" in md


def test_fmt():
    assert [nightly.fmt(v) for v in (None, 300, 300.0, 2.71828, 12.345, 12345.6, True)] == \
        ["-", "300", "300", "2.72", "12.3", "12,346", "yes"]


def test_nightly_md_names_changed_parameters_applicable_ones_and_numbered_repeats():
    """nightly.md says which resolved parameters changed since the previous night (and that none did),
    names a point by the parameters that apply to its scenario, and numbers its repeats."""
    varied = ["loadgen.server_target_qps", "loadgen.scenario"]
    rows = [{**srow(tokens=t, scenario="Offline", repeat=i), "loadgen.server_target_qps": 30}
            for i, t in ((1, 3000.0), (2, 3050.0))]
    points = nightly.compare(rows, [{**srow(scenario="Offline"), "loadgen.server_target_qps": 30}], varied)
    pid = nightly.point_key(points[0])
    changes = nightly.param_changes({pid: {"build.max_batch_size": 4, "loadgen.scenario": "Offline"}},
                                    {pid: {"build.max_batch_size": 32, "loadgen.scenario": "Offline"}})
    assert changes == {pid: [{"param": "build.max_batch_size", "previous": 32, "now": 4}]}
    md = nightly.render_markdown({**doc_for(points), "rows": rows, "param_changes": changes})
    assert "## loadgen.scenario=Offline (Offline)" in md and "server_target_qps" not in md
    assert "changed since 2026-11-01: `build.max_batch_size` 32 -> 4" in md
    assert "tokens/s by repeat: 1: 3,000, 2: 3,050" in md
    same = nightly.param_changes({pid: {"a": 1}}, {pid: {"a": 1}})
    assert "changed since 2026-11-01: no resolved parameter" in nightly.render_markdown(
        {**doc_for(points), "rows": rows, "param_changes": same})
    assert [nightly.repeat_of(nightly.repeat_date("2026-11-02", i)) for i in (1, 2, 3)] == [1, 2, 3]
    assert nightly.repeat_of("") is None


def test_nightly_md_names_the_observations_its_numbers_come_from():
    """Each point names the FullRun observations it was measured by (repeats in order), as `compare`
    takes them; a row without one (a search that confirmed nothing) names none."""
    rows = [{**srow(scenario="Offline", repeat=i), "fullrun_key": "ab12" * 4, "observation": f"2026110{i}T0Z-1"}
            for i in (2, 1)]
    points = nightly.compare(rows, [srow(scenario="Offline")], VARIED)
    md = nightly.render_markdown({**doc_for(points), "rows": rows})
    assert "measured by `ab12ab12ab12ab12@20261101T0Z-1`, `ab12ab12ab12ab12@20261102T0Z-1`" in md
    bare = [{**r, "observation": None} for r in rows]
    assert "measured by" not in nightly.render_markdown({**doc_for(points), "rows": bare})
