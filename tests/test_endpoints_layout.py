"""Issue 49 item 3: the endpoints results layout (config.yaml, performance/result_summary.json,
accuracy/accuracy_results.json) that MLCommons' v6.1 checker reads for its ENDPOINTS_ALLOWED_MODELS,
written from perfdag's own measurement: a qwen3.6-27b tree from a real session replay (its only route),
checked in the closed division; and `pipeline submission --layout endpoints` end to end."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from checker_trees import CONSTANTS_BLOB, blob_id, checker_checkout, run_checker, unexpected
from conftest import REPO, SHORT, copied_root

from harness.mlperf import benchmarks, endpoints_layout
from harness.mlperf.system_desc import machine_facts, measurements, system_description
from harness.serving.openai.client import probe
from harness.serving.ports import free_port
from harness.sessions.scheduler import Plan
from harness.sessions.trajectories import read_trajectories
from harness.sessions.workload import Request, run_sessions
from harness.untrusted import yamlio

STANDIN = REPO / "harness/data/standins/agentic-trajectories.jsonl"
BFCL_AT_REFERENCE = {"overall_accuracy": 86.23, "normalized_single_turn_score": 87.96, "non_live": 90.1, "live": 80.2,
                     "hallucination": 85.3, "_detail": {"subset_scores": {"simple_python": 95.0}}}


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    found = checker_checkout(tmp_path_factory.mktemp("inference"))
    if found is None:
        why = "MLCommons' submission checker not found (tests/checker_trees.py says where it is looked for)"
        if os.environ.get("PERFDAG_REQUIRE_CHECKER"):
            pytest.fail(why)
        pytest.skip(why)
    assert blob_id(found / "tools/submission/submission_checker/constants.py") == CONSTANTS_BLOB
    return found


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    """A real replay of four stand-in trajectories against the echo server: result.json's content."""
    out = tmp_path_factory.mktemp("replay")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harness.serving.testing.echo_openai", "--port", str(port),
                             "--token-delay-ms", "1"], cwd=REPO)
    url = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not probe(url):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        result, _ = run_sessions(url, read_trajectories(STANDIN), Plan(users=1, trajectories=4), Request(max_tokens=8), out)
    finally:
        proc.terminate()
        proc.wait(10)
    return result


def _tree(tmp_path, replay, division="closed", scores=BFCL_AT_REFERENCE):
    facts = machine_facts(tmp_path, {"mlcommons-loadgen": "6.0.17"}, "perfdag")
    user = {"status": "available", "system_type": "edge", "cooling": "air", "host_storage_type": "SSD",
            "host_memory_configuration": "N/A", "host_networking": "N/A", "host_networking_topology": "N/A",
            "host_network_card_count": "1"}
    desc = system_description(facts, user, division=division, submitter="PerfDag", system_name="cpu_tiny")
    meas = measurements({"input_data_types": "int32", "retraining": "No", "starting_weights_filename": "model",
                         "weight_data_types": "bf16", "weight_transformations": "none"}, {})
    cfg = dict(benchmark="qwen3.6-27b", scenario="SingleStream", round_="v6.1", model="tiny", streaming=True,
               max_new_tokens=8, min_duration_ms=0, max_duration_ms=0, samples=replay["metrics"]["turns"],
               load_pattern={"type": "agentic_inference", "target_concurrency": 1}, endpoints=replay["servers"],
               datasets=[{"name": STANDIN.name, "type": "performance"},
                         {"name": "bfcl_v4::function_calling", "type": "accuracy"}], generated_by="perfdag test")
    run = endpoints_layout.EndpointsRun("SingleStream", replay["measured"], cfg, scores, 995)
    files = endpoints_layout.assemble(tmp_path / "tree", division=division, submitter="PerfDag", system="cpu_tiny",
                                      benchmark="qwen3.6-27b", maps_to=None, system_desc=desc, measurements=meas,
                                      runs=[run], src_readme="#\n", params_yaml="{}\n", version="perfdag test",
                                      git_sha="0" * 40)
    return tmp_path / "tree", files


def test_the_files_have_endpoints_shapes_from_the_replay(tmp_path, replay):
    tree, files = _tree(tmp_path, replay)
    d = "closed/PerfDag/results/cpu_tiny/qwen3.6-27b/SingleStream/"
    assert {d + f for f in ("config.yaml", "performance/result_summary.json", "accuracy/accuracy_results.json",
                            "measurements.json", "README.md")} <= set(files)
    summary = json.loads((tree / d / "performance/result_summary.json").read_text())
    m = replay["metrics"]
    assert summary["n_samples_completed"] == m["window"]["turns"] and summary["n_samples_failed"] == 0
    assert summary["latency"]["percentiles"]["99.0"] == round(replay["measured"]["latency_ms"]["p99"] * 1e6)
    assert summary["ttft"]["percentiles"]["50.0"] > 0 and "early_stopping_percentiles" in summary["latency"]
    assert summary["qps"] == pytest.approx(m["window"]["turns_per_s"], rel=1e-2)
    config = yamlio.loads((tree / d / "config.yaml").read_text())
    seeds = benchmarks.ROUND_SEEDS["v6.1"]
    assert config["type"] == "online" and config["settings"]["load_pattern"]["type"] == "agentic_inference"
    assert (config["settings"]["runtime"]["dataloader_random_seed"],
            config["settings"]["runtime"]["scheduler_random_seed"]) == seeds[1:]
    acc = json.loads((tree / d / "accuracy/accuracy_results.json").read_text())
    (entry,) = acc["accuracy_scores"]
    assert entry["score"] == 0.8623 and entry["total_samples"] == 995 and entry["dataset_type"] == "accuracy"
    assert entry["breakdown"]["overall_accuracy"] == 86.23 and entry["breakdown"]["category_scores"]["live"] == 80.2


