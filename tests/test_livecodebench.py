"""LiveCodeBench pass@1 (deepseek-r1, gpt-oss-120b) with real sandboxed programs, graded as
lcb_runner's testing_util does, from a local problems copy; and the one-line errors when that copy
is missing, unreadable or incomplete (a run's before any stage)."""
from __future__ import annotations

import base64
import json
import os
import pickle
import secrets
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from harness.mlperf.codeexec import livecodebench as lcb

REPO = Path(__file__).resolve().parent.parent
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")

ADD = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
       {"input": "5 5\n", "output": "10", "testtype": "stdin"}]
APP = [{"input": "[1, 2]\n3", "output": "[1, 2, 3]", "testtype": "functional"},
       {"input": "[]\n0", "output": "[0]", "testtype": "functional"}]
FLOAT = [{"input": "x\n", "output": "1.5\n100 0.25\n", "testtype": "stdin"}]


def compress(tests: list) -> str:
    """upstream's private_test_cases form: base64(zlib(pickle(JSON text)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def write_problems(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# upstream's row shape: the tests and metadata are JSON strings; the private tests of "add" compressed
ROWS = [
    {"question_id": "add", "question_title": "A+B", "platform": "atcoder", "starter_code": "",
     "public_test_cases": json.dumps(ADD[:1]), "private_test_cases": compress(ADD[1:]), "metadata": "{}"},
    {"question_id": "app", "public_test_cases": json.dumps(APP), "private_test_cases": "",
     "metadata": json.dumps({"func_name": "app"}), "starter_code": "class Solution:\n    def app(self, xs, y):\n"},
    {"question_id": "float", "public_test_cases": FLOAT, "private_test_cases": [], "metadata": {}},  # plain form
]


@pytest.fixture(scope="module")
def problems(tmp_path_factory):
    path = write_problems(tmp_path_factory.mktemp("lcb") / "problems.jsonl", ROWS)
    return path, lcb.load_problems(path)


def test_problems_file_upstream_and_plain_forms(problems):
    _, probs = problems
    assert sorted(probs) == ["add", "app", "float"]
    assert [t.output for t in probs["add"].tests] == ["3\n", "10"]  # public, then the decompressed private
    assert probs["app"].func_name == "app" and probs["add"].func_name is None
    assert len(probs["float"].tests) == 1


def test_compressed_private_tests_accept_only_a_pickled_str(tmp_path):
    assert lcb.decode_private(compress(ADD)) == ADD
    marker = tmp_path / f"ran-{secrets.token_hex(4)}"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    for payload in (pickle.dumps(Evil()), pickle.dumps(["a", "list"])):
        text = base64.b64encode(zlib.compress(payload)).decode()
        row = {**ROWS[0], "private_test_cases": text}
        with pytest.raises(lcb.ProblemsError, match="private_test_cases"):
            lcb.load_problems(write_problems(tmp_path / "evil.jsonl", [row]))
    assert not marker.exists()


@root_only
def test_programs_graded_as_lcb_runner(problems, tmp_path):
    _, probs = problems
    cases = [  # (question_id, program, passes, error kind)
        ("add", "a, b = map(int, input().split())\nprint(a + b)", True, None),
        ("add", "import sys\nprint(sum(map(int, sys.stdin.read().split())), '  ')\nexit()\nprint('x')", True, None),
        ("add", "a, b = map(int, input().split())\nprint(a * b)", False, "wrong_answer"),
        ("add", "print(1 // 0)", False, "runtime_error"),
        ("add", "while True:\n    pass", False, "timeout"),
        ("app", "class Solution:\n    def app(self, xs, y):\n        return tuple(xs + [y])", True, None),
        ("app", "class Solution:\n    def app(self, xs: List[int], y: int):\n        return xs", False, "wrong_answer"),
        ("app", "class Solution:\n    def other(self, xs, y):\n        return xs", False, "error_during_testing"),
        ("float", "print('1.50')\nprint('1e2 0.250')", True, None),  # Decimal equality per word
        ("float", "print('1.5000001')\nprint('100 0.25')", False, "wrong_answer"),
        ("float", "print('1.5 100 0.25')", False, "wrong_answer"),  # line count differs
    ]
    out = lcb.run_programs([c[0] for c in cases], [c[1] for c in cases], problems=probs, timeout_s=1,
                           workers=2, results_dir=tmp_path / "code_outputs")
    doc = json.loads((tmp_path / "code_outputs" / lcb.RESULTS_FILE).read_text())
    got = [(r["passed"], r["error"]) for r in doc["per_program"]]
    assert got == [(c[2], c[3]) for c in cases], doc["per_program"]
    assert out == [c[2] for c in cases]
    assert doc["per_program"][2]["verdicts"] == ["wrong_answer", "not_run"]  # the first failure ends the run
    assert doc["per_program"][4]["verdicts"] == ["timeout", "not_run"]
    assert doc["per_program"][0]["verdicts"] == ["passed", "passed"] and doc["passed"] == 4


@root_only
def test_hostile_programs_fail(problems, tmp_path):
    _, probs = problems
    secret = tmp_path / "answers.txt"  # what a program would like to read: the expected output
    secret.write_text("[1, 2, 3]")
    secret.chmod(0o644)  # readable by anyone: the sandbox does not mount it at all
    cases = [
        f"class Solution:\n    def app(self, xs, y):\n        return json.loads(open({str(secret)!r}).read())",
        # the tests never reach the program's directory: nothing there to read
        "import os\nclass Solution:\n    def app(self, xs, y):\n        return sorted(os.listdir('.')) or xs + [y] + [0]",
        # a C-level loop SIGALRM cannot stop: the whole run is killed at (timeout + 1) x tests + 5 s
        "class Solution:\n    def app(self, xs, y):\n        return sum(range(10 ** 13))",
        "import os\nos.write(1, b'fake verdict')\nclass Solution:\n    def app(self, xs, y):\n        os._exit(0)",
    ]
    out = lcb.run_programs(["app"] * len(cases), cases, problems=probs, timeout_s=0.5, workers=2,
                           results_dir=tmp_path)
    recs = json.loads((tmp_path / lcb.RESULTS_FILE).read_text())["per_program"]
    assert out == [False] * 4, recs
    assert "FileNotFoundError" in recs[0]["detail"]["error"]
    assert recs[1]["error"] == "wrong_answer" and "runner.py" in recs[1]["detail"]["output"]
    assert recs[2]["error"] == "global_timeout" and recs[2]["verdicts"] == ["global_timeout"] * 2
    assert recs[3]["error"] == "crashed"


def test_missing_or_incomplete_problems_copy_is_one_line(problems, tmp_path):
    path, _ = problems
    rows = [{"dataset": "livecodebench", "gt_output": "add"}, {"dataset": "gpqa", "gt_output": "A"},
            {"dataset": "livecodebench", "gt_output": "nope"}]
    assert lcb.require("deepseek-r1", rows[:2], path) == ["add"]
    assert lcb.require("deepseek-r1", rows[1:2], None) == []  # no LiveCodeBench row: nothing needed
    assert lcb.require("llama2-70b", rows, None) == []
    cases = [
        (None, "accuracy.livecodebench_problems: not set, and the dataset has 2 LiveCodeBench row(s)"),
        (tmp_path / "absent.jsonl", "is missing"),
        (path, "lacks 1 question_id(s) the dataset's LiveCodeBench rows need (nope; it has 3)"),
        (write_problems(tmp_path / "bad.jsonl", [{"no": "id"}]), "no question_id"),
    ]
    for given, needle in cases:
        with pytest.raises(lcb.ProblemsError) as e:
            lcb.require("deepseek-r1", rows, given)
        assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)
        assert str(e.value).startswith("accuracy.livecodebench_problems: ")
    with pytest.raises(lcb.ProblemsError, match=r"^--livecodebench-problems: .*release_v6 for gpt-oss-120b"):
        lcb.require("gpt-oss-120b", [{"dataset": "livecodebench_v6", "ground_truth": "nope"}], path,
                    "--livecodebench-problems")
    runner = lcb.lazy_runner("deepseek-r1", path)
    with pytest.raises(lcb.ProblemsError, match="nope"):
        runner(["nope"], ["print(1)"])


def test_scorers_get_the_runner_and_a_run_is_refused_before_any_stage(problems, tmp_path):
    from harness.mlperf import benchmarks
    from harness.mlperf.evaluate import code_runner_for

    path, _ = problems
    for name in ("deepseek-r1", "gpt-oss-120b"):
        assert callable(code_runner_for(benchmarks.get(name), workers=1, timeout_s=1, allow_network=False,
                                        results_dir=None, livecodebench_problems=path))
    assert code_runner_for(benchmarks.get("llama2-70b"), workers=1, timeout_s=1, allow_network=False,
                           results_dir=None) is None

    data = tmp_path / "ds.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in [
        {"input": "q1", "gt_output": "add", "dataset": "livecodebench"},
        {"input": "q2", "gt_output": "missing_qid", "dataset": "livecodebench"},
        {"input": "q3", "gt_output": "A", "dataset": "gpqa"}]))
    root = tmp_path / "artifacts"
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
    for problems_line, needle in (("", "accuracy.livecodebench_problems: not set, and the dataset has 2"),
                                  (f"  livecodebench_problems: {path}\n", "lacks 1 question_id(s)")):
        params = tmp_path / "p.yaml"
        params.write_text(f"extends: {REPO / 'params' / 'default.yaml'}\nloadgen:\n  mlperf_model: deepseek-r1\n"
                          f"dataset:\n  format: jsonl\n  path: {data}\n  num_samples: 3\n"
                          f"accuracy:\n  reference_scores: self\n{problems_line}")
        proc = subprocess.run([sys.executable, "-m", "pipeline", "status", "--params-file", str(params)],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0
        lines = [ln for ln in proc.stderr.splitlines() if "livecodebench_problems" in ln]
        assert len(lines) == 1 and needle in lines[0], proc.stderr[-3000:]
        assert "Traceback" not in proc.stderr
        assert not root.exists() or not any(root.iterdir())


@root_only
def test_score_command_runs_the_code_and_keeps_the_results(problems, tmp_path, capsys):
    import numpy as np

    sys.path.insert(0, str(REPO / "tests"))
    import mlperf_scoring_fixtures as MF

    from pipeline.cli import main

    path, _ = problems
    tok_dir = MF.save_tokenizer(tmp_path / "tok")
    tok = MF.load_tokenizer(tok_dir)
    data = tmp_path / "ds.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in [
        {"input": "q1", "gt_output": "add", "dataset": "livecodebench"},
        {"input": "q2", "gt_output": "app", "dataset": "livecodebench"},
        {"input": "q3", "gt_output": "A", "dataset": "gpqa"}]))
    texts = {0: "think\n```python\na, b = map(int, input().split())\nprint(a + b)\n```",
             1: "```python\nclass Solution:\n    def app(self, xs, y):\n        return xs\n```",
             2: "Answer: A"}
    log = tmp_path / "log.json"
    log.write_text(json.dumps([{"seq_id": i, "qsl_idx": i, "data": np.asarray(
        tok.encode(t, add_special_tokens=False), np.int32).tobytes().hex().upper()} for i, t in texts.items()]))
    args = ["score", "--benchmark", "deepseek-r1", "--log", str(log), "--dataset", str(data),
            "--tokenizer", str(tok_dir), "--out", str(tmp_path / "out"), "--livecodebench-timeout", "2"]
    assert main(args) == 2  # LiveCodeBench rows and no problems copy: refused before scoring
    err = capsys.readouterr().err
    assert "--livecodebench-problems: not set, and the dataset has 2 LiveCodeBench row(s)" in err, err
    assert main(args + ["--livecodebench-problems", str(path)]) == 11  # scored; below MLPerf's gate
    doc = json.loads((tmp_path / "out" / "accuracy.json").read_text())
    assert doc["scores"]["exact_match"] == pytest.approx(200 / 3)
    kept = json.loads((tmp_path / "out" / "code_outputs" / lcb.RESULTS_FILE).read_text())
    assert [(r["question_id"], r["passed"], r["error"]) for r in kept["per_program"]] == [
        ("add", True, None), ("app", False, "wrong_answer")]
