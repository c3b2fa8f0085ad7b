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


def reps(*values, key="tokens", **kw):
    """One row per repeat of a point, `key` taking each of `values` in turn."""
    return [srow(**{key: v}, repeat=i, **kw) for i, v in enumerate(values, 1)]


def test_slower_tpot_is_a_regression_while_throughput_is_unchanged():
    (p,) = nightly.compare(reps(14.0, 14.2, 13.9, key="tpot"), reps(10.0, 10.3, 9.8, key="tpot"), VARIED)
    by = {c["metric"]: c for c in p["checks"]}
    assert by["tpot_p99_ms"]["verdict"] == "regression" and by["tpot_p99_ms"]["p"] == 0.1
    assert by["tokens_per_s"]["verdict"] == "shown only"  # Server: fixed by the target QPS, never judged
    assert by["ttft_p99_ms"]["verdict"] == "within noise"
    assert p["reasons"] == ["TPOT p99 (ms) 10.0 -> 14.0 (+40.0%): Mann-Whitney p = 0.1, 3 against 3 repeats <= 0.1, "
                            "beyond the 10% floor"]
    assert abs(by["tpot_p99_ms"]["headroom"] - (1 - 14 / 30)) < 1e-9


def test_one_repeat_a_night_is_not_judged_and_says_why():
    """A Nightly once said "TTFT p99 -26.6% improved" on one repeat: a single run has no measured noise."""
    (p,) = nightly.compare([srow(ttft=36.7, tpot=14.0)], [srow(ttft=50.0, tpot=10.0)], VARIED)
    by = {c["metric"]: c for c in p["checks"]}
    assert by["ttft_p99_ms"]["verdict"] == by["tpot_p99_ms"]["verdict"] == "not judged" and p["reasons"] == []
    md = nightly.render_markdown(doc_for([p]))
    assert "| TTFT p99 (ms) | 50.0 | 36.7 | -13.3 (-26.6%) | 98% of 2,000 | not judged [1] |" in md
    assert "[1] 1 against 1 repeats cannot show a change at p <= 0.1; measure 3 each (--repeat 3)" in md


def test_series_that_differ_only_by_noise_are_within_noise_and_a_real_shift_is_a_regression():
    """Two nights whose numbers differ by 5% noise only, 3 repeats each: every judged metric within noise.
    A night 25% slower (TPOT 25% higher): a regression, with Mann-Whitney's p."""
    import numpy as np

    rng = np.random.default_rng(46)

    def night(tpot, ttft, shift=1.0):
        return [srow(tpot=tpot * shift * rng.lognormal(0, 0.05), ttft=ttft * rng.lognormal(0, 0.05), repeat=i)
                for i in (1, 2, 3)]
    (same,) = nightly.compare(night(10.0, 50.0), night(10.0, 50.0), VARIED)
    judged = [c for c in same["checks"] if c["judged"] and c["now"] is not None]
    assert judged and {c["verdict"] for c in judged} == {"within noise"} and same["reasons"] == []
    (slow,) = nightly.compare(night(10.0, 50.0, shift=1.25), night(10.0, 50.0), VARIED)
    by = {c["metric"]: c for c in slow["checks"]}
    assert by["tpot_p99_ms"]["verdict"] == "regression" and by["ttft_p99_ms"]["verdict"] == "within noise"


def test_offline_is_judged_by_throughput_only():
    off = dict(tpot=None, ttft=None, scenario="Offline")
    (p,) = nightly.compare(reps(2500.0, 2450.0, 2550.0, **off), reps(3000.0, 3050.0, 2980.0, **off), VARIED)
    # TTFT, TPOT, SingleStream's p90, goodput (judged at a streaming scenario's fixed load), a search's load
    assert [c["verdict"] for c in p["checks"]] == ["regression", "-", "-", "-", "-", "-"]
    assert "tokens/s fell" in p["reasons"][0]
    (same,) = nightly.compare(reps(2950.0, 2940.0, 2960.0, scenario="Offline"),
                              reps(3000.0, 3010.0, 2990.0, scenario="Offline"), VARIED)
    assert same["reasons"] == [] and same["checks"][0]["verdict"] == "within noise"  # -1.7%, under the 5% floor


