"""harness.mlperf.scoring against the numbers MLCommons' own evaluation scripts printed on the same
synthetic logs (tests/golden/mlperf_scoring/README.md), and its pieces alone."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import mlperf_scoring_fixtures as F
import numpy as np
import pandas as pd
import pytest

from harness.errors import InputError
from harness.mlperf import benchmarks, scoring
from harness.mlperf.scoring import common
from harness.mlperf.scoring import llama3_1_405b as llama3_405b
from harness.mlperf.scoring import mixtral_8x7b as mixtral

GOLDEN = json.loads((Path(__file__).parent / "golden" / "mlperf_scoring" / "scripts.json").read_text())


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return F.load_tokenizer(F.save_tokenizer(tmp_path_factory.mktemp("tok")))


_BUILT: dict = {}


def built(benchmark, tok):
    if benchmark not in _BUILT:
        _BUILT[benchmark] = F.build(benchmark, tok)
    return _BUILT[benchmark]


def metrics_only(result: dict) -> dict:
    return {k: v for k, v in result.items() if not k.startswith("_")}


def assert_same(ours: dict, theirs: dict):
    assert set(metrics_only(ours)) == set(theirs), (sorted(ours), sorted(theirs))
    for k, v in theirs.items():
        assert round(float(ours[k]), 4) == pytest.approx(round(float(v), 4), abs=1e-9), (k, ours[k], v)


# ====================================================================== against the scripts

@pytest.mark.parametrize("benchmark", list(F.ROWS))
def test_same_numbers_as_mlcommons_script(benchmark, tok):
    df, log = built(benchmark, tok)
    received = []

    def runner(rows, texts):  # records what the MBXP evaluation gets, in the script's dict form
        for (_, r), t in zip(rows.iterrows(), texts):
            lang, entry_point = r["id"].split("_", 1)
            received.append({"lang": lang, "prompt": r["input"], "test_code": r["gt_output"],
                             "entry_point": entry_point, "response": t})
        return F.fake_code_runner(rows, texts)

    result = scoring.score_log(benchmarks.get(benchmark), log, df, tok, code_runner=runner)
    assert_same(result, GOLDEN[benchmark]["metrics"])
    assert set(metrics_only(result)) <= set(benchmarks.get(benchmark).scoring().METRICS)
    if benchmark == "mixtral-8x7b":
        g = GOLDEN[benchmark]
        assert len(received) == g["mbxp_problems"]
        assert hashlib.sha256(json.dumps(received, sort_keys=True).encode()).hexdigest() == g["mbxp_problems_sha256"]


def test_fixtures_have_the_edge_cases(tok):
    df, log = built("mixtral-8x7b", tok)
    idxs = [e["qsl_idx"] for e in log]
    assert len(idxs) > len(set(idxs)) and len(set(idxs)) < len(df)  # repeats, and rows never logged
    assert any(e["data"] == "" for e in log)
    texts = [tok.decode(common.decode_hex_ids(e["data"], np.int32, "")) for e in log]
    assert any("<s>" in t and "</s>" in t for t in texts)
    answers = {mixtral.gsm8k_answer(t) for t in texts}
    assert "" in answers and any(a.startswith("-") for a in answers) and any("." in a for a in answers)


def test_mixtral_subsets_score_like_a_log_of_those_rows_only(tok):
    df, log = built("mixtral-8x7b", tok)
    theirs = GOLDEN["mixtral-8x7b/GSM8K-only"]["metrics"]
    assert_same(scoring.score_log(benchmarks.get("mixtral-8x7b"), F.only_subset(log, df, "GSM8K"), df, tok), theirs)
    assert_same(scoring.score_log(benchmarks.get("mixtral-8x7b"), log, df, tok, subsets=["GSM8K"]), theirs)
    with pytest.raises(InputError, match="subset.*OpenOrkka"):
        scoring.score_log(benchmarks.get("mixtral-8x7b"), log, df, tok, subsets=["OpenOrkka"])


def test_int64_logs_score_the_same_as_int32(tok):
    df, log = built("llama2-70b", tok)
    log64 = [{**e, "data": F.to_hex(common.decode_hex_ids(e["data"], np.int32, ""), np.int64)} for e in log]
    assert_same(scoring.score_log(benchmarks.get("llama2-70b"), log64, df, tok, dtype="int64"), GOLDEN["llama2-70b"]["metrics"])
    with pytest.raises(InputError, match="not a whole number of int64"):
        scoring.score_log(benchmarks.get("llama2-70b"), log, df, tok, dtype="int64")


# ====================================================================== the pieces

@pytest.mark.parametrize("text,answer", [
    ("So 3 apples. The answer is 1,234.", "1234"),
    ("We get 12 and then 7", "7"),                         # no delimiter: the last number
    ("I do not know.", ""),
    ("The answer is 5.\nQ: Next? The answer is 9.", "5"),  # cut at "\nQ:"
    ("The answer is 4 then 8. The answer is 2", "2"),      # the last delimiter's first number
    ("12 apples. The answer is unclear.", "12"),           # delimiter without a number after it
    ("The answer is -17.", "-17"),
    ("The answer is 3.50", "3.50"),
    ("The answer is .5", ".5"),
    ("Think\nQ: what is 4?", ""),
    ("1,2,3 and 9. The answer is9", "9"),
])
def test_gsm8k_answer(text, answer):
    assert mixtral.gsm8k_answer(text) == answer


def test_gsm8k_compares_as_floats():
    assert mixtral.gsm8k_correct("The answer is 3.50", "3.5")
    assert mixtral.gsm8k_correct("The answer is 1,000", "1000")
    assert not mixtral.gsm8k_correct("The answer is 1,000", "1,000")  # the reference is not a float
    assert not mixtral.gsm8k_correct("no number", "0")
    assert mixtral.gsm8k_accuracy(["The answer is 2", "3", "x"], ["2", "4", "5"]) == pytest.approx(100 / 3)


def test_405b_metrics():
    u1, u2 = "0123abcd-0000-1111-2222-333344445555", "ffffeeee-dddd-cccc-bbbb-aaaa99998888"
    assert llama3_405b.niah_em(f"{u1}, {u2}", f"found {u1} and {u2}") == {"exact_match": 100.0}
    assert llama3_405b.niah_em(f"{u1}, {u2}", "nothing") == {"exact_match": 0.0}
    # Per pair: the share of the label UUID's characters found anywhere in the predicted one.
    share = sum(c in u2 for c in u1) / len(u1)
    assert llama3_405b.niah_em(u1, u2) == {"exact_match": round(share * 100, 2)}
    assert llama3_405b.niah_em(u1, f"{u1} {u2}") == {"exact_match": 50.0}  # divided by predicted UUIDs
    assert llama3_405b.qa_em("Paris|Lyon", "Answer: no. Answer: Paris") == {"exact_match": 100.0}
    assert llama3_405b.qa_em("New York", "it is new  york indeed") == {"exact_match": 100.0}
    assert llama3_405b.qa_em("Paris", "Answer: Rome") == {"exact_match": 0.0}
    assert llama3_405b.qa_em("Paris", "") == {"exact_match": 100.0}  # the script's quirk
    assert llama3_405b.means([{"rougeL": 10.0}, {"exact_match": 100.0}, {"exact_match": 0.0}]) == \
        {"exact_match": 50.0, "rougeL": 10.0}


def test_405b_detail_per_subset(tok):
    df, log = built("llama3.1-405b", tok)
    detail = scoring.score_log(benchmarks.get("llama3.1-405b"), log, df, tok)["_detail"]
    assert set(detail["subsets"]) == {"govreport", "ruler_niah", "longbench_qa"}
    assert set(detail["subsets"]["govreport"]) == {"rougeL", "rows"}


def test_rouge_means_and_sentence_split():
    assert common.split_sentences(" One. Two!  Three?\nfour 3.5 x ") == ["One.", "Two!", "Three?", "four 3.5 x"]
    assert common.rouge_means(["the cat sat"], ["the cat sat"]) == {t: 100.0 for t in common.ROUGE_TYPES}
    per = common.rouge_per_sample(["a b", "c"], ["a b", "d"], ["rouge1"])
    assert per == {"rouge1": [1.0, 0.0]} and common.mean_percent(per["rouge1"]) == 50.0


def test_first_entry_of_a_qsl_idx_wins():
    log = [{"qsl_idx": 1, "data": F.to_hex([5, 6])}, {"qsl_idx": 0, "data": ""},
           {"qsl_idx": 1, "data": "not hex, never decoded"}]
    s = common.first_entries(log, 2)
    ids = [t.tolist() for t in s.token_ids]  # numpy arrays (4 bytes an id)
    assert (s.qsl_idxs, ids, s.entries, s.gen_tok_len) == ([1, 0], [[5, 6], []], 3, 2)


def test_mixtral_counts_repeats_in_gen_num_only(tok):
    df = pd.DataFrame({"dataset": ["GSM8K", "GSM8K"], "gt_output": ["2", "3"], "id": ["a", "b"], "input": ["", ""]})
    ids = tok.encode("The answer is 2", add_special_tokens=False)
    log = [{"qsl_idx": 0, "data": F.to_hex(ids)}, {"qsl_idx": 0, "data": F.to_hex(ids + ids)}]
    r = scoring.score_log(benchmarks.get("mixtral-8x7b"), log, df, tok)
    assert (r["gsm8k"], r["gen_num"], r["gen_tok_len"]) == (100.0, 2, len(ids))
    assert r["tokens_per_sample"] == round(len(ids) / 2, 1) and r["mbxp"] == 0 and "rouge1" not in r


def test_mbxp_absent_without_a_code_runner_and_gsm8k_absent_without_rows(tok):
    df = pd.DataFrame({"dataset": ["MBXP", "OpenOrca"], "gt_output": ["assert f()", "hi there."],
                       "id": ["python_f", "o"], "input": ["p", "q"]})
    log = [{"qsl_idx": i, "data": F.to_hex(tok.encode("hi there.", add_special_tokens=False))} for i in (0, 1)]
    r = scoring.score_log(benchmarks.get("mixtral-8x7b"), log, df, tok)
    assert "mbxp" not in r and "gsm8k" not in r and r["rouge1"] == 100.0
    r = scoring.score_log(benchmarks.get("mixtral-8x7b"), log, df, tok, code_runner=lambda rows, texts: {"mbxp": 100.0 * len(texts)})
    assert r["mbxp"] == 100.0


# ====================================================================== errors

def test_malformed_inputs_raise_one_line_input_errors(tok):
    df = pd.DataFrame({"output": ["a", "b"]})
    cases = [
        ([{"data": ""}], r"entry 0: missing field 'qsl_idx'"),
        ([{"qsl_idx": 0}], r"entry 0: missing field 'data'"),
        ([{"qsl_idx": "0", "data": ""}], r"entry 0: field 'qsl_idx'"),
        ([{"qsl_idx": 2, "data": ""}], r"'qsl_idx' = 2 is outside the dataset's 2 rows"),
        ([{"qsl_idx": 0, "data": "XYZ"}], r"entry 0 \(qsl_idx 0\): field 'data' is not hex"),
        ([{"qsl_idx": 0, "data": "ABCDEF"}], r"not a whole number of int32"),
        ([], r"no entries to score"),
        ({"qsl_idx": 0}, r"expected a JSON list"),
    ]
    for log, msg in cases:
        with pytest.raises(InputError, match=msg) as exc:
            scoring.score_log(benchmarks.get("llama2-70b"), log, df, tok, log_name="run/mlperf_log_accuracy.json")
        assert "\n" not in str(exc.value) and "mlperf_log_accuracy.json" in str(exc.value)
    with pytest.raises(InputError, match=r"mix.pkl: mixtral-8x7b needs column\(s\) 'dataset'.*'id'") as exc:
        scoring.score_log(benchmarks.get("mixtral-8x7b"), [], df.rename(columns={"output": "gt_output"}).assign(input=""), tok,
                          dataset_name="mix.pkl")
    with pytest.raises(InputError, match="row 0: column 'output' must be text"):
        scoring.score_log(benchmarks.get("llama2-70b"), [{"qsl_idx": 0, "data": ""}], pd.DataFrame({"output": [None]}), tok)
    odd = pd.DataFrame({"dataset": ["gsm8k"], "gt_output": ["1"], "id": ["x"], "input": [""]})
    with pytest.raises(InputError, match="row 0: column 'dataset' is 'gsm8k'"):
        scoring.score_log(benchmarks.get("mixtral-8x7b"), [{"qsl_idx": 0, "data": ""}], odd, tok)
    with pytest.raises(InputError, match="row 0: column 'metric' is 'bleu'"):
        scoring.score_log(benchmarks.get("llama3.1-405b"), [{"qsl_idx": 0, "data": ""}],
                          pd.DataFrame({"gt_output": ["x"], "metric": ["bleu"]}), tok)
    with pytest.raises(InputError, match="dtype 'float'"):
        scoring.score_log(benchmarks.get("llama2-70b"), [{"qsl_idx": 0, "data": ""}], df, tok, dtype="float")
    with pytest.raises(KeyError, match="unknown MLPerf benchmark 'llama2-7b'.*llama2-70b"):
        scoring.score_log(benchmarks.get("llama2-7b"), [], df, tok)


def test_interface_tables():
    """The one benchmark registry names each benchmark's scorer, a module of the benchmark's own name."""
    assert set(benchmarks.REGISTRY) == {"llama2-70b", "llama3.1-8b", "mixtral-8x7b", "llama3.1-405b", "deepseek-r1",
                                        "gpt-oss-120b", "qwen3-vl-235b-a22b",
                                        "llama3.1-8b-edge", "qwen3.6-27b", "whisper"}
    for b in benchmarks.REGISTRY.values():
        assert b.scorer == b.name.replace(".", "_").replace("-", "_") == b.scoring().__name__.rsplit(".", 1)[1]
    scorer = lambda name: benchmarks.get(name).scoring()  # noqa: E731
    assert scorer("llama2-70b").REQUIRED_COLUMNS == ("output",)
    assert scorer("mixtral-8x7b").REQUIRED_COLUMNS == ("dataset", "gt_output", "id")
    assert scorer("llama3.1-405b").REQUIRED_COLUMNS == ("gt_output", "metric")
    assert "gsm8k" in scorer("mixtral-8x7b").METRICS and "mbxp" in scorer("mixtral-8x7b").METRICS
    assert "tokens_per_sample" not in scorer("llama3.1-8b").METRICS
    assert benchmarks.get("llama3.1-405b").scoring().METRICS[:2] == ("rougeL", "exact_match")


def test_pipeline_llama2_path_gives_the_same_numbers(tok, tmp_path):
    """harness.mlperf.accuracy (CheckAccuracy's scoring today) on the llama2 fixture."""
    from harness.mlperf.accuracy import parse_accuracy_log, score_outputs
    from harness.model.datasets import Sample

    df, log = built("llama2-70b", tok)
    (tmp_path / "mlperf_log_accuracy.json").write_text(json.dumps(log))
    samples = [Sample(index=i, input_ids=[1], reference_text=r) for i, r in enumerate(df["output"])]
    assert_same(score_outputs(parse_accuracy_log(tmp_path), samples, None, tokenizer=tok), GOLDEN["llama2-70b"]["metrics"])


def test_per_row_detail_adds_up_to_the_metrics(tok):
    df, log = built("mixtral-8x7b", tok)
    r = scoring.score_log(benchmarks.get("mixtral-8x7b"), log, df, tok)
    rows = r["_detail"]["per_row"]
    gsm = [v for v in rows.values() if "correct" in v]
    assert len(gsm) == r["_detail"]["rows"]["GSM8K"] and 100 * sum(v["correct"] for v in gsm) / len(gsm) == r["gsm8k"]
    orca = [v["rouge1"] for v in rows.values() if "rouge1" in v]
    assert np.mean(orca) == pytest.approx(r["rouge1"], abs=1e-3)
    df, log = built("llama3.1-405b", tok)
    r = scoring.score_log(benchmarks.get("llama3.1-405b"), log, df, tok)
    em = [v["exact_match"] for v in r["_detail"]["per_row"].values() if "exact_match" in v]
    assert len(r["_detail"]["per_row"]) == r["gen_num"] and np.mean(em) == pytest.approx(r["exact_match"])
