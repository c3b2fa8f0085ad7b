"""deepseek-r1 and gpt-oss-120b scorers: the numbers MLCommons' scripts printed on seeded synthetic
logs (tests/golden/mlperf_scoring/reasoning.json), and the extraction rules case by case."""
from __future__ import annotations

import json
from pathlib import Path

import mlperf_scoring_fixtures as MF
import pytest
import reasoning_scoring_fixtures as RF

from harness.errors import InputError
from harness.mlperf import benchmarks
from harness.mlperf.scoring import reasoning as R
from harness.mlperf.scoring import score_log
from harness.mlperf.scoring.math_grade import grade_answer

GOLDEN = json.loads((Path(__file__).parent / "golden" / "mlperf_scoring" / "reasoning.json").read_text())


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return MF.load_tokenizer(MF.save_tokenizer(tmp_path_factory.mktemp("tok")))


@pytest.fixture(scope="module")
def built(tok):
    return {b: RF.build(b, tok) for b in ("deepseek-r1", "gpt-oss-120b")}


def _metrics(result: dict) -> dict:
    return {k: v for k, v in result.items() if not k.startswith("_")}


def _same(ours: dict, theirs: dict):
    assert set(theirs) <= set(ours), f"missing {set(theirs) - set(ours)}"
    for k, v in theirs.items():
        assert round(float(ours[k]), 4) == round(float(v), 4), (k, ours[k], v)


def _needs_latex():
    pytest.importorskip("pylatexenc", reason="MATH500 grading needs pylatexenc (PRM800K's LaTeX step)")


def test_registered():
    assert {"deepseek-r1", "gpt-oss-120b"} <= set(benchmarks.REGISTRY)
    ds, go = benchmarks.get("deepseek-r1"), benchmarks.get("gpt-oss-120b")
    assert ds.rounds == ("v5.1", "v6.0", "v6.1") and go.rounds == ("v6.0", "v6.1")
    assert go.accuracy_sample_count == 4395 and go.dataset_size == 6396 and ds.dataset_size == 4388
    g = go.gates("99")
    assert g["exact_match"]["min"] == pytest.approx(82.2987) and g["tokens_per_sample"] == {
        "min": 0.0, "max": pytest.approx(10998.9), "reference": 9999}
    g = ds.gates("99")
    assert g["exact_match"]["min"] == pytest.approx(80.544618)
    assert (g["tokens_per_sample"]["min"], g["tokens_per_sample"]["max"]) == pytest.approx((3497.60466, 4274.85014))
    assert ds.compliance == ("TEST06",) and go.compliance == ("TEST07", "TEST09")


def test_deepseek_same_numbers_as_mlcommons_script(built, tok):
    _needs_latex()
    df, log = built["deepseek-r1"]
    result = score_log(benchmarks.get("deepseek-r1"), log, df, tok, code_runner=RF.fake_code_runner)
    _same(result, GOLDEN["deepseek-r1"]["metrics"])
    no_code = score_log(benchmarks.get("deepseek-r1"), RF.without_code(df, log), df, tok)
    _same(no_code, GOLDEN["deepseek-r1/no-code"]["metrics"])


def test_gpt_oss_same_numbers_as_mlcommons_script(built, tok):
    df, log = built["gpt-oss-120b"]
    result = score_log(benchmarks.get("gpt-oss-120b"), log, df, tok, code_runner=RF.fake_code_runner)
    _same(result, GOLDEN["gpt-oss-120b"]["metrics"])
    g = GOLDEN["gpt-oss-120b"]["output_file"]
    assert round(result["_detail"]["exact_match_unrounded"], 4) == round(g["final_score_percentage"], 4)
    assert {k: [v["correct"], v["total"]] for k, v in result["_detail"]["per_dataset"].items()} == g["per_dataset"]
    no_code = score_log(benchmarks.get("gpt-oss-120b"), RF.without_code(df, log), df, tok)
    _same(no_code, GOLDEN["gpt-oss-120b/no-code"]["metrics"])


