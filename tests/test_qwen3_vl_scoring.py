"""qwen3-vl-235b-a22b: perfdag's scorer against what MLCommons' evaluation.py (b66003e1) printed on the
same synthetic rows (tests/golden/mlperf_scoring/qwen3_vl.json, made by running their script offline)."""
from __future__ import annotations

import json

import pandas as pd
import pytest
import qwen3_vl_fixtures as fx
from conftest import REPO

from harness.mlperf import benchmarks
from harness.mlperf.scoring import LogEntryError, score_log
from harness.mlperf.scoring import qwen3_vl_235b_a22b as scorer
from harness.mlperf.scoring.common import text_entries

GOLDEN = json.loads((REPO / "tests" / "golden" / "mlperf_scoring" / "qwen3_vl.json").read_text())
KEYS = ("f1", "brand_f1", "is_secondhand_f1", "random_f1", "random_is_secondhand_f1")


@pytest.mark.parametrize("run", GOLDEN["runs"], ids=lambda r: f"jobs{r['jobs']}")
def test_scores_equal_mlcommons_script(run):
    """F1_HIERARCHICAL, brand and second-hand F1 (and the random baselines) equal the script's to 4
    decimals (here: exactly) over 420 entries with every edge case, for the script's chunking on 4 CPUs
    and on 2; accuracy.txt is byte for byte the script's."""
    rows, log = fx.rows_and_log()
    df = pd.DataFrame(rows)
    got = scorer.score(text_entries(log, len(df)), df, jobs=run["jobs"])
    for k in KEYS:
        assert round(got.get(k, got["_detail"].get(k)), 4) == round(run[k], 4), k
    if run["jobs"] == 4:
        assert score_log(benchmarks.get("qwen3-vl-235b-a22b"), log, df, None)["f1"] == run["f1"]
        assert scorer.accuracy_txt(got) == run["accuracy_txt"]
    assert got["_detail"]["unparsable"] > 40  # the edge cases were met, not skipped


@pytest.mark.parametrize("pred, truth, counts", [
    ("", "", (1, 1, 1)),                          # an empty path is one empty level, as in the script
    ("A > B", "A>B", (0, 2, 1)),                  # no spaces: one level, not two
    ("A  >  B", "A > B", (2, 2, 2)),              # extra spaces stripped from each level
    ("A > X > B", "A > B", (1, 3, 2)),            # the common prefix only
])
def test_hierarchical_counts(pred, truth, counts):
    """Levels split on ' > ' exactly and stripped; the match is the longest common prefix."""
    assert scorer.hierarchical_counts(pred, truth) == counts


def test_a_log_that_is_not_text_is_named():
    """Bytes that are not UTF-8 are refused naming the entry, not scored as something else."""
    with pytest.raises(LogEntryError, match="entry 0 .*not UTF-8"):
        text_entries([{"qsl_idx": 0, "data": "ff"}], 1)


def _files(tmp_path, rows, log):
    ds, lg = tmp_path / "ds.jsonl", tmp_path / "mlperf_log_accuracy.json"
    ds.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    lg.write_text(json.dumps(log))
    return ds, lg


def test_score_command_equals_the_script_and_judges_the_gate(tmp_path):
    """`python -m pipeline score --benchmark qwen3-vl-235b-a22b` (no tokenizer: the log is text) prints the
    script's F1_HIERARCHICAL and fails the 0.99 x 0.7903 gate with exit 11; the truths answered as JSON pass."""
    import subprocess
    import sys

    rows, log = fx.rows_and_log()
    ds, lg = _files(tmp_path, rows, log)
    cmd = [sys.executable, "-m", "pipeline", "score", "--benchmark", "qwen3-vl", "--dataset", str(ds), "--json"]
    bad = subprocess.run([*cmd, "--log", str(lg)], cwd=REPO, capture_output=True, text=True)
    assert bad.returncode == 11, bad.stderr
    doc = json.loads(bad.stdout)
    f1 = doc["check"]["metrics"]["f1"]
    assert doc["scores"]["f1"] == GOLDEN["runs"][0]["f1"] and (f1["reference"], f1["passed"]) == (0.7903, False)
    truth = [{"qsl_idx": i, "data": json.dumps({"category": r["ground_truth_category"], "brand": r["ground_truth_brand"],
                                                "is_secondhand": r["ground_truth_is_secondhand"]}).encode().hex()}
             for i, r in enumerate(rows)]
    lg.write_text(json.dumps(truth))
    good = subprocess.run([*cmd, "--log", str(lg)], cwd=REPO, capture_output=True, text=True)
    assert good.returncode == 0, good.stdout[-500:] + good.stderr[-500:]
    assert json.loads(good.stdout)["scores"] == {"f1": 1.0, "brand_f1": 1.0, "is_secondhand_f1": 1.0}
