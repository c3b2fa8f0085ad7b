"""TEST07 and TEST09 (gpt-oss-120b): audit settings per round, the verifications passing and failing
on synthetic logs, and the files laid out where MLCommons' checker reads them."""
from __future__ import annotations

import json

import mlperf_scoring_fixtures as MF
import pandas as pd
import pytest
import reasoning_scoring_fixtures as RF

from harness.mlperf import benchmarks
from harness.mlperf import compliance as C
from harness.mlperf.scoring import score_log
from harness.mlperf.submission import ScenarioRuns, accuracy_text, assemble, compliance_tests


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return MF.load_tokenizer(MF.save_tokenizer(tmp_path_factory.mktemp("tok")))


def test_registry_names_the_tests():
    assert compliance_tests("gpt-oss-120b") == ("TEST07", "TEST09")
    assert compliance_tests("gpt-oss-120b-99") == ("TEST07", "TEST09")
    assert compliance_tests("deepseek-r1") == ("TEST06",) and compliance_tests("my-model") == ()


def test_audit_settings_per_round():
    v60, v61 = C.audit_settings("TEST07", "v6.0"), C.audit_settings("TEST07", "v6.1")
    assert "performance_issue_unique" not in v60 and v61["performance_issue_unique"] == 1
    assert v61["accuracy_log_sampling_target"] == 990 and v61["min_query_count"] == 990 and v61["mode"] == 2
    t09 = C.audit_settings("TEST09", "v6.1", min_query_count=64)
    assert t09["min_query_count"] == 64 and t09["accuracy_log_sampling_target"] == 10000
    assert C.audit_settings("TEST09", "v7.0")["performance_issue_unique"] == 1  # unknown round: the newest
    text = C.audit_text("TEST09", t09, {"test09_min_output_tokens": 1150.38})
    assert "*.*.min_query_count = 64" in text and "*.*.test09_min_output_tokens = 1150.38" in text


def _gpqa(tok, n: int, right: int):
    df = pd.DataFrame({"dataset": ["gpqa_diamond"] * n, "ground_truth": ["B"] * n})
    good = RF.to_hex(tok.encode("<|channel|>final<|message|>B<|return|>", add_special_tokens=False))
    bad = RF.to_hex(tok.encode("<|channel|>final<|message|>C<|return|>", add_special_tokens=False))
    return df, [{"qsl_idx": i, "data": good if i < right else bad} for i in range(n)]


@pytest.mark.parametrize("right,passed", [(61, True), (60, False), (0, False)])
def test_test07_threshold(tok, tmp_path, right, passed):
    df, log = _gpqa(tok, 100, right)
    r = C.verify_test07(log, lambda e: score_log(benchmarks.get("gpt-oss-120b"), e, df, tok))
    assert r["exact_match"] == float(right) and r["passed"] is passed  # 60.698: 61% passes, 60% does not
    path = C.write_result(tmp_path, r)
    text = path.read_text()
    assert path.name == "verify_accuracy.txt" and (("TEST PASS" in text) is passed)
    assert f"'exact_match': {float(right)}" in text  # what the verification script's regex reads
    assert json.loads((tmp_path / "test07.json").read_text())["passed"] is passed


def test_test07_fails_with_nothing_logged_or_no_score(tok):
    assert not C.verify_test07([], lambda e: {"exact_match": 100.0})["passed"]
    r = C.verify_test07([{"qsl_idx": 0, "data": ""}], lambda e: {"tokens_per_sample": 1.0})
    assert not r["passed"] and "TEST FAIL" in C.test07_text(r) and "TEST PASS" not in C.test07_text(r)


@pytest.mark.parametrize("lengths,passed", [([1278] * 10, True), ([1150, 1151], True), ([1150] * 3, False),
                                            ([1406, 1406], True), ([1407] * 4, False), ([2556, 0], True), ([], False)])
def test_test09_band(tmp_path, lengths, passed):
    entries = [{"qsl_idx": i, "data": RF.to_hex([7] * n)} for i, n in enumerate(lengths)]
    r = C.verify_test09(entries)
    assert r["passed"] is passed and r["samples"] == len(lengths)
    path = C.write_result(tmp_path, r)
    assert path.name == "verify_output_len.txt" and (("TEST PASS" in path.read_text()) is passed)


