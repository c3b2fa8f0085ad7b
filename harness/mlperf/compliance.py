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

from ..errors import MeasurementError

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
        # EOS: zero or one end token at the end of the output (more is padding to look longer)
        if eos_id is not None:
            trailing = 0
            for t in out[::-1]:
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
