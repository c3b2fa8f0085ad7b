"""Issue 49 item 1: MLCommons' v6.1 submission checker in the closed division on a shortened tree of every
benchmark in the registry (tests/checker_trees.py builds them with perfdag's tree writer from short real
LoadGen runs). The checker may refuse only what a shortened run is (duration, sample and query counts,
coverage, early stopping), and it must read every gated accuracy value from accuracy.txt, which each
benchmark's scorer writes in its reference's form (qwen3-vl's F1 as `{"f1": x}`, read as F1_HIERARCHICAL)."""
from __future__ import annotations

import os

import pytest
from checker_trees import CONSTANTS_BLOB, blob_id, checker_checkout, closed_tree, run_checker, scores_at_reference
from checker_trees import unexpected as unexpected_errors

from harness.mlperf import benchmarks

#: The checker's metric types -> perfdag's metric names (the scorers' output keys).
METRIC = {"ROUGE1": "rouge1", "ROUGE2": "rouge2", "ROUGEL": "rougeL", "ROUGELSUM": "rougeLsum", "GEN_LEN": "gen_len",
          "TOKENS_PER_SAMPLE": "tokens_per_sample", "exact_match": "exact_match", "gsm8k_accuracy": "gsm8k",
          "mbxp_accuracy": "mbxp", "F1_HIERARCHICAL": "f1", "mAP": "overall_accuracy",
          "ACCURACY": "accuracy"}
#: Benchmarks whose only route is the endpoints layout (tests/test_endpoints_layout.py).
ENDPOINTS_ONLY = ("qwen3.6-27b",)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    found = checker_checkout(tmp_path_factory.mktemp("inference"))
    if found is None:
        why = ("MLCommons' submission checker not found: set PERFDAG_MLPERF_INFERENCE to a checkout of "
               "mlcommons/inference at b66003e1 (or lay one at ../shared/mlcommons-inference)")
        if os.environ.get("PERFDAG_REQUIRE_CHECKER"):
            pytest.fail(why)
        pytest.skip(why)
    assert blob_id(found / "tools/submission/submission_checker/constants.py") == CONSTANTS_BLOB, \
        f"{found} is not the checker of b66003e1"
    return found


@pytest.mark.parametrize("name", [n for n in benchmarks.REGISTRY if n not in ENDPOINTS_ONLY])
def test_a_shortened_closed_tree_draws_only_the_shortenings_errors(checkout, tmp_path, name):
    b = benchmarks.REGISTRY[name]
    tree, round_ = closed_tree(tmp_path, b)
    v = run_checker(checkout, tree, round_, tmp_path)
    assert not v["crashed"], v["tail"]
    assert unexpected_errors(v["errors"]) == []
    assert not [w for w in v["warnings"] if "accuracy not met" in w or "not hash" in w]
    for verdict in tree.rglob("TEST01/verify_performance.txt"):  # its failure is the shortening's, nothing else
        assert verdict.read_text().splitlines()[-1] == "TEST FAIL: Invalid results in the reference run"
    for verdict in tree.rglob("TEST01/verify_accuracy.txt"):
        assert "TEST PASS" in verdict.read_text().splitlines()
    category = "datacenter" if b.scenarios_in(round_, "datacenter") else "edge"
    assert sorted(r["scenario"] for r in v["read"]) == sorted(b.scenarios_in(round_, category)), v["read_log"]
    for r in v["read"]:
        scores = scores_at_reference(b, r["scenario"])
        read = r["accuracy_metrics"]
        assert sorted(read) == sorted(r["expected"]), (r, "a gated value the checker could not read")
        assert {METRIC[t]: float(x) for t, x in read.items()} == pytest.approx(
            {METRIC[t]: float(scores[METRIC[t]]) for t in read}), r
