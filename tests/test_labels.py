"""Every label is true: each report and summary perfdag renders (FullRun's and bench's summary and
report.md, --repeat's summary, sweep, frontier and Nightly tables, compare, history, search.md) labels
each TTFT and TPOT with whose number it is, as result.json's sources say (LoadGen's, or the client's
where LoadGen measured none: a streamed closed loop), and never sets a number against itself."""
from __future__ import annotations

import re

import pytest

from harness.loadgen.results import sources
from harness.reports import compare, frontier, history, nightly, sweep
from harness.reports.plots import offsets, request_stats
from harness.reports.repeats import repeats_text
from harness.reports.report import build_report, render_markdown, summary_text
from harness.search import evidence
from harness.search.judge import progress_line
from harness.search.plan import Outcome

LABEL = re.compile(r"(?i)\b(ttft|tpot)[^\n|()]*(?:\(ms\) )?\((?:ms, )?(LoadGen|client)\b")


def result(scenario: str, streamed_closed_loop: bool, tokens: float = 600.0) -> dict:
    """A result.json as the runner writes it: Server's TTFT and TPOT are LoadGen's; a streamed Offline
    run's are the client's (LoadGen's Offline measures neither), its latencies from the client's send."""
    pct = {"p50": 10.0, "p90": 20.0, "p99": 30.0}
    measured = {"ttft_ms": pct, "tpot_ms": {"p50": 2.0, "p90": 3.0, "p99": 4.0}, "requests": 64, "empty": 0,
                "finish": {"stop": 0, "length": 64}, "latency_from": "send" if scenario == "Offline" else "issue"}
    doc = {"scenario": scenario, "valid": "VALID", "samples_per_s": tokens / 32, "tokens_per_s": tokens,
           "latency_ms": {"p50": 900.0, "p90": 1400.0, "p99": 1444.0}, "measured": measured,
           "ttft_ms": pct, "tpot_ms": {"p50": 2.0, "p90": 3.0, "p99": 4.0}}
    if streamed_closed_loop:
        doc.update(ttft_source="harness", tpot_source="harness")
    else:
        doc.update(ttft_source="loadgen", tpot_source="loadgen", ttft_constraint_ms=2000.0, tpot_constraint_ms=200.0)
    return doc


def report_of(res: dict, accuracy: bool = True, obs: str = "20261101T000000000000Z-1") -> dict:
    acc = {"scores": {"rouge1": 44.0, "tokens_per_sample": 30.0}, "required": ["rouge1"], "target": 0.99,
           "reference_scores": {"rouge1": 44.4}, "passed": True} if accuracy else None
    r = build_report({"FullRun": "f" * 64}, res, acc, "tiny")
    requests = [{"sample_index": i, "server": 0, "issue_ms": 0.0, "start_ms": float(i), "ttft_ms": 10.0 + i % 5,
                 "latency_ms": 150.0 + i, "n_tokens": 32, "tpot_ms": 2.0, "queue_ms": 0.0} for i in range(64)]
    r["client_stats"] = request_stats(requests)
    r["client_vs_loadgen"] = offsets(r["performance"], r["client_stats"])
    r["observations"] = {"FullRun": obs}
    return r


def _labels(text: str) -> list[tuple[str, str]]:
    return [(m.group(1).upper(), m.group(2)) for m in LABEL.finditer(text)]


CASES = [("Server", False, "LoadGen"), ("Offline", True, "client")]