def test_a_qwen3_6_27b_tree_draws_only_the_shortenings_errors(checkout, tmp_path, replay):
    """The closed division: the checker reads the BFCL score (as `mAP`) and the replay; its only error is the
    configured minimum duration, 0 for a replay of one pass (as endpoints' own edge ruleset sets it)."""
    tree, _ = _tree(tmp_path, replay)
    v = run_checker(checkout, tree, "v6.1", tmp_path)
    assert not v["crashed"], v["tail"]
    assert unexpected(v["errors"]) == [] and any("Test duration less than 600s" in e and "found=0" in e
                                                 for e in v["errors"])
    assert not [w for w in v["warnings"] if "accuracy not met" in w]
    (r,) = v["read"]
    assert r["endpoints"] and r["scenario"] == "SingleStream" and r["accuracy_metrics"] == 0.8623 and r["passed"]


SYSTEM_YAML = REPO / "params" / "systems" / "cpu-example.yaml"
AS_8B = ("submission.submitter=PerfDag,submission.system=cpu_tiny,submission.benchmark=tiny-llama-int8,"
         "submission.maps_to=llama3.1-8b,loadgen.mlperf_model=llama3.1-8b")


def _submission(root, *args, overrides=f"{SHORT},{AS_8B}", system=SYSTEM_YAML):
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
    return subprocess.run([sys.executable, "-m", "pipeline", "submission", "--overrides", overrides,
                           "--system", str(system), *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=1500)


@pytest.mark.parametrize("args, overrides, words", [
    (["--layout", "endpoints", "--scenarios", "Offline"],
     f"{SHORT},submission.submitter=X,submission.system=s,submission.benchmark=b,submission.maps_to=mixtral-8x7b,"
     "loadgen.mlperf_model=mixtral-8x7b,loadgen.round=v6.0",
     "--layout endpoints: mixtral-8x7b is submitted in the loadgen layout only"),
    (["--layout", "loadgen", "--scenarios", "SingleStream"],
     f"{SHORT},submission.submitter=X,submission.system=s,submission.benchmark=b,submission.maps_to=qwen3.6-27b",
     "--layout loadgen: qwen3.6-27b is submitted in the endpoints layout only"),
])
def test_a_layout_the_checker_does_not_read_is_refused_before_anything_runs(tmp_path, args, overrides, words):
    edge = "SingleStream" in args
    proc = _submission(tmp_path / "a", *args, overrides=overrides,
                       system=REPO / "params/systems" / ("cpu-edge-example.yaml" if edge else "cpu-example.yaml"))
    assert proc.returncode == 2 and words in proc.stdout + proc.stderr, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert not (tmp_path / "a").exists()


def test_pipeline_submission_writes_the_endpoints_layout_of_a_loadgen_benchmark(built_default, tmp_path, request):
    """`pipeline submission --layout endpoints` for llama3.1-8b (the tiny model, open division): per scenario
    config.yaml, result_summary.json and accuracy_results.json from perfdag's own runs; with the checker, only
    a shortened run's errors."""
    with copied_root(built_default, tmp_path / "a") as root:
        out = tmp_path / "tree"
        proc = _submission(root, "--layout", "endpoints", "--scenarios", "Offline,Server", "--out", str(out))
    assert proc.returncode in (0, 10), proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "benchmark tiny-llama-int8 (maps to llama3.1-8b), endpoints layout" in proc.stdout
    d = out / "open/PerfDag/results/cpu_tiny/tiny-llama-int8"
    for scenario, kind in (("Offline", "offline"), ("Server", "online")):
        config = yamlio.loads((d / scenario / "config.yaml").read_text())
        assert config["type"] == kind and config["submission_ref"]["model"] == "llama3.1-8b"
        summary = json.loads((d / scenario / "performance/result_summary.json").read_text())
        assert summary["n_samples_completed"] > 0 and summary["latency"]["percentiles"]["50.0"] > 0
        acc = json.loads((d / scenario / "accuracy/accuracy_results.json").read_text())
        (entry,) = acc["accuracy_scores"]
        assert entry["score"]["rouge1"] > 0 and entry["total_samples"] == 64
        assert not (d / scenario / "performance/run_1").exists()  # no LoadGen logs in this layout
    summary = json.loads((d / "Server/performance/result_summary.json").read_text())
    assert summary["ttft"]["percentiles"]["99.0"] > 0 and summary["tpot"]["percentiles"]["50.0"] > 0
    # early-stopping estimates where the queries suffice (p50 from 64), none for the p99 (459 needed)
    assert summary["ttft"]["early_stopping_percentiles"]["50.0"] > 0
    assert summary["ttft"]["early_stopping_percentiles"]["99.0"] is None
    assert summary["duration_ns"] > 0 and summary["n_samples_issued"] == summary["n_samples_completed"] > 0
    found = checker_checkout(tmp_path / "inference")
    if found is None:
        return
    v = run_checker(found, out, "v6.1", tmp_path)
    assert not v["crashed"], v["tail"]
    assert unexpected(v["errors"]) == [], v["errors"]
    assert sorted(r["scenario"] for r in v["read"]) == ["Offline", "Server"] and all(r["endpoints"] for r in v["read"])