def test_test09_counts_undecodable_data_as_zero():
    r = C.verify_test09([{"qsl_idx": 0, "data": "zz"}, {"qsl_idx": 1, "data": RF.to_hex([1] * 2600)}])
    assert r["mean_output_tokens"] == 1300 and r["passed"]


def test_mlperf_thresholds_stay_the_defaults(tmp_path):
    settings = C.audit_settings("TEST07", "v6.1")
    text = C.write_audit(tmp_path, "TEST07", settings).read_text()
    assert "*.*.test07_accuracy_threshold = 60.698" in text
    text = C.write_audit(tmp_path, "TEST09", C.audit_settings("TEST09", "v6.1")).read_text()
    assert "*.*.test09_min_output_tokens = 1150.38" in text and "*.*.test09_max_output_tokens = 1406.02" in text
    assert C.verify_test07([], lambda e: {})["threshold"] == 60.698 and C.verify_test09([])["bounds"] == [1150.38, 1406.02]


def test_own_thresholds_come_from_the_references(tok, tmp_path):
    """A stand-in (reference_scores: self): TEST07's threshold is target x the references' exact_match,
    TEST09's band the references' mean length +-10%, both over the logged samples, repeats included."""
    df, refs = _gpqa(tok, 10, 10)  # the references: all right
    threshold, ref = C.own_test07_threshold(refs, lambda e: score_log(benchmarks.get("gpt-oss-120b"), e, df, tok), 0.9)
    assert (threshold, ref) == (90.0, 100.0)
    _, outputs = _gpqa(tok, 10, 9)  # 90% right: passes at 90.0, 80% does not
    assert C.verify_test07(outputs, lambda e: score_log(benchmarks.get("gpt-oss-120b"), e, df, tok), threshold)["passed"]
    _, worse = _gpqa(tok, 10, 8)
    assert not C.verify_test07(worse, lambda e: score_log(benchmarks.get("gpt-oss-120b"), e, df, tok), threshold)["passed"]
    with pytest.raises(Exception, match="cannot set the threshold"):
        C.own_test07_threshold(worse[9:], lambda e: score_log(benchmarks.get("gpt-oss-120b"), e, df, tok), 0.9)
    refs = [{"qsl_idx": i, "data": RF.to_hex([7] * n)} for i, n in enumerate([10, 30])]
    bounds, mean = C.own_test09_bounds(refs)
    assert mean == 20 and bounds == (18.0, 22.0)
    assert C.verify_test09([{"qsl_idx": 0, "data": RF.to_hex([7] * 21)}], bounds)["passed"]
    assert not C.verify_test09([{"qsl_idx": 0, "data": RF.to_hex([7] * 23)}], bounds)["passed"]
    C.write_audit(tmp_path, "TEST09", C.audit_settings("TEST09", "v6.1", 2), {})
    text = C.add_own_thresholds(tmp_path, "TEST09", C.verification_settings("TEST09", bounds=bounds)).read_text()
    assert "1150.38" not in text and "*.*.test09_min_output_tokens = 18.0" in text and "own references" in text


def _loadgen_dir(path, accuracy_log: list[dict]):
    path.mkdir(parents=True)
    for name in ("mlperf_log_detail.txt", "mlperf_log_summary.txt"):
        (path / name).write_text(f"{name}\n")
    (path / "mlperf_log_accuracy.json").write_text(json.dumps(accuracy_log))
    (path / "user.conf").write_text("")
    return path


