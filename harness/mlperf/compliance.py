"""MLPerf's TEST06 compliance test for LLMs: the settings of its LoadGen run and the verification
of what that run logged.

Why it exists: LoadGen measures what the SUT reports, so an LLM SUT could report a first token the
model never produced, pad outputs with end tokens, or report a token count that is not the output's
length. TEST06 is a short performance run that logs about 100 responses to mlperf_log_accuracy.json
(LoadGen picks up `audit.config` from the directory it runs in), and three checks on that log:

- first token (Server, Interactive): the bytes reported with FirstTokenComplete are the start of
  the final output; "Skipped" for Offline, which reports no first token;
- EOS: an output ends in at most one end token;
- sample length: the reported token count equals the output's length.

`verify_accuracy.txt` has one line per check and a closing line, in the wording MLCommons' checker
looks for. No luigi.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from harness.errors import MeasurementError

#: TEST06's LoadGen overrides (keys `model.scenario.name`; `*` matches any): a performance run
#: (mode 2) of at least 100 queries and no minimum duration, equal-issue padding off, and ~100
#: responses sampled into the accuracy log with a fixed seed.
AUDIT_SETTINGS = {
    "mode": 2,
    "accuracy_log_rng_seed": 720381539243781796,
    "accuracy_log_sampling_target": 100,
    "min_query_count": 100,
    "min_duration": 0,
    "sample_concatenate_permutation": 0,
}
AUDIT_FILE = "audit.config"   # the name LoadGen looks for in its working directory
VERIFY_FILE = "verify_accuracy.txt"


def audit_config_text() -> str:
    lines = ["# MLPerf TEST06 (LLM output consistency): LoadGen applies these over every other setting"]
    lines += [f"*.*.{k} = {v}" for k, v in AUDIT_SETTINGS.items()]
    return "\n".join(lines) + "\n"


def write_audit_config(run_dir: str | os.PathLike) -> Path:
    path = Path(run_dir) / AUDIT_FILE
    path.write_text(audit_config_text())
    return path


def audit_applied(detail: dict) -> bool:
    """Whether LoadGen ran with the audit settings (read from mlperf_log_detail.txt's values)."""
    return (detail.get("effective_accuracy_log_sampling_target") == AUDIT_SETTINGS["accuracy_log_sampling_target"]
            and detail.get("effective_min_duration_ms") == AUDIT_SETTINGS["min_duration"]
            and detail.get("effective_test_mode") == "PerformanceOnly")


def _tokens(hex_text: str, dtype) -> np.ndarray:
    return np.frombuffer(bytes.fromhex(hex_text), dtype=dtype)


def verify(accuracy_log: str | os.PathLike, scenario: str, eos_id: int | None, dtype=np.int32) -> dict:
    """The three TEST06 checks over every logged response. Returns {first_token, eos, length: True /
    False / "Skipped", passed, samples, failures: {check: [qsl_idx, ...]}}."""
    path = Path(accuracy_log)
    try:
        entries = json.loads(path.read_text() or "[]")
    except (OSError, json.JSONDecodeError) as exc:
        raise MeasurementError(f"TEST06: cannot read {path}: {exc}") from None
    failures: dict[str, list[int]] = {"first_token": [], "eos": [], "length": []}
    check_first = scenario != "Offline"
    for e in entries:
        idx = int(e.get("qsl_idx", -1))
        out = _tokens(e.get("data", ""), dtype)
        # EOS: zero or one end token at the end of the output (more is padding to look longer). As
        # MLCommons' run_verification.py (`while i > 0`) the first token is never read, so [end, end],
        # the padded answer of a model that stops at once (harness/loadgen/cores/base.py), passes.
        if eos_id is not None:
            trailing = 0
            for t in out[:0:-1]:
                if int(t) != eos_id:
                    break
                trailing += 1
            if trailing > 1:
                failures["eos"].append(idx)
        # length: the token count reported to LoadGen is the output's length
        if "token_count" not in e or int(e["token_count"]) != out.size:
            failures["length"].append(idx)
        # first token: what was reported first is where the output starts
        if check_first:
            first = _tokens(e["token_data"], dtype) if "token_data" in e else None
            if first is None or first.size > out.size or not np.array_equal(first, out[:first.size]):
                failures["first_token"].append(idx)
    empty = not entries  # no response logged: the audit settings were not applied, nothing was checked
    result = {"scenario": scenario, "samples": len(entries), "eos_id": eos_id,
              "first_token": "Skipped" if not check_first else (not failures["first_token"] and not empty),
              "eos": not failures["eos"] and not empty and eos_id is not None,
              "length": not failures["length"] and not empty,
              "failures": {k: v[:20] for k, v in failures.items() if v}}
    result["passed"] = all(result[k] in (True, "Skipped") for k in ("first_token", "eos", "length"))
    if empty:
        result["failures"]["log"] = f"{path.name} holds no responses"
    return result


def verification_text(result: dict) -> str:
    """verify_accuracy.txt: the lines MLCommons' checker reads (True / False / Skipped)."""
    return "\n".join([f"First token check pass: {result['first_token']}",
                      f"EOS check pass: {result['eos']}",
                      f"Sample length check pass: {result['length']}",
                      f"TEST06 verification {'complete' if result['passed'] else 'failed'}"]) + "\n"


def write_verification(out_dir: str | os.PathLike, result: dict) -> Path:
    path = Path(out_dir) / VERIFY_FILE
    path.write_text(verification_text(result))
    (Path(out_dir) / "test06.json").write_text(json.dumps(result, indent=2) + "\n")
    return path


# ------------------------------------------------------------------------------------------------
# TEST07 and TEST09 (gpt-oss-120b): compliance/TEST07, compliance/TEST09 of mlcommons/inference
# ------------------------------------------------------------------------------------------------
# Both are performance runs that log every response (the sampling target is above the dataset
# size) and check what was logged: TEST07 the accuracy (GPQA compliance rows, exact_match as the
# benchmark's script computes it) against a threshold, TEST09 the mean output length against a
# band. v6.1 (d8230cdd) added `performance_issue_unique`, so each sample is issued exactly once.

_LOGGED_PERFORMANCE = {"mode": 2, "accuracy_log_rng_seed": 720381539243781796, "min_duration": 0,
                       "sample_concatenate_permutation": 0}
#: test -> round -> LoadGen settings of its audit.config (gpt-oss-120b's).
AUDIT = {
    "TEST07": {"v6.0": {**_LOGGED_PERFORMANCE, "accuracy_log_sampling_target": 990, "min_query_count": 990},
               "v6.1": {**_LOGGED_PERFORMANCE, "accuracy_log_sampling_target": 990, "min_query_count": 990,
                        "performance_issue_unique": 1}},
    "TEST09": {"v6.0": {**_LOGGED_PERFORMANCE, "accuracy_log_sampling_target": 10000, "min_query_count": 6396},
               "v6.1": {**_LOGGED_PERFORMANCE, "accuracy_log_sampling_target": 10000, "min_query_count": 6396,
                        "performance_issue_unique": 1}},
    # compliance/TEST01/whisper/audit.config (v5.1 to v6.1): an ordinary performance run (its own minimum
    # duration and queries) that logs a sample of its responses
    "TEST01": {r: {"mode": 2, "accuracy_log_rng_seed": 720381539243781796, "accuracy_log_sampling_target": 4096}
               for r in ("v5.1", "v6.0", "v6.1")},
}
#: What the verification scripts read from audit.config (not LoadGen): the same in v6.0 and v6.1.
TEST07_THRESHOLD = 60.698                 # exact_match (%) on the GPQA compliance rows
TEST09_BOUNDS = (1150.38, 1406.02)        # mean output tokens: 1278.2 x 0.9 .. x 1.1
TEST09_TOLERANCE = 0.10                   # the band around the reference mean length
TEST07_FILE, TEST09_FILE = "verify_accuracy.txt", "verify_output_len.txt"


def audit_settings(test: str, round_: str, min_query_count: int | None = None) -> dict:
    """`test`'s LoadGen overrides in `round_` (the newest round's where the round has none);
    `min_query_count` replaces the dataset-sized count for a smaller (stand-in) dataset, where the test
    sets one (TEST01 leaves the run's own)."""
    if test == "TEST06":
        return dict(AUDIT_SETTINGS)
    rounds = AUDIT[test]
    out = dict(rounds.get(round_) or rounds[max(rounds)])
    if min_query_count is not None and "min_query_count" in out:
        out["min_query_count"] = min_query_count
    return out


def audit_text(test: str, settings: dict, extra: dict | None = None) -> str:
    lines = [f"# MLPerf {test}: LoadGen applies these over every other setting"]
    lines += [f"*.*.{k} = {v}" for k, v in settings.items()]
    lines += [f"*.*.{k} = {v}" for k, v in (extra or {}).items()]  # read by the verification only
    return "\n".join(lines) + "\n"


def verification_settings(test: str, threshold: float = TEST07_THRESHOLD,
                          bounds: tuple[float, float] = TEST09_BOUNDS) -> dict:
    """The audit.config lines `test`'s verification script reads (MLPerf's values by default)."""
    return ({"test07_accuracy_threshold": threshold} if test == "TEST07" else
            {"test09_min_output_tokens": bounds[0], "test09_max_output_tokens": bounds[1]}
            if test == "TEST09" else {})


def write_audit(run_dir: str | os.PathLike, test: str, settings: dict, verification: dict | None = None) -> Path:
    """audit.config: LoadGen's overrides and the verification's thresholds (`verification`, MLPerf's
    where None; {} leaves them out, for a stand-in whose thresholds come from its own references
    and are added by `add_own_thresholds` once the run has logged what they are computed over)."""
    extra = verification_settings(test) if verification is None else verification
    path = Path(run_dir) / AUDIT_FILE
    path.write_text(audit_text(test, settings, extra))
    return path


# A stand-in dataset (accuracy.reference_scores: self) is not MLPerf's, so MLPerf's thresholds mean
# nothing for it (60.698 on GPQA's compliance rows, 1278.2 tokens +-10% on the performance dataset).
# As its accuracy gates come from its own references scored as if they were the outputs, so do its
# TEST07 threshold and TEST09 band: the references of exactly the logged samples (repeats included).
# The MLPerf path never takes these: MLPerf's values stay the defaults above.

def own_test07_threshold(reference_entries: list[dict], score_fn, target: float) -> tuple[float, float]:
    """(threshold, reference): `target` x the exact_match of the references logged as the outputs."""
    ref = score_fn(reference_entries).get("exact_match") if reference_entries else None
    if not ref:
        raise MeasurementError(f"TEST07: the references score {ref!r} on exact_match, so they cannot set the "
                               "threshold; judge against MLPerf's (accuracy.reference_scores: mlperf)")
    return round(float(ref) * target, 3), float(ref)


def own_test09_bounds(reference_entries: list[dict], tolerance: float = TEST09_TOLERANCE) -> tuple[tuple[float, float], float]:
    """((min, max), reference mean): the references' mean length (counted as TEST09 counts) +-tolerance."""
    mean = verify_test09(reference_entries, (0.0, float("inf")))["mean_output_tokens"]
    if mean <= 0:
        raise MeasurementError("TEST09: the references have no tokens, so they cannot set the band")
    return (round(mean * (1 - tolerance), 2), round(mean * (1 + tolerance), 2)), mean


def add_own_thresholds(run_dir: str | os.PathLike, test: str, verification: dict) -> Path:
    """Append a stand-in's own thresholds to audit.config (read by the verification, not LoadGen)."""
    path = Path(run_dir) / AUDIT_FILE
    lines = ["# the stand-in's thresholds: from its own references over the logged samples (after the run)"]
    lines += [f"*.*.{k} = {v}" for k, v in verification.items()]
    with path.open("a") as f:
        f.write("\n".join(lines) + "\n")
    return path


def settings_applied(detail: dict, settings: dict) -> bool:
    """Whether LoadGen ran with `settings` (mlperf_log_detail.txt's effective values)."""
    return (detail.get("effective_accuracy_log_sampling_target") == settings["accuracy_log_sampling_target"]
            and ("min_duration" not in settings or detail.get("effective_min_duration_ms") == settings["min_duration"])
            and detail.get("effective_test_mode") == "PerformanceOnly")


def read_entries(accuracy_log: str | os.PathLike, test: str) -> list[dict]:
    path = Path(accuracy_log)
    try:
        entries = json.loads(path.read_text() or "[]")
    except (OSError, json.JSONDecodeError) as exc:
        raise MeasurementError(f"{test}: cannot read {path}: {exc}") from None
    if not isinstance(entries, list):
        raise MeasurementError(f"{test}: {path} is not a JSON list of entries")
    return entries


def verify_test07(entries: list[dict], score_fn, threshold: float = TEST07_THRESHOLD) -> dict:
    """TEST07: `score_fn(entries)` (the benchmark's scorer on the logged responses, a dict with
    exact_match) against `threshold`. No score (nothing logged, a metric missing) fails."""
    score = score_fn(entries).get("exact_match") if entries else None
    passed = score is not None and float(score) >= threshold
    return {"test": "TEST07", "samples": len(entries), "exact_match": score, "threshold": threshold,
            "passed": bool(passed)}


def test07_text(r: dict) -> str:
    """verify_accuracy.txt: the score line the verification script's regex reads, then its summary;
    the checker looks for 'TEST PASS'."""
    if r["exact_match"] is None:
        body = ["Error: Could not parse accuracy score"]
    else:
        body = [f"Accuracy score: {r['exact_match']}", f"Accuracy threshold: {r['threshold']}",
                f"Accuracy check pass: {r['passed']}"]
    head = [f"'exact_match': {r['exact_match']}"] if r["exact_match"] is not None else []
    return "\n".join(head + ["", "=" * 80, "TEST07 Verification Summary", "=" * 80, *body,
                              "TEST PASS" if r["passed"] else "TEST FAIL"]) + "\n"


def _token_count(entry) -> int:
    try:  # as the script: whole 4-byte ids; undecodable data counts 0
        return len(bytes.fromhex(str(entry.get("data") or "").strip())) // 4
    except (ValueError, AttributeError):
        return 0


def verify_test09(entries: list[dict], bounds: tuple[float, float] = TEST09_BOUNDS) -> dict:
    """TEST09: the mean number of logged output tokens (int32 ids; an entry without data counts 0)
    within `bounds`, inclusive."""
    lengths = [_token_count(e) for e in entries]
    mean = sum(lengths) / len(lengths) if lengths else 0.0
    lo, hi = bounds
    return {"test": "TEST09", "samples": len(lengths), "mean_output_tokens": mean,
            "min_output_tokens": min(lengths, default=0), "max_output_tokens": max(lengths, default=0),
            "bounds": [lo, hi], "min_check": mean >= lo, "max_check": mean <= hi,
            "passed": bool(lengths) and lo <= mean <= hi}


def test09_text(r: dict) -> str:
    lo, hi = r["bounds"]
    return "\n".join([
        "TEST09: Verify Output Token Length in Performance Mode", "",
        f"Total samples: {r['samples']}", f"Mean output tokens: {r['mean_output_tokens']:.2f}",
        f"Min output tokens: {r['min_output_tokens']}", f"Max output tokens: {r['max_output_tokens']}", "",
        f"Min threshold: {lo}", f"Max threshold: {hi}", f"Min check pass: {r['min_check']}",
        f"Max check pass: {r['max_check']}", "", "TEST PASS" if r["passed"] else "TEST FAIL"]) + "\n"


# ------------------------------------------------------------------------------------------------
# TEST01 (whisper): compliance/TEST01/run_verification.py, verify_accuracy.py, verify_performance.py
# ------------------------------------------------------------------------------------------------
# The audited run logs a sample of its responses; each logged qsl_idx's response must begin as the
# accuracy run's did (verify_accuracy.py compares the first element only, as `--dtype` reads it:
# whisper's int64 labels), and its samples/s must lie within 10% of the timed run's (both VALID).
TEST01_FILES = ("verify_accuracy.txt", "verify_performance.txt")
TEST01_PERFORMANCE_TOLERANCE = 0.10


def _first(data: str, dtype) -> np.ndarray:
    return np.frombuffer(bytes.fromhex(data), dtype=dtype)


def verify_test01_accuracy(accuracy: list[dict], audited: list[dict], dtype="<i8") -> dict:
    """verify_accuracy.py's counts and verdict ("TEST PASS": no mismatch and at least one match)."""
    results: dict = {}
    dup = acc_mismatch = matches = mismatches = missing = 0
    for e in accuracy:
        q, data = e["qsl_idx"], e["data"]
        if q in results:
            dup += 1
            acc_mismatch += results[q] != data
        else:
            results[q] = data
    for e in audited:
        q, data = e["qsl_idx"], _first(e["data"], dtype)
        if q in results:
            matches += 1
            ref = _first(results[q], dtype)
            if ref.size == 0 or data.size == 0:
                mismatches += ref.size != data.size
            elif data[0] != ref[0]:
                mismatches += 1
        else:
            missing += 1
        results[q] = e["data"]
    return {"num_acc_log_entries": len(accuracy), "num_acc_log_duplicate_keys": dup,
            "num_acc_log_data_mismatch": acc_mismatch, "num_perf_log_entries": len(audited),
            "num_perf_log_qsl_idx_match": matches, "num_perf_log_data_mismatch": mismatches,
            "num_missing_qsl_idxs": missing, "passed": mismatches == 0 and matches > 0}


def verify_test01_performance(reference: dict, test: dict, tolerance: float = TEST01_PERFORMANCE_TOLERANCE) -> dict:
    """verify_performance.py on two mlperf_log_detail.txt readings (Offline: result_samples_per_second)."""
    out = {"reference_score": reference.get("result_samples_per_second"),
           "test_score": test.get("result_samples_per_second")}
    for name, d in (("reference", reference), ("test", test)):
        if d.get("result_validity") != "VALID":
            return {**out, "passed": False, "why": f"TEST FAIL: Invalid results in the {name} run"}
    if reference.get("effective_scenario") != test.get("effective_scenario"):
        return {**out, "passed": False, "why": "TEST FAIL: Test and reference scenarios do not match!"}
    ref, got = float(out["reference_score"]), float(out["test_score"])
    ok = ref * (1 - tolerance) <= got <= ref * (1 + tolerance)
    return {**out, "passed": ok, "why": None if ok else "TEST FAIL: Test score invalid"}


def test01_texts(r: dict) -> tuple[str, str]:
    """verify_accuracy.txt and verify_performance.txt as the scripts print them."""
    a = r["accuracy"]
    acc = ["Verifying accuracy. This might take a while...", "Reading accuracy mode results...",
           "Reading performance mode results...",
           *(f"{k} = {a[k]}" for k in ("num_acc_log_entries", "num_acc_log_duplicate_keys", "num_acc_log_data_mismatch",
                                        "num_perf_log_entries", "num_perf_log_qsl_idx_match",
                                        "num_perf_log_data_mismatch", "num_missing_qsl_idxs")),
           "TEST PASS" if a["passed"] else "TEST FAIL", ""]
    p = r["performance"]
    perf = ["Verifying performance."]
    if p["why"] is None or p["why"] == "TEST FAIL: Test score invalid":
        perf += [f"Reference score = {p['reference_score']}", f"Test score = {p['test_score']}"]
    perf.append("TEST PASS" if p["passed"] else p["why"])
    return "\n".join(acc) + "\n", "\n".join(perf) + "\n"


def write_result(out_dir: str | os.PathLike, r: dict) -> Path:
    """The verdict file under the name the checker looks for, and the result as JSON."""
    if r["test"] == "TEST01":
        for name, text in zip(TEST01_FILES, test01_texts(r)):
            (Path(out_dir) / name).write_text(text)
        (Path(out_dir) / "test01.json").write_text(json.dumps(r, indent=2) + "\n")
        return Path(out_dir) / TEST01_FILES[0]
    name, text = (TEST07_FILE, test07_text(r)) if r["test"] == "TEST07" else (TEST09_FILE, test09_text(r))
    path = Path(out_dir) / name
    path.write_text(text)
    (Path(out_dir) / f"{r['test'].lower()}.json").write_text(json.dumps(r, indent=2) + "\n")
    return path
