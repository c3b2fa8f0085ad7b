"""whisper's compliance test and accuracy.txt: TEST01's checks as compliance/TEST01's verify_accuracy.py
and verify_performance.py make them (b66003e1), and the accuracy.txt line the checker's ACCURACY pattern
reads."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from harness.mlperf import compliance
from harness.mlperf.compliance import audit_settings, verify_test01_accuracy, verify_test01_performance
from harness.mlperf.submission import ScenarioRuns, accuracy_file

#: The checker's ACC_PATTERN["ACCURACY"] (submission_checker/constants.py at b66003e1): a fact of it.
ACCURACY_PATTERN = r"Word Error Rate\:.*, accuracy=([0-9\.]+)%"


def _e(q: int, labels) -> dict:
    return {"qsl_idx": q, "data": np.asarray(labels, dtype="<i8").tobytes().hex().upper()}


def test_test01_audit_is_whispers():
    s = audit_settings("TEST01", "v6.1")
    assert s == {"mode": 2, "accuracy_log_rng_seed": 720381539243781796, "accuracy_log_sampling_target": 4096}
    assert "min_query_count" not in audit_settings("TEST01", "v6.1", 24)  # the run's own count stays


def test_test01_accuracy_compares_the_first_label_only():
    acc = [_e(0, [20, 8, 5]), _e(1, [1, 2]), _e(2, [])]
    same_start = [_e(0, [20, 9, 9]), _e(2, []), _e(7, [3])]  # 7: not in the accuracy log (missing)
    r = verify_test01_accuracy(acc, same_start)
    assert r["passed"] and r["num_perf_log_qsl_idx_match"] == 2 and r["num_missing_qsl_idxs"] == 1
    assert not verify_test01_accuracy(acc, [_e(1, [2, 2])])["passed"]
    assert not verify_test01_accuracy(acc, [_e(2, [1])])["passed"]  # empty against not empty
    assert not verify_test01_accuracy(acc, [_e(9, [1])])["passed"]  # nothing matched is no pass


def test_test01_performance_within_ten_percent_of_the_timed_run():
    ref = {"result_validity": "VALID", "effective_scenario": "Offline", "result_samples_per_second": 10.0}
    ok = verify_test01_performance(ref, {**ref, "result_samples_per_second": 9.05})
    assert ok["passed"] and ok["why"] is None
    slow = verify_test01_performance(ref, {**ref, "result_samples_per_second": 8.9})
    assert not slow["passed"] and slow["why"] == "TEST FAIL: Test score invalid"
    invalid = verify_test01_performance(ref, {**ref, "result_validity": "INVALID"})
    assert not invalid["passed"] and "Invalid results" in invalid["why"]
    acc_text, perf_text = compliance.test01_texts({"accuracy": verify_test01_accuracy([_e(0, [1])], [_e(0, [1])]),
                                        "performance": ok})
    assert "TEST PASS" in acc_text.splitlines() and "num_perf_log_qsl_idx_match = 1" in acc_text
    assert perf_text.splitlines()[-1] == "TEST PASS" and "Reference score = 10.0" in perf_text


def test_whispers_accuracy_txt_is_what_the_checker_reads(tmp_path):
    runs = ScenarioRuns("Offline", tmp_path, tmp_path, {"accuracy": 98.5, "wer": 1.5})
    assert accuracy_file("whisper-99", runs, "ab" * 32) == accuracy_file("whisper", runs, "ab" * 32)
    text = accuracy_file("whisper", runs, "ab" * 32)
    first, second = text.splitlines()
    assert float(re.match(ACCURACY_PATTERN, first).group(1)) == 98.5
    assert re.match(r"^hash=([\w\d]+)$", second)


def test_an_open_entry_mapped_to_whisper_gets_whispers_accuracy_txt_and_test01(tmp_path):
    """The tree's name for the benchmark is the entry's own (tiny-whisper-standin), mapped to whisper:
    accuracy.txt is still whisper's line, and TEST01/ holds both verify files, the audited run's log and
    its performance logs, as run_verification.py lays them out."""
    from harness.mlperf.submission import assemble

    def run_dir(name: str, accuracy: list[dict]) -> Path:
        d = tmp_path / name
        d.mkdir()
        for f in ("mlperf_log_detail.txt", "mlperf_log_summary.txt", "user.conf"):
            (d / f).write_text(f"{name} {f}\n")
        (d / "mlperf_log_accuracy.json").write_text(json.dumps(accuracy))
        return d

    perf, acc = run_dir("perf", []), run_dir("acc", [_e(0, [1, 2])])
    t01 = run_dir("t01", [_e(0, [1, 2])])
    for f in compliance.TEST01_FILES:
        (t01 / f).write_text("TEST PASS\n")
    runs = [ScenarioRuns("Offline", perf, acc, {"accuracy": 97.5, "wer": 2.5}, compliance={"TEST01": t01})]
    assemble(tmp_path / "tree", division="open", submitter="S", system="sys", benchmark="tiny-whisper-standin",
             maps_to="whisper", system_desc={}, measurements={}, runs=runs, src_readme="r", params_yaml="p")
    d = tmp_path / "tree" / "open" / "S" / "results" / "sys" / "tiny-whisper-standin" / "Offline"
    line = (d / "accuracy" / "accuracy.txt").read_text().splitlines()[0]
    assert float(re.match(ACCURACY_PATTERN, line).group(1)) == 97.5
    for f in ("verify_accuracy.txt", "verify_performance.txt", "accuracy/mlperf_log_accuracy.json",
              "performance/run_1/mlperf_log_detail.txt", "performance/run_1/mlperf_log_summary.txt"):
        assert (d / "TEST01" / f).is_file(), f