def test_submission_tree_has_test07_and_test09_where_the_checker_reads_them(tok, tmp_path):
    df, log = _gpqa(tok, 100, 70)
    runs = {}
    for test, verdict in (("TEST07", C.verify_test07(log, lambda e: score_log(benchmarks.get("gpt-oss-120b"), e, df, tok))),
                          ("TEST09", C.verify_test09(log))):
        runs[test] = _loadgen_dir(tmp_path / test.lower(), log)
        C.write_result(runs[test], verdict)
    perf, acc = _loadgen_dir(tmp_path / "perf", []), _loadgen_dir(tmp_path / "acc", log)
    scores = score_log(benchmarks.get("gpt-oss-120b"), log, df, tok)
    files = assemble(tmp_path / "tree", division="open", submitter="perfdag", system="sys", benchmark="gpt-oss-120b",
                     maps_to=None, system_desc={}, measurements={}, src_readme="x", params_yaml="",
                     runs=[ScenarioRuns("Offline", perf, acc, scores, compliance=runs)])
    d = "open/perfdag/results/sys/gpt-oss-120b/Offline/"
    for f in ("TEST07/verify_accuracy.txt", "TEST07/accuracy/mlperf_log_accuracy.json",
              "TEST07/performance/run_1/mlperf_log_detail.txt", "TEST09/verify_output_len.txt",
              "TEST09/accuracy/mlperf_log_accuracy.json", "TEST09/performance/run_1/mlperf_log_summary.txt"):
        assert d + f in files
    # the checker: "TEST PASS" in the verdict file (TEST09's mean is 13 tokens here: outside the band)
    assert "TEST PASS" in (tmp_path / "tree" / d / "TEST07/verify_accuracy.txt").read_text()
    assert "TEST PASS" not in (tmp_path / "tree" / d / "TEST09/verify_output_len.txt").read_text()
    assert "'exact_match': 70.0" in (tmp_path / "tree" / d / "accuracy/accuracy.txt").read_text()


def test_accuracy_txt_for_exact_match_benchmarks(tmp_path):
    import hashlib

    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text("[]\n")
    text = accuracy_text("deepseek-r1", {"exact_match": 80.7, "tokens_per_sample": 3900.5, "num-samples": 4388}, log)
    assert "{'exact_match': 80.7, 'tokens_per_sample': 3900.5}" in text
    assert text.endswith(f"hash={hashlib.sha256(log.read_bytes()).hexdigest()}\n")


def test_request_timeout_scales_with_the_requested_length():
    from harness.loadgen.measure import request_timeout

    assert request_timeout(300, 32) == 300 and request_timeout(300, 1024) == 300
    assert request_timeout(300, 20000) == pytest.approx(300 * 20000 / 1024)  # deepseek-r1's 20,000 tokens
    assert request_timeout(300, 32768) == 9600


@pytest.mark.parametrize("maps_to,expected", [("gpt-oss-120b", {"test07", "test09"}), ("deepseek-r1", {"test06"}),
                                              ("llama2-70b-99.9", {"test06"})])
def test_submission_dag_runs_the_registry_s_compliance_tests(maps_to, expected):
    from conftest import REPO

    from pipeline.submission import Submission

    s = Submission(params_file="params/default.yaml", scenarios="Offline", system=str(REPO / "params/systems/cpu-example.yaml"),
                   overrides=f"submission.submitter=P,submission.system=cpu_tiny,submission.benchmark=tiny,"
                             f"submission.maps_to={maps_to}")
    tasks = s.scenario_tasks("Offline")
    assert set(tasks) - {"performance", "log", "accuracy"} == expected
    for name, stage in (("test07", "RunTest07"), ("test09", "RunTest09")):
        if name in tasks:
            assert tasks[name].stage == stage and "loadgen.scenario=Offline" in tasks[name].overrides


def test_gpt_oss_tokens_per_sample_has_an_upper_limit_only():
    from harness.mlperf.accuracy import check

    assert check({"exact_match": 83.0, "tokens_per_sample": 10.0}, "gpt-oss-120b")["passed"]
    assert not check({"exact_match": 83.0, "tokens_per_sample": 11000.0}, "gpt-oss-120b")["passed"]
    assert not check({"exact_match": 83.0, "tokens_per_sample": 3000.0}, "deepseek-r1")["passed"]  # below 0.9 x 3886.2


def test_whose_thresholds_enter_the_compliance_keys():
    """A stand-in's TEST07/TEST09 are keyed on its own thresholds (TEST07: and the target they scale);
    judged by MLPerf's gates, on MLPerf's, and the target does not enter TEST07."""
    from tasks import RunTest07, RunTest09

    own = dict(params_file="params/standins/gpt-oss-120b.yaml")
    mlperf = dict(own, overrides="accuracy.reference_scores=mlperf,accuracy.target=0.99")
    assert RunTest07(**own).key_inputs()["own_threshold_target"] == 0.9
    assert RunTest09(**own).key_inputs()["thresholds"] == "own references"
    for cls in (RunTest07, RunTest09):
        assert cls(**mlperf).key_inputs()["thresholds"] == "mlperf" and "own_threshold_target" not in cls(**mlperf).key_inputs()
    assert RunTest07(**own).key != RunTest07(**mlperf).key