def test_fixtures_cover_the_edge_cases(built, tok):
    df, log = built["deepseek-r1"]
    assert len(df) >= 400 and len({e["qsl_idx"] for e in log}) < len(log) < len(df) * 1.1
    texts = [tok.decode(MF_ids, skip_special_tokens=True) for MF_ids in
             (__import__("numpy").frombuffer(bytes.fromhex(e["data"]), "int32").tolist() for e in log)]
    assert max(len(t) for t in texts) > 10000  # a long chain of thought
    assert any(t == "" for t in texts)
    assert any(t.count("\\boxed{") > 1 for t in texts) and any("Answer: Because" in t for t in texts)
    assert df["gt_output"].isna().any()


def test_no_code_runner_means_no_exact_match(built, tok):
    for b in ("deepseek-r1", "gpt-oss-120b"):
        df, log = built[b]
        if b == "deepseek-r1":
            _needs_latex()
        result = score_log(benchmarks.get(b), log, df, tok)
        assert "exact_match" not in result and "no code runner" in result["_detail"]["exact_match_missing"]
        assert "tokens_per_sample" in result  # the length is still reported


def test_gpt_oss_counts_every_entry_deepseek_only_the_first(tok):
    import pandas as pd

    ids = tok.encode("<|channel|>final<|message|>B<|return|>", add_special_tokens=False)
    wrong = tok.encode("<|channel|>final<|message|>C<|return|>", add_special_tokens=False)
    df = pd.DataFrame({"dataset": ["gpqa_diamond"], "ground_truth": ["B"], "gt_output": ["B"]})
    log = [{"qsl_idx": 0, "data": RF.to_hex(ids)}, {"qsl_idx": 0, "data": RF.to_hex(wrong)}]
    assert score_log(benchmarks.get("gpt-oss-120b"), log, df, tok)["exact_match"] == 50.0
    # deepseek: the harmony text has no "Answer:", so its first (and only scored) entry is wrong
    plain = tok.encode("Answer: B", add_special_tokens=False)
    log = [{"qsl_idx": 0, "data": RF.to_hex(plain)}, {"qsl_idx": 0, "data": RF.to_hex(wrong)}]
    r = score_log(benchmarks.get("deepseek-r1"), log, df, tok)
    assert r["exact_match"] == 100.0 and r["num-samples"] == 1


@pytest.mark.parametrize("text,last,want", [
    ("Answer: C", "D", "C"), ("ANSWER: (B)", "D", "B"), ("Final Answer = D", "D", "D"),
    ("C.", "D", None), ("C.", "J", "C"), ("The answer is C.", "D", None), ("Answer: E", "D", None),
    ("Answer: E", "J", "E"), ("Answer: Because", "D", None), ("answer: b", "D", "B"),
    ("Answer: A\nthen FINAL ANSWER: D", "D", "D"), ("['Answer: B']", "D", "B"), ("Answer:\\nC", "D", "C"),
    ("I think (G)", "J", "G"), ("I think so", "J", "I"), ("", "D", None), ("(C)", "D", None),
])
def test_multiple_choice_deepseek(text, last, want):
    assert R.choice_deepseek(text, last) == want


@pytest.mark.parametrize("text,want", [
    ("<|channel|>analysis<|message|>Answer: A<|end|><|start|>assistant<|channel|>final<|message|>**C**<|return|>", "C"),
    ("<|channel|>analysis<|message|>FINAL ANSWER: A<|end|><|channel|>final 明<|message|>The answer is B", "A"),
    ("<|channel|>final<|message|>(D) since", "D"), ("<|channel|>final<|message|>Answer. B", "B"),
    ("no answer at all", None), ("C", "C"),
])
def test_multiple_choice_gpt_oss(text, want):
    assert R.choice_gpt_oss(text, "D") == want


@pytest.mark.parametrize("text,want", [
    ("\\boxed{1} then \\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}"), ("\\boxed{5", None),
    ("\\boxed {5}", None), ("no box", None), ("\\boxed{ x = 5 }", "x = 5"),
])
def test_boxed(text, want):
    assert R.boxed(text) == want


@pytest.mark.parametrize("given,truth,want", [
    ("1/2", "\\frac{1}{2}", True), ("0.5", "\\frac{1}{2}", True), ("\\dfrac12", "\\frac{1}{2}", True),
    ("\\frac{2}{4}", "\\frac{1}{2}", False), ("5\\text{ cm}", "5", True), ("5 degrees", "5", True),
    ("x = 5", "5", True), ("1,000", "1000", True), ("(1, 2)", "(1,2)", True), ("[1,2)", "(1,2)", False),
    ("(x+1)^2", "x^2+2x+1", True), ("4.2426", "3\\sqrt{2}", False), ("\\sqrt{18}", "3\\sqrt{2}", True),
    ("monday", "\\text{Monday}", True), ("-3/4", "-\\frac{3}{4}", True), ("5.0", "5", True), ("6", "5", False),
])
def test_math_grading(given, truth, want):
    if "\\" in given + truth or "^" in given:
        _needs_latex()
    assert grade_answer(given, truth) is want