def test_repeats_compare_medians_and_ignore_changes_inside_the_spread():
    noisy_prev = [srow(tokens=t, scenario="Offline", repeat=i) for i, t in enumerate((3350.0, 6046.0, 11888.0))]
    inside = [srow(tokens=t, scenario="Offline", repeat=i) for i, t in enumerate((4000.0, 5000.0, 9000.0))]
    (p,) = nightly.compare(inside, noisy_prev, VARIED)
    tps = p["checks"][0]
    assert tps["previous"]["median"] == 6046.0 and tps["now"]["median"] == 5000.0
    assert tps["verdict"] == "within noise" and p["reasons"] == []  # -17% but the sets interleave
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


def test_a_repeat_without_an_accuracy_run_is_counted_apart_never_as_a_pass():
    """A running server's Bench point (no references) or an unconfirmed search has no accuracy run:
    the night says "not run", not "3/3 PASS"; a mix counts only the repeats that scored."""
    (p,) = nightly.compare(reps(3000, 3000, 3000, acc=None), reps(3000, 3000, 3000, acc=None), VARIED)
    assert p["accuracy_passed"] == "not run" and p["previous"]["accuracy_passed"] == "not run"
    assert not any("accuracy" in r for r in p["reasons"])
    row = next(line for line in nightly.render_markdown(doc_for([p])).splitlines() if "accuracy PASS" in line)
    assert "not run" in row and "ok" not in row and "regression" not in row
    mixed = [srow(acc=True, repeat=1), srow(acc=None, repeat=2), srow(acc=False, repeat=3)]
    (q,) = nightly.compare(mixed, [], VARIED)
    assert q["accuracy_passed"] == "1/2" and "accuracy failed in 1 of 2 repeat(s) with an accuracy run" in q["reasons"]


def test_goodput_at_a_fixed_load_is_judged_in_server():
    def with_goodput(rows, *values):
        return [{**r, "goodput_samples_per_s": v} for r, v in zip(rows, values)]
    now, before = with_goodput(reps(3000, 3000, 3000), 17.0, 17.2, 16.9), with_goodput(reps(3000, 3000, 3000), 20, 20.1, 19.8)
    (p,) = nightly.compare(now, before, VARIED)  # fewer requests met the limits
    by = {c["metric"]: c for c in p["checks"]}
    assert by["goodput_samples_per_s"]["verdict"] == "regression"
    assert p["reasons"] == ["goodput (samples/s) 20.0 -> 17.0 (-15.0%): Mann-Whitney p = 0.1, 3 against 3 repeats "
                            "<= 0.1, beyond the 5% floor"]
    off_now = with_goodput(reps(3000, 3000, 3000, scenario="Offline"), 17.0, 17.2, 16.9)
    off_before = with_goodput(reps(3000, 3000, 3000, scenario="Offline"), 20, 20.1, 19.8)
    (o,) = nightly.compare(off_now, off_before, VARIED)  # Offline: its throughput is judged instead
    assert {c["metric"]: c for c in o["checks"]}["goodput_samples_per_s"]["verdict"] == "shown only"


def search_row(max_load, tpot=10.0, valid=True, tried=()):
    """A point that is a search: its found load, the confirming run's numbers at that load, and its
    probes' evidence ([load, passes, tries])."""
    return {**srow(tpot=tpot, valid=valid, acc=None), "search_axis": "server_target_qps", "max_load": max_load,
            "tried": [list(t) for t in tried]}


LAST_NIGHT = [(20, 1, 1), (40, 1, 1), (80, 0, 1), (60, 0, 1), (50, 0, 1), (45, 0, 1)]