@pytest.mark.parametrize("scenario, closed_loop, whose", CASES)
def test_every_report_and_summary_labels_ttft_and_tpot_as_result_json_says(scenario, closed_loop, whose, tmp_path):
    res = result(scenario, closed_loop)
    assert sources(res)["ttft_ms"] == sources(res)["tpot_ms"] == whose
    rep = report_of(res)
    rows = [sweep.row({"build.max_batch_size": b, "loadgen.scenario": scenario},
                      {**rep, "stages": {"FullRun": "a" * 64}}) for b in (4, 8)]
    sweep.write_results(tmp_path, "labels", ["build.max_batch_size"], rows)
    f_rows = frontier.frontier_rows(rows, ["build.max_batch_size"], 0, "build.max_batch_size")
    frontier.write_frontier(tmp_path, "labels", ["build.max_batch_size"], 0, f_rows)
    night = nightly.compare(rows, rows, ["build.max_batch_size"])
    cmp = compare.compare({"name": "a", "report": rep, "params": {}},
                          {"name": "b", "report": report_of(res), "params": {}})
    hist = [{"observation": "x", "latest": True, "finished_at": None, "refused": None, "scenario": scenario,
             "valid": True, "tokens_per_s": 1.0, "samples_per_s": 1.0, "ttft_p99_ms": 30.0, "tpot_p99_ms": 4.0,
             "accuracy": True, "sources": {"ttft_ms": whose, "tpot_ms": whose}}]
    probes = [{"value": 10.0, "repeat": 0, "key": "k" * 64, "passed": True, "reason": "", "stats":
               {"ttft_p99_ms": {"value": 30.0, "limit": 300.0}}, "goodput": None, "loadgen": "VALID",
               "sources": {"ttft_ms": whose, "tpot_ms": whose}}]
    search_doc = {"model": "tiny", "scenario": scenario, "axis": "server_target_qps", "judged_by": "the SLO",
                  "slo": "ttft_p99_ms<=300", "found": 10.0, "low": 10.0, "high": None, "stopped": "x",
                  "plan": {"noise": 0.1, "repeats": 3, "retries": 3}, "probe_settings":
                  {"min_duration_ms": 1, "min_query_count": 1}, "probes": probes, "result": 10.0}
    texts = {
        "summary": summary_text(rep, tmp_path), "bench summary": summary_text(report_of(res, accuracy=False), tmp_path),
        "report.md": render_markdown(rep, []),
        "repeats": repeats_text("FullRun", "f" * 64, [rep, report_of(res), report_of(res)], 3),
        "sweep table": sweep.text_table(["build.max_batch_size"], rows),
        "sweep.md": (tmp_path / "sweep.md").read_text(),
        "frontier table": frontier.text_table(f_rows, 0), "frontier.md": (tmp_path / "frontier.md").read_text(),
        "nightly.md": nightly.render_markdown({"date": "d", "compared_with": "c", "points": night, "rows": rows}),
        "compare": compare.render(cmp), "history": history.render("f" * 64, hist),
        "search.md": evidence.markdown(search_doc, None),
    }
    for kind, text in texts.items():
        found = _labels(text)
        if not found and scenario == "Offline" and kind in ("sweep table", "sweep.md", "repeats"):
            continue  # Offline is judged by throughput: no TTFT/TPOT column there
        assert found, f"{kind}: no TTFT/TPOT label in\n{text}"
        assert {w for _, w in found} == {whose}, f"{kind}: {found}\n{text}"
    # no number set against itself, and never Offline's issue-based latency against the client's
    offs = rep["client_vs_loadgen"]
    if whose == "client":
        assert "ttft_ms" not in offs and "tpot_ms" not in offs and "latency_ms" not in offs
        assert "Client-side p99 against LoadGen's" not in texts["report.md"]
        assert "but TTFT and TPOT, which LoadGen did not measure: those are the client's" in texts["report.md"]
    else:
        assert set(offs) == {"ttft_ms", "tpot_ms", "latency_ms"}


def test_a_probe_judged_by_an_slo_shows_loadgens_own_invalid_as_not_asked():
    """Each search probe printed "RunLoadgen Server: INVALID" and then "probe 1: PASS": under an SLO,
    LoadGen's verdict (early stopping is not met on short probes) is not asked, and said so."""
    out = Outcome(True, "", 0.5, {"ttft_p99_ms": {"value": 150.0, "limit": 300.0}},
                  loadgen="INVALID (early stopping not met (TTFT): processed 16 queries, needs at least 443 more)")
    line = progress_line(1, "server_target_qps", 20.0, 0, out, 20.0, None, "measured")
    assert "PASS by the SLO" in line and "LoadGen's own verdict, not asked: INVALID (early stopping" in line
    by_loadgen = progress_line(1, "server_target_qps", 20.0, 0, Outcome(False, "early stopping not met"), None, 20.0,
                               "measured")
    assert "FAIL (early stopping not met)" in by_loadgen and "not asked" not in by_loadgen


def test_a_performance_only_run_gets_no_accuracy_advice():
    """A bench was told "not submittable: accuracy is scored on 256 of 24,576 samples": it scored none."""
    from harness.mlperf.readiness import submission_warnings
    from tasks.base import load_params

    p = load_params("params/default.yaml", "accuracy.num_samples=8")
    assert any("accuracy is scored on 8 of" in w for w in submission_warnings(p))
    assert not any("accuracy" in w for w in submission_warnings(p, accuracy=False))
