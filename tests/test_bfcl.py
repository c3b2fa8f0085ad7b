"""qwen3.6-27b (edge agentic): BFCL v4 single-turn accuracy as MLCommons' endpoints client scores it.

The rules that need no bfcl-eval (reading calls, hallucination, aggregation) run everywhere; the
rest needs the bfcl-eval environment (`python -m pipeline bfcl setup`; .ci/run makes one and sets
PERFDAG_BFCL_PYTHON) and is skipped, saying so, where there is none."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import bfcl_fixtures as fx
import pytest
from conftest import REPO, run_luigi, run_records, statuses

from harness.config import ParamsError
from harness.errors import InputError
from harness.mlperf import benchmarks
from harness.mlperf.bfcl import calls as fc
from harness.mlperf.bfcl import env
from harness.mlperf.scoring import qwen3_6_27b as scorer
from harness.serving.openai import chat


def _bfcl_python():
    try:
        return env.python()
    except InputError:
        return None


needs_bfcl = pytest.mark.skipif(_bfcl_python() is None, reason="no bfcl-eval environment (python -m pipeline bfcl setup)")


# -- reading calls (the endpoints client's extractor rules) ------------------------------------

@pytest.mark.parametrize("text, calls", [
    ('[{"id":"c","type":"function","function":{"name":"f","arguments":"{\\"a\\": 1}"}}]', [{"name": "f", "arguments": {"a": 1}}]),
    ('[{"function":{"name":"f","arguments":"{bad"}}]', [{"name": "f", "arguments": "{bad"}]),   # kept as the string
    ('[{"name":"f","arguments":{"a":[1,2]}}]', [{"name": "f", "arguments": {"a": [1, 2]}}]),
    ('[{"name":"f"}, 3]', []),                                    # not every item a call: not a list of calls
    ("get_weather(city='London', days=3)", [{"name": "get_weather", "arguments": {"city": "London", "days": 3}}]),
    ("outer(x=inner(y=1))", [{"name": "outer", "arguments": {"x": "inner(y=1)"}}]),  # the inner call is an argument
    ("print(x=1) then f(a='b)c')", [{"name": "f", "arguments": {"a": "b)c"}}]),      # skipped name; quotes respected
    ("def f(city, days: int): pass", []),                          # a signature, not a call
    ("f(1, 2", []),                                                # unbalanced
    ("f(a=1,, b=2)", [{"name": "f", "arguments": {"_raw": "a=1,, b=2"}}]),
    ("f(a=x+1)", [{"name": "f", "arguments": {"a": "x + 1"}}]),    # not a literal: its source text
    ("", []), ("   ", []), ("I cannot help with that.", []), ("[]", []),
])
def test_calls_are_read_as_the_endpoints_client_reads_them(text, calls):
    assert fc.extract(text) == calls


def test_checker_calls_take_json_arguments_and_drop_nameless_items():
    got = fc.checker_calls([{"name": "f", "arguments": '{"a": 1}'}, {"name": "g", "arguments": "{bad"},
                            {"arguments": {}}, "x"])
    assert got == [{"f": {"a": 1}}, {"g": {}}]


def test_a_stream_merges_tool_call_pieces_by_index_and_a_message_keeps_its_list():
    raw = fx.sse(fx.streamed([("f", {"a": 1}), ("g", {"b": "x"})], content="Sure."))
    answer = chat.decode(raw, True)
    assert [(c["name"], json.loads(c["arguments"])) for c in answer.calls()] == [("f", {"a": 1}), ("g", {"b": "x"})]
    # what is scored is the calls alone (the endpoints client drops the prose beside them)
    assert [c["function"]["name"] for c in json.loads(answer.scored())] == ["f", "g"]
    whole = chat.decode(fx.sse(fx.message([("f", {}), ("f", {"z": 2})])), False)
    assert [c["name"] for c in whole.calls()] == ["f", "f"]
    text = chat.decode(fx.sse(fx.streamed([], content="no call", reasoning="hmm ")), True)
    assert text.scored() == "hmm no call"


def test_hallucination_and_relevance_are_judged_by_a_native_call_alone():
    texts = [chat.decode(fx.sse(fx.streamed([("f", {})])), True).scored(), "f(a=1)", "No.", "[]"]
    got = scorer.verdicts(texts, ["irrelevance"] * 4, ["[]"] * 4, ["[]"] * 4, check=None)
    assert got == [0.0, 1.0, 1.0, 1.0]  # a call written as text is no tool call
    assert scorer.verdicts(texts[:3], ["live_relevance"] * 3, ["[]"] * 3, ["[]"] * 3, check=None) == [1.0, 0.0, 0.0]


def test_a_truth_of_no_call_passes_only_without_a_call_and_an_unreadable_truth_fails():
    got = scorer.verdicts(["f(a=1)", "nothing", "nothing"], ["simple_python"] * 3, ["[]", "null", "{bad"],
                          ["[]"] * 3, check=None)
    assert got == [0.0, 1.0, 0.0]
    with pytest.raises(Exception, match="bfcl setup"):
        scorer.verdicts(["f(a=1)"], ["simple_python"], ['[{"f": {"a": [1]}}]'], ["[]"], check=None)


def test_categories_aggregate_as_the_endpoints_client_does():
    got = scorer.aggregate({"simple_python": [1, 1, 0, 0], "simple_java": [1.0], "multiple": [0.0, 1.0],
                            "live_simple": [1.0] * 3, "live_multiple": [0.0],
                            "irrelevance": [1.0], "live_irrelevance": [0.0, 0.0, 0.0]})
    # non_live: simple_* averaged first ((0.5 + 1) / 2), then with multiple: (0.75 + 0.5) / 2
    assert got["non_live"] == 62.5
    assert got["live"] == 75.0                       # weighted by samples: 3 of 4
    assert got["hallucination"] == 50.0              # subsets unweighted: (1 + 0) / 2
    assert got["normalized_single_turn_score"] == round((62.5 + 75 + 50) / 3, 2)
    assert got["overall_accuracy"] == round(100 * 8 / 15, 2)  # every sample alike: 8 of 15


def test_the_registry_gates_overall_at_the_checker_and_normalized_at_the_readme():
    b = benchmarks.get("edge-agentic")
    assert b.name == "qwen3.6-27b" and b.scenarios_in("v6.1", "edge") == ("SingleStream",)
    assert b.scenarios_in("v6.1", "datacenter") == ()
    gates = b.gates("99")
    assert gates["overall_accuracy"]["min"] == pytest.approx(86.23 * 0.99)
    assert gates["normalized_single_turn_score"]["min"] == pytest.approx(87.96 * 0.97)


def test_no_environment_is_one_line_naming_the_fix(tmp_path):
    with pytest.raises(InputError, match="pipeline bfcl setup"):
        env.python(tmp_path / "nope" / "python")


# -- with bfcl-eval ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def accuracy_set(tmp_path_factory):
    out = tmp_path_factory.mktemp("bfcl") / "bfcl_v4.jsonl"
    assert env.build_dataset(_bfcl_python(), out) == 995
    return out


@needs_bfcl
def test_the_accuracy_set_is_the_endpoints_clients_995(accuracy_set):
    rows = [json.loads(line) for line in accuracy_set.read_text().splitlines()]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["subset"]] = counts.get(r["subset"], 0) + 1
    assert counts == {"irrelevance": 24, "live_irrelevance": 88, "live_multiple": 105, "live_parallel": 16,
                      "live_parallel_multiple": 24, "live_simple": 25, "multiple": 124, "parallel": 124,
                      "parallel_multiple": 124, "simple_java": 62, "simple_javascript": 31, "simple_python": 248}
    assert list(counts) == sorted(counts)  # subsets in sorted order, as the client concatenates them
    first = rows[0]
    assert first["tool_choice"] == "auto" and first["tools"][0]["type"] == "function"
    assert all("." not in t["function"]["name"] for r in rows for t in r["tools"])


@needs_bfcl
def test_score_command_gives_the_endpoints_clients_numbers(accuracy_set, tmp_path):
    rows = [json.loads(line) for line in accuracy_set.read_text().splitlines()]
    log = []
    for i, answer in enumerate(fx.answers(rows)):
        for one in ([] if answer is None else answer if isinstance(answer, list) else [answer]):
            text = chat.decode(fx.sse(one), one["stream"]).scored()
            log.append({"seq_id": len(log), "qsl_idx": i, "data": text.encode().hex().upper()})
    (tmp_path / "mlperf_log_accuracy.json").write_text(json.dumps(log))
    proc = subprocess.run([sys.executable, "-m", "pipeline", "score", "--benchmark", "qwen3.6-27b", "--log",
                           str(tmp_path / "mlperf_log_accuracy.json"), "--dataset", str(accuracy_set),
                           "--out", str(tmp_path / "out"), "--json"],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, env.ENV_VAR: str(_bfcl_python())})
    assert proc.returncode == 11, proc.stderr  # far below the gates: FAIL, exit 11
    doc = json.loads(proc.stdout)
    detail = json.loads((tmp_path / "out" / "accuracy_detail.json").read_text())["_detail"]
    for k in ("overall_accuracy", "normalized_single_turn_score", "non_live", "live", "hallucination"):
        assert doc["scores"][k] == fx.EXPECTED[k], k
    assert detail["subset_scores"] == fx.EXPECTED["subset_scores"]
    assert detail["total_samples"] == fx.EXPECTED["total_samples"] and detail["issued_samples"] == 995
    assert "overall_accuracy" in doc["why"] and "normalized_single_turn_score" in doc["why"]


@needs_bfcl
def test_the_truth_itself_scores_full_marks_through_bfcl_eval(accuracy_set):
    """The reference answers, sent as a server would send tool calls, pass bfcl-eval's checker: every
    fifth row of the Python-typed subsets (a floor for the whole path; in Java and JavaScript rows a
    function-calling model sends every value as a string, which the fixtures do not write)."""
    rows = [json.loads(line) for line in accuracy_set.read_text().splitlines()][::5]
    rows = [r for r in rows if r["subset"] not in ("simple_java", "simple_javascript")]
    texts = [chat.decode(fx.sse(fx.streamed(fx.reference_calls(r))), True).scored() if r["subset"] not in fx.HALLUCINATION
             else "No tool fits." for r in rows]
    got = scorer.score(SimpleNamespace(qsl_idxs=list(range(len(rows))), texts=texts),
                       __import__("pandas").DataFrame(rows), code_runner=lambda jobs: env.check(_bfcl_python(), jobs))
    assert got["_detail"]["missing"] == 0
    assert got["overall_accuracy"] == 100.0, got["_detail"]["subset_scores"]


def test_a_chat_row_needs_no_input_text(tmp_path):
    """A BFCL row has messages, tools and a ground truth, no `input`: the jsonl reader takes it (its
    messages' text stands for the prompt in token counts); a row with neither is refused by name."""
    from harness.model.datasets import DatasetError, jsonl_record

    row = json.loads((REPO / "harness/data/standins/qwen3.6-27b.jsonl").read_text().splitlines()[0])
    assert "input" not in row and jsonl_record(json.dumps(row).encode(), "x")["messages"] == row["messages"]
    with pytest.raises(DatasetError, match="'messages'"):
        jsonl_record(json.dumps({"messages": [{"content": "no role"}], "ground_truth": "[]"}).encode(), "x")


def test_validation_names_a_missing_bfcl_environment_before_any_stage(tmp_path):
    from harness.backends import resolve

    os.environ[env.ENV_VAR], saved = str(tmp_path / "none" / "python"), os.environ.get(env.ENV_VAR)
    try:
        with pytest.raises(ParamsError, match="pipeline bfcl setup"):
            resolve(REPO / STANDIN)
    finally:
        os.environ.pop(env.ENV_VAR) if saved is None else os.environ.__setitem__(env.ENV_VAR, saved)


STANDIN = "params/standins/qwen3.6-27b.yaml"


@needs_bfcl
def test_standin_fullrun_calls_tools_through_transformers_serve_and_passes(tmp_path):
    """The stand-in end to end: a tiny Llama taught tool calls, served by a real `transformers serve`
    whose response parser turns them into OpenAI tool calls, SingleStream through real LoadGen, and
    bfcl-eval's checker passing every row against the benchmark's gates; a second run reuses all."""
    root = tmp_path / "artifacts"
    bfcl = {env.ENV_VAR: str(_bfcl_python())}
    proc = run_luigi("FullRun", "--params-file", STANDIN, artifacts=root, env=bfcl, timeout=900)
    assert "accuracy   PASS: overall_accuracy 100.00  normalized_single_turn_score 100.00" in proc.stdout + proc.stderr
    answers = [json.loads(line) for f in (root / "RunAccuracy").glob("*/chat_answers*.jsonl")
               for line in f.read_text().splitlines()]
    assert len(answers) == 12 and sum(bool(a["tool_calls"]) for a in answers) == 9  # 3 rows rightly call nothing
    assert {c["name"] for a in answers for c in a["tool_calls"]} >= {"get_weather", "geometry_circle_area", "home_lights"}
    report = json.loads(next((root / "FullRun").glob("*/report.json")).read_text())
    assert report["performance"]["scenario"] == "SingleStream" and report["performance"]["valid"] is True
    assert report["accuracy"]["passed"] is True and report["accuracy"]["overall_accuracy"] == 100.0
    run_luigi("FullRun", "--params-file", STANDIN, artifacts=root, env=bfcl, timeout=600)
    assert set(statuses(run_records(root)[-1]).values()) == {"reused"}


def test_a_text_log_benchmark_is_never_judged_against_its_own_references(tmp_path):
    """Its references are no answer a server would log (a tool call comes back parsed), so the self
    gates are refused, naming the fix: by the score command before anything else, and by the scoring
    itself (CheckAccuracy) in one line, not a traceback."""
    from harness.mlperf.evaluate import evaluate

    with pytest.raises(InputError, match="reference_scores: mlperf"):
        evaluate(tmp_path, [], None, benchmark="qwen3-vl-235b-a22b", round_="v6.1", target=0.99, gates_from="self")
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text(json.dumps([{"seq_id": 0, "qsl_idx": 0, "data": b"No.".hex().upper()}]))
    proc = subprocess.run([sys.executable, "-m", "pipeline", "score", "--benchmark", "qwen3.6-27b", "--log", str(log),
                           "--dataset", str(REPO / "harness/data/standins/qwen3.6-27b.jsonl"), "--gates", "self"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "use --gates mlperf" in proc.stderr, proc.stderr  # before any environment
