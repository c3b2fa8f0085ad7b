"""The MLPerf results tree (`python -m pipeline submission`) from short real runs, TEST06's
verification, and the checks on what goes into the tree. MLCommons' checker is not run here (its
code is not ours to ship); the files, names and formats it reads are."""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, SHORT, copied_root, run_records, statuses, tritonservers_under

from harness.errors import InputError
from harness.mlperf.compliance import audit_config_text, verification_text, verify
from harness.mlperf.submission import accuracy_text, truncate_accuracy_log
from harness.mlperf.system_desc import REQUIRED, machine_facts, system_description

SUBMIT = "submission.submitter=PerfDag,submission.system=cpu_tiny,submission.benchmark=tiny-llama-int8," \
         "submission.maps_to=llama2-70b-99.9"
SYSTEM_YAML = REPO / "params" / "systems" / "cpu-example.yaml"
# The checker's accuracy.txt patterns for llama2 (facts of its constants: one whitespace after
# tokens_per_sample's colon) and its hash line.
ACC_PATTERNS = {"rouge1": r".*'rouge1':\s+'?([\d.]+)'?.*", "rouge2": r".*'rouge2':\s+'?([\d.]+)'?.*",
                "rougeL": r".*'rougeL':\s+'?([\d.]+)'?.*", "tokens_per_sample": r".*'tokens_per_sample':\s([\d.]+).*"}


@pytest.fixture
def root(built_default, tmp_path):
    with copied_root(built_default, tmp_path / "a") as r:
        yield r


