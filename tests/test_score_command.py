"""`python -m pipeline score` and the registry's gates: the stand-in datasets' own answers pass,
a log that leaves a subset unscored FAILs naming the metric (exit 11), bad input is one line."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.mlperf import benchmarks
from harness.model.corpus import standin_path, standin_rows

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    from harness.model.tiny import train_tokenizer

    d = tmp_path_factory.mktemp("tok")
    train_tokenizer(512, d)
    return d


def write_log(path: Path, tokenizer_dir: Path, texts: dict[int, str]) -> Path:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    entries = [{"seq_id": i, "qsl_idx": i,
                "data": np.asarray(tok.encode(t, add_special_tokens=False), np.int32).tobytes().hex().upper()}
               for i, t in texts.items()]
    path.write_text(json.dumps(entries))
    return path


@pytest.fixture
def score(capsys):
    """The command in this process (as `python -m pipeline score ...` runs it): exit code and output."""
    from pipeline.cli import main

    def run(*args: str):
        code = main(["score", *args])
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out.out, out.err)
    return run


def test_the_command_line_exits_11_on_fail(tokenizer_dir, tmp_path):
    log = write_log(tmp_path / "log.json", tokenizer_dir, {0: "nothing like the answer"})
    proc = subprocess.run([sys.executable, "-m", "pipeline", "score", "--benchmark", "mixtral-8x7b", "--round", "v6.0",
                           "--log", str(log), "--dataset", str(standin_path("mixtral-8x7b")), "--tokenizer",
                           str(tokenizer_dir)], cwd=REPO, capture_output=True, text=True, timeout=200)
    assert proc.returncode == 11 and "accuracy FAIL" in proc.stdout, proc.stderr[-2000:]


def test_gates_are_the_checkers_numbers():
    """mlcommons/inference b66003e, submission_checker/constants.py accuracy-target and -upper-limit."""
    g = benchmarks.get("llama2-70b").gates("99.9")
    assert g["rouge1"]["min"] == pytest.approx(44.4312 * 0.999) and g["tokens_per_sample"]["max"] == pytest.approx(323.895)
    g = benchmarks.get("mixtral-8x7b").gates("99")
    assert g["gsm8k"]["min"] == pytest.approx(72.9234) and g["mbxp"]["min"] == pytest.approx(59.5584)
    assert g["tokens_per_sample"]["min"] == pytest.approx(130.356) and g["tokens_per_sample"]["max"] == pytest.approx(160.49)
    g = benchmarks.get("llama3_1-405b").gates("99")
    assert g["exact_match"]["min"] == pytest.approx(89.232165) and g["tokens_per_sample"]["max"] == pytest.approx(753.148)
    g = benchmarks.get("llama3.1-8b").gates("99")
    assert g["rougeLsum"]["min"] == pytest.approx(35.43507) and g["gen_len"]["max"] == pytest.approx(8984408.4)
    assert benchmarks.get("llama2-70b").targets_in("v6.1") == ("99.9",)
    assert benchmarks.get("mixtral-8x7b").targets_in("v6.1") == ()


@pytest.mark.parametrize("bench", ["mixtral-8x7b", "llama3.1-405b", "deepseek-r1", "gpt-oss-120b"])
def test_the_standins_own_answers_pass_every_metric(bench, tokenizer_dir, tmp_path, score):
    rows = standin_rows(bench)
    log = write_log(tmp_path / "log.json", tokenizer_dir, {i: r["canonical_solution"] for i, r in enumerate(rows)})
    lcb = []  # deepseek-r1's LiveCodeBench rows are graded against the shipped problems copy
    if bench == "deepseek-r1":
        lcb = ["--livecodebench-problems", str(standin_path("livecodebench-problems"))]
    proc = score("--benchmark", bench, "--log", str(log), "--dataset", str(standin_path(bench)),
                 "--tokenizer", str(tokenizer_dir), "--gates", "self", "--json", "--out", str(tmp_path / "out"), *lcb)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["passed"] and not doc["check"]["missing"]
    required = {m.name for m in benchmarks.get(bench).metrics}
    assert required <= set(doc["scores"])
    if bench == "mixtral-8x7b":  # every subset really scored: GSM8K numbers and MBXP code run in the sandbox
        assert doc["scores"]["gsm8k"] == 100.0 and doc["scores"]["mbxp"] == 100.0
        assert (tmp_path / "out" / "code_outputs" / "mbxp_results.json").is_file()
    else:
        assert doc["scores"]["exact_match"] == 100.0
    if lcb:  # the programs really ran, in the sandbox, and every one passed
        res = json.loads((tmp_path / "out" / "code_outputs" / "livecodebench_results.json").read_text())
        assert res["programs"] == 3 and res["passed"] == res["programs"], res


def test_a_subset_left_unscored_fails_naming_the_metric(tokenizer_dir, tmp_path, score):
    rows = standin_rows("mixtral-8x7b")
    texts = {i: r["canonical_solution"] for i, r in enumerate(rows) if r["dataset"] != "GSM8K"}
    log = write_log(tmp_path / "log.json", tokenizer_dir, texts)
    proc = score("--benchmark", "mixtral-8x7b", "--log", str(log), "--dataset", str(standin_path("mixtral-8x7b")),
                 "--tokenizer", str(tokenizer_dir), "--gates", "self")
    assert proc.returncode == 11, proc.stdout + proc.stderr
    assert "FAIL" in proc.stdout and "gsm8k was not computed" in proc.stdout and "PASS" not in proc.stdout


def test_wrong_answers_fail_against_mlperf_gates(tokenizer_dir, tmp_path, score):
    rows = standin_rows("mixtral-8x7b")
    texts = {i: (" The answer is 0." if r["dataset"] == "GSM8K" else r["canonical_solution"]) for i, r in enumerate(rows)}
    log = write_log(tmp_path / "log.json", tokenizer_dir, texts)
    proc = score("--benchmark", "mixtral-8x7b", "--round", "v6.0", "--log", str(log), "--dataset",
                 str(standin_path("mixtral-8x7b")), "--tokenizer", str(tokenizer_dir), "--json")
    assert proc.returncode == 11
    doc = json.loads(proc.stdout)
    assert doc["scores"]["gsm8k"] == 0.0 and "gsm8k" in doc["check"]["failed"]
    assert doc["reference_source"] == "MLPerf v6.0 gates of mixtral-8x7b"


@pytest.mark.parametrize("args,needle", [
    (["--benchmark", "mixtral-8x7b", "--round", "v6.1"], "--round"),
    (["--benchmark", "llama2-70b", "--target", "0.99"], "--target"),
    (["--benchmark", "gptj"], "--benchmark"),
])
def test_bad_arguments_are_one_line(args, needle, tokenizer_dir, tmp_path, score):
    log = write_log(tmp_path / "log.json", tokenizer_dir, {0: "x"})
    proc = score(*args, "--log", str(log), "--dataset", str(standin_path("mixtral-8x7b")), "--tokenizer",
                 str(tokenizer_dir))
    assert proc.returncode == 2 and needle in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("content,needle", [
    ("{not json", "not a JSON accuracy log"),
    ('[{"qsl_idx": 0}]', "'data'"),
    ('[{"qsl_idx": 0, "data": "ABC"}]', "data"),
    ('[{"qsl_idx": 999, "data": "01000000"}]', "999"),
])
def test_a_malformed_log_is_one_line_naming_file_and_field(content, needle, tokenizer_dir, tmp_path, score):
    log = tmp_path / "bad.json"
    log.write_text(content)
    proc = score("--benchmark", "mixtral-8x7b", "--round", "v6.0", "--log", str(log), "--dataset",
                 str(standin_path("mixtral-8x7b")), "--tokenizer", str(tokenizer_dir))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert needle in proc.stderr and str(log) in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_dataset_missing_a_column_is_named(tokenizer_dir, tmp_path, score):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"input": "a", "gt_output": "b"}) + "\n")
    log = write_log(tmp_path / "log.json", tokenizer_dir, {0: "b"})
    proc = score("--benchmark", "mixtral-8x7b", "--round", "v6.0", "--log", str(log), "--dataset", str(data),
                 "--tokenizer", str(tokenizer_dir))
    assert proc.returncode == 2 and "dataset" in proc.stderr and "Traceback" not in proc.stderr