def test_a_searched_point_is_judged_by_the_load_it_found_alone():
    """One search a night: its probes are its evidence. Tonight 40 (last night's found load) failed every
    try: a regression. Tonight found 39 but never failed at or under 40 (it failed 40 once in 3 tries:
    it flips there): within noise, as a found load under the floor is."""
    tonight = [(20, 1, 1), (40, 0, 1), (30, 1, 1), (35, 0, 1)]
    (p,) = nightly.compare([search_row(30.0, tpot=5.0, tried=tonight)], [search_row(40.0, tpot=10.0, tried=LAST_NIGHT)],
                           VARIED)
    by = {c["metric"]: c for c in p["checks"]}
    assert by["max_load"]["verdict"] == "regression" and by["max_load"]["judged"]
    assert not by["tpot_p99_ms"]["judged"]  # measured at another load than last night's: shown only
    assert p["reasons"] == ["max VALID load 40.0 -> 30.0 (-25.0%): tonight 40.0 failed all 1 tries, at or under "
                            "the previous night's 40.0"]
    flips = [(20, 1, 1), (40, 2, 3), (39, 1, 1)]
    (same,) = nightly.compare([search_row(39.0, tpot=20.0, tried=flips)], [search_row(40.0, tried=LAST_NIGHT)], VARIED)
    assert same["reasons"] == [] and {c["metric"]: c for c in same["checks"]}["max_load"]["verdict"] == "within noise"
    (none,) = nightly.compare([search_row(None, valid=False)], [search_row(40.0)], VARIED)
    assert any("INVALID in 1 of 1" in r for r in none["reasons"])  # nothing passed tonight
    assert {c["metric"]: c for c in none["checks"]}["max_load"]["verdict"] == "not judged"  # no probe under 40
    assert not any(r.startswith("max VALID load") for r in none["reasons"])
    nothing = [(20, 0, 1), (10, 0, 1), (5, 0, 1), (2.5, 0, 1)]  # the search ran out of probes, bracket [None, 2.5]
    (lost,) = nightly.compare([search_row(None, valid=False, tried=nothing)], [search_row(40.0, tried=LAST_NIGHT)],
                              VARIED)
    assert lost["reasons"][0] == ("max VALID load 40.0 -> none: nothing found tonight; 20.0 failed all 1 tries, at or "
                                  "under the previous night's 40.0")
    assert any("INVALID in 1 of 1" in r for r in lost["reasons"])
    (above,) = nightly.compare([search_row(None, valid=False, tried=[(80, 0, 1), (60, 0, 1)])],
                               [search_row(40.0, tried=LAST_NIGHT)], VARIED)  # it never reached 40: no evidence
    assert {c["metric"]: c for c in above["checks"]}["max_load"]["verdict"] == "not judged"
    assert "| max VALID load | 40.0 | - | - | - | **regression** [1] |" in nightly.render_markdown(doc_for([lost]))
    md = nightly.render_markdown({**doc_for([p]), "rows": [search_row(30.0)]})
    assert "| max VALID load | 40.0 | 30.0 | -10.0 (-25.0%) | - | **regression** [1] |" in md, md
    better = [(20, 1, 1), (40, 1, 1), (80, 0, 1), (45, 1, 1), (60, 1, 1), (70, 0, 1)]
    (up,) = nightly.compare([search_row(60.0, tried=better)], [search_row(40.0, tried=LAST_NIGHT)], VARIED)
    assert {c["metric"]: c for c in up["checks"]}["max_load"]["verdict"] == "improved"


def test_a_search_sweeps_table_names_the_best_point():
    from harness.reports.sweep import table, text_table

    rows = [{**search_row(30.0), "build.max_batch_size": 8}, {**search_row(45.0), "build.max_batch_size": 32},
            {**search_row(None, valid=False), "build.max_batch_size": 1, "invalid_reason": "nothing passed"}]
    header, cells, _ = table(["build.max_batch_size"], rows)
    assert header[:2] == ["build.max_batch_size", "max server_target_qps"]
    assert [c[:2] for c in cells] == [["8", "30"], ["32", "45"], ["1", "-"]] and cells[0][-1] == "-"
    assert text_table(["build.max_batch_size"], rows).endswith("best: build.max_batch_size=32, server_target_qps=45")


def test_markdown_shows_previous_delta_verdict_and_formats_numbers():
    now = [srow(tpot=t, tokens=3123.456789, repeat=i) for i, t in enumerate((14.0, 14.5, 13.5), 1)]
    before = [srow(tpot=t, tokens=3000.0, repeat=i) for i, t in enumerate((10.0, 10.5, 9.5), 1)]
    md = nightly.render_markdown(doc_for(nightly.compare(now, before, VARIED)))
    assert "None" not in md and not re.search(r"\d\.\d{3,}", md)  # no None, no unrounded floats
    line = next(x for x in md.splitlines() if x.startswith("| TPOT p99"))
    assert line == "| TPOT p99 (ms) | 10.0 [9.50..10.5] | 14.0 [13.5..14.5] | +4.00 (+40.0%) | 53% of 30.0 | " \
                   "**regression** [1] |"
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