@pytest.mark.parametrize("text,want", [
    ("\\boxed{42}", 42), ("\\boxed{ 7 }", 7), ("Answer: 123", 123), ("Answer: 12.", None), ("\\boxed{042}", 42),
    ("\\boxed{1042}\nAnswer: 42", None), ("\\boxed{-5}\nAnswer: 5", 5), ("\\boxed{1} and \\boxed{2}", 2), ("", None),
])
def test_aime(text, want):
    assert R.aime(text) == want


def test_code_blocks():
    two = "```python\ndef a(): pass\n```\n```python\ndef b(): pass\n```"
    assert R.code_deepseek(two) == "def a(): pass" and R.code_gpt_oss(two) == "def b(): pass"
    assert R.code_deepseek("```\nx=1\n```") is None and R.code_gpt_oss("```py\nx=1\n```") == "x=1"
    assert R.code_gpt_oss("<|channel|>final<|message|>```python\nfinal()\n```<|return|>```python\nlater()\n```") == "final()"


def test_unknown_dataset_value_is_one_line_input_error(tok):
    import pandas as pd

    df = pd.DataFrame({"dataset": ["hellaswag"], "gt_output": ["A"], "ground_truth": ["A"]})
    log = [{"qsl_idx": 0, "data": RF.to_hex(tok.encode("Answer: A", add_special_tokens=False))}]
    for b in ("deepseek-r1", "gpt-oss-120b"):
        with pytest.raises(InputError, match="row 0: column 'dataset' is 'hellaswag'"):
            score_log(benchmarks.get(b), log, df, tok)
    with pytest.raises(InputError, match="'gt_output' or 'ground_truth'"):
        score_log(benchmarks.get("deepseek-r1"), log, df[["dataset"]], tok)


def test_deepseek_reads_ground_truth_where_there_is_no_gt_output(built, tok):
    """MLCommons' deepseek-r1 pickle names the column ground_truth; the script takes gt_output first."""
    _needs_latex()
    df, log = built["deepseek-r1"]
    renamed = df.rename(columns={"gt_output": "ground_truth"})
    _same(score_log(benchmarks.get("deepseek-r1"), RF.without_code(df, log), renamed, tok), GOLDEN["deepseek-r1/no-code"]["metrics"])
    both = renamed.assign(gt_output="Z")  # gt_output wins: every answer is now wrong
    assert score_log(benchmarks.get("deepseek-r1"), RF.without_code(df, log), both, tok)["exact_match"] == 0.0


def test_the_shipped_standins_are_what_make_standins_writes_and_scale_to_mlperf_size(tmp_path):
    """The shipped files hold exactly the rows make_standins writes (deterministic), and --full-size repeats a
    stand-in to its benchmark's MLPerf dataset size, rows unchanged (an MBXP id names its entry point)."""
    from harness.data import make_standins
    from harness.model.corpus import STANDINS

    for name, rows in (("deepseek-r1", make_standins.deepseek_rows()),
                       ("livecodebench-problems", make_standins.livecodebench_problems())):
        shipped = (STANDINS / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
        assert sorted(shipped) == sorted(json.dumps(r, sort_keys=True) for r in rows)
    out = make_standins.full_size("deepseek-r1", tmp_path / "big.jsonl")
    big = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(big) == benchmarks.get("deepseek-r1").dataset_size == 4388
    assert big[35] == big[0] and big[-1] == big[(4388 - 1) % 35]
    mixtral = make_standins.full_size("mixtral-8x7b", tmp_path / "mixtral.jsonl")
    rows = [json.loads(line) for line in mixtral.read_text(encoding="utf-8").splitlines()]
    mbxp_ids = {r["id"] for r in make_standins.standin_rows("mixtral-8x7b") if r["dataset"] == "MBXP"}
    assert len(rows) == 15000 and mbxp_ids and {r["id"] for r in rows if r["dataset"] == "MBXP"} == mbxp_ids
