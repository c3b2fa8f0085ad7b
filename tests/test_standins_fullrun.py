"""Every metric family end to end on CPU: a tiny Llama taught the shipped stand-in datasets, served by
a real tritonserver, measured and accuracy-logged by real LoadGen, scored by the benchmark's MLCommons
scorer (mixtral: ROUGE on OpenOrca rows, GSM8K exact match, MBXP pass@1 run in the sandbox; 405b:
rougeL and exact_match), VALID and PASS."""
from __future__ import annotations

import json

import pytest
from conftest import REPO, run_luigi, tritonservers_under

pytestmark = pytest.mark.timeout(1500)


@pytest.mark.parametrize("bench,metrics", [
    ("mixtral-8x7b", {"rouge1", "rouge2", "rougeL", "gsm8k", "mbxp", "tokens_per_sample"}),
    ("llama3.1-405b", {"rougeL", "exact_match", "tokens_per_sample"}),
])
def test_standin_fullrun_scores_every_metric_and_passes(bench, metrics, tmp_path):
    root = tmp_path / "artifacts"
    params = str(REPO / "params" / "standins" / f"{bench}.yaml")
    proc = run_luigi("FullRun", "--params-file", params, "--overrides", "loadgen.min_duration_ms=2000",
                     artifacts=root, timeout=1400)
    assert "accuracy   PASS" in proc.stdout and "result     VALID" in proc.stdout, proc.stdout[-3000:]
    (acc_dir,) = [p for p in root.glob("CheckAccuracy/*") if not p.name.startswith(".")]
    acc = json.loads((acc_dir / "accuracy.json").read_text())
    assert acc["benchmark"] == bench and acc["passed"] and not acc["check"]["missing"]
    assert metrics <= set(acc["check"]["metrics"]), acc["check"]
    for m in metrics - {"tokens_per_sample"}:
        assert acc["scores"][m] > 0, (m, acc["scores"])
    if bench == "mixtral-8x7b":  # the generated code really ran, in the sandbox, and is kept
        res = json.loads((acc_dir / "code_outputs" / "mbxp_results.json").read_text())
        assert res["scored"] == 12 and res["passed"] >= 1 and not res["not_scored_languages"]
    assert tritonservers_under(root) == []
