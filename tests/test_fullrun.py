"""FullRun end to end on CPU: real tritonserver, real LoadGen, ROUGE; what reruns when."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO, SHORT, copied_root, republish, run_luigi, run_records, statuses, tritonservers_under


@pytest.fixture
def root(built_default, tmp_path):
    with copied_root(built_default, tmp_path / "a") as r:
        yield r


def only(root, entry):
    """The one published artifact matching `Stage/*...` (hidden .locks/.tmp dirs skipped)."""
    hits = [p for p in root.glob(entry) if not any(part.startswith(".") for part in p.relative_to(root).parts)]
    assert len(hits) == 1, hits
    return hits[0]


def test_fullrun_reports_performance_and_accuracy_and_stops_its_servers(root):
    proc = run_luigi("FullRun", "--overrides", SHORT, artifacts=root)
    assert "perfdag FullRun" in proc.stdout and "report.md" in proc.stdout
    report_dir = only(root, "FullRun/*")
    report = json.loads((report_dir / "report.json").read_text())
    assert set(report["stages"]) == {"PrepareModel", "Quantize", "BuildEngine", "FillTritonRepo", "LaunchServers",
                                     "PrepareDataset", "RunLoadgen", "RunAccuracy", "CheckAccuracy", "FullRun"}
    perf, acc = report["performance"], report["accuracy"]
    assert perf["scenario"] == "Offline" and perf["valid"] is True
    assert perf["samples_per_second"] > 0 and perf["tokens_per_second"] > perf["samples_per_second"]
    assert set(perf["ttft_ms"]) == set(perf["tpot_ms"]) == {"p50", "p90", "p99"}
    assert acc["passed"] is True and acc["target"] == 0.99
    assert min(acc["rouge1"], acc["rouge2"], acc["rougeL"]) >= 99.0
    assert acc["tokens_per_sample"] > 0
    assert (report_dir / "report.md").read_text().startswith("# perfdag report")
    assert "## Server-side (the servers' own metrics)" in (report_dir / "report.md").read_text()
    assert (report_dir / "lengths.png").stat().st_size > 1000 and (report_dir / "throughput.png").exists()
    assert report["client_stats"]["input_tokens"]["n"] == report["client_stats"]["latency_ms"]["n"] > 0
    perf_dir = only(root, "RunLoadgen/*")
    for name in ("mlperf_log_summary.txt", "mlperf_log_detail.txt", "result.json"):
        assert (perf_dir / name).is_file()
    # Triton's own count of the samples LoadGen's Offline test sent it (the warm-up's left out), in the report
    (triton,) = report["server_metrics"]["servers"]
    sent = sum(s["completed"] for s in json.loads((perf_dir / "result.json").read_text())["harness"]["per_server"])
    assert triton["stack"] == "triton" and triton["metrics"]["requests"]["delta"] == sent > 0
    assert (only(root, "RunAccuracy/*") / "mlperf_log_accuracy.json").is_file()
    assert (only(root, "CheckAccuracy/*") / "accuracy.json").is_file()
    assert tritonservers_under(root) == []  # FullRun stopped what it started

    # A fully cached rerun: the same summary, and nothing heavy imported (no torch, numpy or httpx).
    again = subprocess.run([sys.executable, "-X", "importtime", "-m", "luigi", "--module", "pipeline", "FullRun",
                            "--local-scheduler", "--overrides", SHORT], cwd=REPO, capture_output=True, text=True,
                           env={**os.environ, "PERFDAG_ARTIFACTS": str(root)}, timeout=120)
    assert again.returncode == 0 and "perfdag FullRun" in again.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in again.stderr.splitlines() if "import time:" in line}
    assert not {m for m in imported if m.split(".")[0] in ("torch", "transformers", "modelopt", "matplotlib", "numpy",
                                                           "httpx")}


def test_loadgen_change_reruns_only_runloadgen_and_target_only_checkaccuracy(root):
    run_luigi("FullRun", "--overrides", SHORT, "--keep-servers", artifacts=root)
    pids = tritonservers_under(root)
    assert len(pids) == 1

    run_luigi("FullRun", "--overrides", SHORT + ",loadgen.min_duration_ms=2500", "--keep-servers", artifacts=root)
    built = {s for s, st in statuses(run_records(root)[-1]).items() if st == "built"}
    assert built == {"RunLoadgen", "FullRun"}
    assert tritonservers_under(root) == pids  # the live server was reused

    run_luigi("FullRun", "--overrides", SHORT + ",loadgen.min_duration_ms=2500,accuracy.target=0.999", artifacts=root)
    built = {s for s, st in statuses(run_records(root)[-1]).items() if st == "built"}
    assert built == {"CheckAccuracy", "FullRun"}
    assert tritonservers_under(root) == pids  # launched by an earlier run: this FullRun leaves it


def test_server_scenario_measures_ttft_and_tpot(root):
    run_luigi("RunLoadgen", "--overrides", SHORT + ",loadgen.scenario=Server,loadgen.server_target_qps=10",
              artifacts=root)
    result = json.loads((only(root, "RunLoadgen/*") / "result.json").read_text())
    assert result["scenario"] == "Server"
    assert result["ttft_ms"]["p99"] > 0 and result["tpot_ms"]["p99"] > 0
    assert result["tokens_per_s"] > 0
    # Triton's own metrics over LoadGen's test alone (after the warm-up): each query one request to it
    (triton,) = result["server_metrics"]["servers"]
    assert triton["stack"] == "triton" and triton["endpoint"].endswith("/metrics"), triton
    m = triton["metrics"]
    assert m["requests"]["name"] == "nv_inference_request_success"
    assert m["requests"]["delta"] == result["query_count"] > 0
    assert m["failed_requests"]["delta"] == 0
    assert m["executions"]["delta"] > 0 and m["inferences"]["delta"] >= m["executions"]["delta"]
    assert m["batch_size"]["value"] >= 1 and m["queue"]["value"] >= 0 and m["request"]["value"] > 0
    subprocess.run([sys.executable, "-m", "pipeline", "servers", "stop", "--all"],
                   env={**os.environ, "PERFDAG_ARTIFACTS": str(root)}, check=True, capture_output=True)
    assert tritonservers_under(root) == []


def test_damaged_engine_fails_the_accuracy_check(root):
    import torch
    from safetensors.torch import load_file, save_file

    weights = only(root, "BuildEngine/*/engine/weights.safetensors")
    tensors = load_file(weights)
    gen = torch.Generator().manual_seed(0)
    for name, t in tensors.items():  # damage every decoder layer's MLP
        if "mlp" in name and t.dtype.is_floating_point and t.dim() == 2:
            tensors[name] = t + torch.randn(t.shape, generator=gen) * t.abs().mean() * 2
    save_file(tensors, weights)
    republish(weights.parent.parent)  # an engine built bad (not tampered with: that would be rebuilt)
    run_luigi("CheckAccuracy", "--overrides", SHORT, artifacts=root)
    acc = json.loads((only(root, "CheckAccuracy/*") / "accuracy.json").read_text())
    assert acc["passed"] is False
    assert acc["scores"]["rougeL"] < 0.99 * acc["reference_scores"]["rougeL"]
    assert tritonservers_under(root) == []  # CheckAccuracy run directly stops the servers it launched