def submission(root: Path, *args: str, overrides: str = SHORT + "," + SUBMIT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
    return subprocess.run([sys.executable, "-m", "pipeline", "submission", "--overrides", overrides, *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


def test_submission_tree_from_short_runs(root, tmp_path):
    out = tmp_path / "tree"
    proc = submission(root, "--scenarios", "Offline,Server", "--system", str(SYSTEM_YAML), "--out", str(out))
    # SHORT's 64 Server queries are too few for LoadGen's early stopping: INVALID, and it says why
    assert proc.returncode == 10, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "perfdag Submission: open/PerfDag, system cpu_tiny, benchmark tiny-llama-int8" in proc.stdout
    assert re.search(r"Server +INVALID \(early stopping not met \(TPOT\): processed 64 queries", proc.stdout)
    assert re.search(r"Offline +VALID .* accuracy PASS \(64 samples\) +TEST06 PASS", proc.stdout)

    top = out / "open" / "PerfDag"
    res = top / "results" / "cpu_tiny" / "tiny-llama-int8"
    files = sorted(str(p.relative_to(top)) for p in top.rglob("*") if p.is_file())
    per_scenario = ["README.md", "TEST06/accuracy/mlperf_log_accuracy.json", "TEST06/verify_accuracy.txt",
                    "accuracy/accuracy.txt", "accuracy/mlperf_log_accuracy.json", "accuracy/mlperf_log_detail.txt",
                    "accuracy/mlperf_log_summary.txt", "measurements.json",
                    "performance/run_1/mlperf_log_accuracy.json", "performance/run_1/mlperf_log_detail.txt",
                    "performance/run_1/mlperf_log_summary.txt", "user.conf"]
    assert files == sorted(["model_mapping.json", "src/tiny-llama-int8/README.md", "src/tiny-llama-int8/params.yaml",
                            "systems/cpu_tiny.json"]
                           + [f"results/cpu_tiny/tiny-llama-int8/{s}/{f}" for s in ("Offline", "Server")
                              for f in per_scenario])
    assert json.loads((top / "model_mapping.json").read_text()) == {"tiny-llama-int8": "llama2-70b-99.9"}

    system = json.loads((top / "systems" / "cpu_tiny.json").read_text())
    assert set(REQUIRED) <= set(system)
    assert system["division"] == "open" and system["submitter"] == "PerfDag" and system["system_name"] == "cpu_tiny"
    assert system["accelerators_per_node"] == "0" and system["cooling"] == "air"  # a string; from the YAML
    assert system["host_processor_core_count"] >= 1 and system["operating_system"]
    assert "mlcommons-loadgen" in system["other_software_stack"]

    (manifest,) = (root / "Submission").glob("*/manifest.json")
    upstream = json.loads(manifest.read_text())["upstream"]  # "<Scenario>.<part>": stage key
    for scenario in ("Offline", "Server"):
        d = res / scenario
        meas = json.loads((d / "measurements.json").read_text())
        assert meas["weight_data_types"] == "int8" and all(meas.values())
        assert f"llama2-70b.{scenario}.target_qps = " in (d / "user.conf").read_text()
        assert f"# tiny-llama-int8, {scenario} (open division)" in (d / "README.md").read_text()
        # accuracy.txt: what the checker's regexes read, and the full log's sha256
        text = (d / "accuracy" / "accuracy.txt").read_text()
        lines = text.splitlines()
        values = {k: next(float(m.group(1)) for ln in lines if (m := re.match(p, ln))) for k, p in ACC_PATTERNS.items()}
        assert values["rouge1"] >= 99.0 and values["tokens_per_sample"] == 32.0
        assert "np.float" not in text and lines[:3] == ["", "Results", ""]
        (hash_line,) = [ln for ln in lines if re.match(r"^hash=([\w\d]+)$", ln)]
        full = root / "RunAccuracy" / upstream[f"{scenario}.log"][:16] / "mlperf_log_accuracy.json"
        assert hash_line == "hash=" + hashlib.sha256(full.read_bytes()).hexdigest()
        shipped = (d / "accuracy" / "mlperf_log_accuracy.json").read_bytes()
        assert len(shipped) <= 10240 and full.stat().st_size > 10240
        assert shipped == full.read_bytes()[:4096] + b"\n\n...\n\n" + full.read_bytes()[-4096:]
        # TEST06: the checker's lines; Offline reports no first token
        verify_lines = (d / "TEST06" / "verify_accuracy.txt").read_text().splitlines()
        first = "Skipped" if scenario == "Offline" else "True"
        assert verify_lines == [f"First token check pass: {first}", "EOS check pass: True",
                                "Sample length check pass: True", "TEST06 verification complete"]
        t06 = json.loads((d / "TEST06" / "accuracy" / "mlperf_log_accuracy.json").read_text())
        assert len(t06) == 100 and ("token_data" in t06[0]) == (scenario != "Offline")
    assert tritonservers_under(root) == []  # the submission stopped the servers it launched

    again = submission(root, "--scenarios", "Offline,Server", "--system", str(SYSTEM_YAML))
    assert again.returncode == 10 and "perfdag Submission: open/PerfDag" in again.stdout  # cached: same summary
    assert not {s for s, st in statuses(run_records(root)[-1]).items() if st == "built"}


@pytest.mark.parametrize("overrides,system,needle", [
    (SHORT, SYSTEM_YAML, "submission.submitter: empty"),
    (SHORT + "," + SUBMIT + ",submission.division=closed", SYSTEM_YAML,
     "maps_to is read (as model_mapping.json) only in the open division"),
    (SHORT + ",submission.submitter=X,submission.division=closed", SYSTEM_YAML, "built-in model (builtin) can only be an open"),
    (SHORT + "," + SUBMIT, None, "cooling: missing; add it to a --system YAML (e.g. cooling: air)"),
])
def test_bad_submission_input_is_refused_before_anything_runs(tmp_path, overrides, system, needle):
    root = tmp_path / "a"
    args = ["--scenarios", "Offline"] + (["--system", str(system)] if system else [])
    proc = submission(root, *args, overrides=overrides)
    assert proc.returncode == 2 and needle in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert not root.exists()


def test_scenarios_are_checked(tmp_path):
    proc = submission(tmp_path / "a", "--scenarios", "Offline,Offlne", "--system", str(SYSTEM_YAML))
    assert proc.returncode == 2 and "--scenarios: 'Offline,Offlne'" in proc.stdout


# --- the pieces, on their own ------------------------------------------------------------------------

def _entry(qsl: int, tokens: list[int], first: list[int] | None = None, count: int | None = None) -> dict:
    e = {"seq_id": qsl, "qsl_idx": qsl, "data": np.asarray(tokens, dtype=np.int32).tobytes().hex().upper(),
         "token_count": len(tokens) if count is None else count}
    if first is not None:
        e["token_data"] = np.asarray(first, dtype=np.int32).tobytes().hex().upper()
    return e


@pytest.mark.parametrize("scenario,entry,expect", [
    ("Server", _entry(0, [5, 6, 7, 2], first=[5]), (True, True, True)),
    ("Server", _entry(0, [5, 6, 2, 2], first=[5]), (True, False, True)),      # padded with end tokens
    ("Server", _entry(0, [5, 6, 7], first=[9]), (False, True, True)),         # a first token never produced
    ("Server", _entry(0, [5, 6, 7]), (False, True, True)),                    # no first token reported
    ("Server", _entry(0, [5, 6, 7], first=[5], count=40), (True, True, False)),  # inflated token count
    ("Offline", _entry(0, [5, 6, 7, 2]), ("Skipped", True, True)),
])
def test_test06_checks(tmp_path, scenario, entry, expect):
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text(json.dumps([_entry(1, [8, 9], first=[8] if scenario != "Offline" else None), entry]))
    r = verify(log, scenario, eos_id=2)
    assert (r["first_token"], r["eos"], r["length"]) == expect
    assert r["passed"] == all(x in (True, "Skipped") for x in expect)
    assert verification_text(r).splitlines()[-1] == ("TEST06 verification complete" if r["passed"]
                                                     else "TEST06 verification failed")


def test_test06_with_nothing_logged_fails(tmp_path):
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text("[\n]\n")
    assert verify(log, "Offline", eos_id=2)["passed"] is False
    assert "*.*.mode = 2" in audit_config_text() and "*.*.sample_concatenate_permutation = 0" in audit_config_text()


def test_accuracy_text_and_truncation(tmp_path):
    small, big = tmp_path / "small.json", tmp_path / "big.json"
    small.write_text("[\n]\n")
    big.write_bytes(b"x" * 12000)
    sha = hashlib.sha256(small.read_bytes()).hexdigest()
    scores = {"rouge1": np.float64(44.4465), "rouge2": 22.0638, "rougeL": 28.625, "rougeLsum": 42.0251,
              "gen_len": np.int64(29614748), "gen_num": 24576, "gen_tok_len": 7399575, "tokens_per_sample": 301.1}
    text = accuracy_text("llama2-70b-99.9", scores, small)
    assert text == ("\nResults\n\n{'rouge1': 44.4465, 'rouge2': 22.0638, 'rougeL': 28.625, 'rougeLsum': 42.0251, "
                    "'gen_len': 29614748, 'gen_num': 24576, 'gen_tok_len': 7399575, 'tokens_per_sample': 301.1}"
                    f"\n\nhash={sha}\n")
    with pytest.raises(InputError, match="tokens_per_sample"):
        accuracy_text(None, {"rouge1": 1.0, "rouge2": 1.0, "rougeL": 1.0}, small)
    with pytest.raises(InputError, match=r"lack \['gen_len'\]"):  # the registry's metrics, whatever was passed
        accuracy_text("llama3.1-8b", {"rouge1": 1.0, "rouge2": 1.0, "rougeL": 1.0, "rougeLsum": 1.0}, small)
    # qwen3-vl: the script's own `{"f1": x}` JSON and its hash of it (a short log keeps it, as MLCommons'
    # truncation tool does); a log over 10 KiB gets the log's hash appended
    vl = accuracy_text("qwen3-vl-235b-a22b", {"f1": 0.8123, "brand_f1": 0.5, "is_secondhand_f1": 0.4}, small)
    data = '{"f1": 0.8123}'
    assert vl == f"Results\n\n{data}\n\nhash={hashlib.sha256(data.encode()).hexdigest()}"
    assert re.match(r'\{.*"f1":\s*([\d\.]+).*\}', vl.splitlines()[2]).group(1) == "0.8123"  # the checker's pattern
    vl_big = accuracy_text("qwen3-vl-235b-a22b", {"f1": 0.8123}, big)
    assert vl_big.startswith(vl) and vl_big.endswith(f"\nhash={hashlib.sha256(big.read_bytes()).hexdigest()}\n")
    truncate_accuracy_log(small, tmp_path / "s")
    truncate_accuracy_log(big, tmp_path / "b")
    assert (tmp_path / "s").read_text() == "[\n]\n" and (tmp_path / "b").stat().st_size == 4096 * 2 + 7


def test_system_description_lists_every_problem_and_takes_the_yaml_over_the_machine(tmp_path):
    facts = machine_facts(tmp_path, {"mlcommons-loadgen": "6.0.17", "tensorrt_llm": "absent"}, "PyTorch")
    assert facts["accelerators_per_node"].isdigit() and "tensorrt_llm" not in facts["other_software_stack"]
    with pytest.raises(InputError) as e:
        system_description(facts, {"status": "released", "system_type": "server"}, division="open",
                           submitter="X", system_name="s")
    text = str(e.value)
    for needle in ("status: 'released' is not one of", "system_type: 'server'", "cooling: missing",
                   "host_storage_type: missing"):
        assert needle in text
    user = {"status": "available", "system_type": "datacenter", "cooling": "air", "host_storage_type": "SSD",
            "host_memory_configuration": "N/A", "host_networking": "N/A", "host_networking_topology": "N/A",
            "host_network_card_count": "1", "host_processor_model_name": "My CPU"}
    desc = system_description(facts, user, division="open", submitter="X", system_name="s")
    assert desc["host_processor_model_name"] == "My CPU" and desc["accelerators_per_node"] == facts["accelerators_per_node"]
