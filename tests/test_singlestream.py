"""LoadGen's SingleStream scenario end to end, the registry's scenarios per system category, and
llama3.1-8b-edge: settings and user.conf, result.json's p90 latency and early-stopping estimate,
validation before any stage, the report, Nightly, readiness, the results tree's compliance tests,
and real FullRuns over gRPC (tritonserver) and HTTP (transformers serve)."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import mlperf_loadgen as lg
import pytest
from conftest import REPO, copied_root, run_luigi, tritonservers_under

from harness.backends import resolve
from harness.config import ParamsError
from harness.loadgen.results import invalid_reasons, read_mllog
from harness.loadgen.settings import build_test_settings, latency_constraints, user_conf_text
from harness.mlperf import benchmarks
from harness.mlperf.readiness import submission_warnings
from harness.mlperf.submission import compliance_tests, needs_test06, registry_name
from harness.reports import nightly

DEFAULT = REPO / "params" / "default.yaml"
EDGE = "llama3.1-8b-edge"
STANDIN = "params/standins/llama3.1-8b-edge.yaml"
#: The CPU default labelled as the edge benchmark, SingleStream, short: equal issue pads 2 x 2 s / 100 ms
#: = 40 queries to 64, two passes over the 32 samples and what early stopping needs for the p90.
# 2 x 2 s / 25 ms = 160 queries (5 passes over the 32: equal issue), at least 2 s at up to 80 queries/s;
# 100 ms asked for 64, which a host answering 41 queries/s (25 ms each) issued in 1.5 s and ran out.
SINGLE = "loadgen.min_duration_ms=2000,loadgen.min_query_count=32,dataset.num_samples=32,loadgen.scenario=SingleStream," \
         "loadgen.mlperf_model=llama3.1-8b-edge,loadgen.single_stream_expected_latency_ms=25"


# ====================================================================== the registry

def test_the_registry_says_which_scenarios_each_category_takes():
    """Scenario lists per round and category are the checker's (b66003e1): llama3.1-8b-edge is edge-only
    with SingleStream and Offline; the datacenter LLMs have no edge scenario; both categories take either's."""
    edge = benchmarks.get(EDGE)
    for r in ("v5.1", "v6.0", "v6.1"):
        assert edge.scenarios_in(r, "edge") == ("Offline", "SingleStream")
        assert edge.scenarios_in(r, "datacenter") == ()
        assert edge.scenarios_in(r, "datacenter,edge") == edge.scenarios_in(r, "edge,datacenter") == edge.scenarios_in(r)
    llama = benchmarks.get("llama3.1-8b")
    assert llama.scenarios_in("v6.1", "edge") == () and "SingleStream" not in llama.scenarios_in("v6.1")
    assert llama.scenarios_in("v6.1", "datacenter,edge") == ("Offline", "Server", "Interactive")
    assert benchmarks.get("deepseek-r1").scenarios_in("v5.1") == ("Offline", "Server")


def test_llama3_1_8b_edge_entry_is_the_checkers():
    """Sample counts, gates (0.99 x ROUGE, 0.9..1.1 x gen_len 3,051,113), no TTFT/TPOT limits, no TEST06,
    and llama3.1-8b's scorer under the edge's name: what constants.py and evaluation.py say."""
    b = benchmarks.get("llama3_1-8b-edge")
    assert (b.name, b.loadgen_model, b.dataset_size, b.performance_sample_count) == (EDGE, "llama3_1-8b-edge", 5000, 5000)
    g = b.gates("99")
    assert g["rouge1"]["min"] == pytest.approx(39.06 * 0.99) and g["rougeLsum"]["min"] == pytest.approx(36.124 * 0.99)
    assert (g["gen_len"]["min"], g["gen_len"]["max"]) == pytest.approx((3051113 * 0.9, 3051113 * 1.1))
    assert b.min_queries == {"SingleStream": 1024, "Offline": 1} and b.generation.max_output_tokens == 128
    assert b.scoring().score is benchmarks.get("llama3.1-8b").scoring().score
    assert b.submission_name("99") == EDGE and latency_constraints("SingleStream", EDGE) is None
    # an exact name is not a prefix plus a suffix: the edge is not llama3.1-8b, and needs no TEST06
    assert registry_name(EDGE) == EDGE and registry_name("llama3.1-8b-99") == "llama3.1-8b"
    assert not needs_test06(EDGE) and compliance_tests(EDGE) == ()
    assert needs_test06("llama3.1-8b") and needs_test06("llama2-70b-99.9") and not needs_test06("gpt-oss-120b")


@pytest.mark.parametrize("overrides,needle", [
    ("loadgen.scenario=SingleStream", "loadgen.scenario: llama2-70b has no SingleStream scenario in v6.1 "
                                      "(datacenter: Offline, Server, Interactive; edge: none)"),
    ("loadgen.scenario=SingleStream,loadgen.mlperf_model=llama3.1-8b", "or a benchmark that has it (llama3.1-8b-edge, qwen3.6-27b)"),
    ("loadgen.scenario=Server,loadgen.mlperf_model=llama3.1-8b-edge", "llama3.1-8b-edge has no Server scenario"),
    ("loadgen.scenario=Interactive,loadgen.mlperf_model=llama3.1-8b-edge", "use one of Offline, SingleStream"),
    ("loadgen.scenario=MultiStream,loadgen.mlperf_model=llama3.1-8b-edge", "loadgen.scenario"),
    ("loadgen.scenario=SingleStream,loadgen.mlperf_model=llama3.1-8b-edge,"
     "loadgen.single_stream_expected_latency_ms=0", "single_stream_expected_latency_ms"),
])
def test_bad_scenario_combinations_are_refused_naming_the_field(overrides, needle):
    """A scenario the benchmark has in no category (or a bad SingleStream setting) is refused by validation."""
    with pytest.raises(ParamsError) as e:
        resolve(DEFAULT, overrides)
    assert needle in str(e.value)


def test_singlestream_of_the_edge_benchmark_validates():
    p = resolve(DEFAULT, "loadgen.scenario=SingleStream,loadgen.mlperf_model=llama3_1-8b-edge")
    assert p.loadgen.scenario == "SingleStream" and p.loadgen.single_stream_expected_latency_ms is None
    resolve(REPO / STANDIN, "loadgen.scenario=Offline")


# ====================================================================== settings

def test_singlestream_test_settings_and_user_conf(tmp_path):
    """LoadGen gets SingleStream (not Server) with the expected latency and token latencies, and user.conf
    says it in LoadGen's keys (target_latency, in ms) with no TTFT/TPOT limit; the other scenarios keep theirs."""
    st = {"mlperf_model": EDGE, "single_stream_expected_latency_ms": 12.5, "min_duration_ms": 1000,
          "min_query_count": 48, "round": "v6.1"}
    s, perf = build_test_settings(lg, "SingleStream", "PerformanceOnly", st, 24, tmp_path)
    assert s.scenario == lg.TestScenario.SingleStream and s.single_stream_expected_latency_ns == 12_500_000
    assert s.use_token_latencies and perf == 24 and s.min_query_count == 48
    conf = (tmp_path / "user.conf").read_text()
    assert "llama3_1-8b-edge.SingleStream.target_latency = 12.5" in conf
    assert "ttft" not in conf and "target_qps" not in conf
    for scen, line in (("Offline", "llama2-70b.Offline.target_qps = 5"),
                       ("Server", "llama2-70b.Server.ttft_latency = 2000"),
                       ("Interactive", "llama2-70b-interactive.Server.tpot_latency = 40")):
        conf = user_conf_text("llama2-70b" + ("-interactive" if scen == "Interactive" else ""),
                              "Offline" if scen == "Offline" else "Server", scen, "llama2-70b",
                              {"offline_expected_qps": 5, "single_stream_expected_latency_ms": 7}, 8)
        assert line in conf and "target_latency = 7" not in conf


# ====================================================================== reports, readiness

def test_singlestream_invalid_reasons_name_the_fix():
    """An INVALID SingleStream run says when its last query went out and which setting fixes it, and how
    many queries early stopping needed."""
    d = {"result_validity": "INVALID", "result_min_duration_met": False, "effective_min_duration_ms": 600000,
         "result_query_count": 101, "result_qps_with_loadgen_overhead": 10.0, "early_stopping_met": False,
         "early_stopping_ttft_result": " * Only processed 20 queries.  * Need to process at least 64 queries for "
                                       "early stopping."}
    reasons = invalid_reasons(d, "SingleStream")
    assert reasons[0] == ("min duration not met: the last query was issued at 10.0 s < min_duration 600.0 s (lower "
                          "loadgen.single_stream_expected_latency_ms: LoadGen generates 2 x min_duration / expected "
                          "latency queries, and ran out)")
    assert "early stopping not met (TTFT)" in reasons[1] and "needs at least 64 queries" in reasons[1]
    assert "offline_expected_qps" not in " ".join(reasons) and "server_target_qps" not in " ".join(reasons)


def test_nightly_judges_singlestream_by_its_p90_and_shows_the_rest():
    """A p90 latency rise beyond the floor is a SingleStream regression; tokens/s there is shown, not judged.
    Three repeats a night: the fewest the noise model judges (harness/stats/noise.py)."""
    def rows(p90, tps):
        return [{"scenario": "SingleStream", "latency_p90_ms": p90 + d, "tokens_per_s": tps + d, "valid": True,
                 "accuracy_passed": True, "repeat": i} for i, d in enumerate((-1.0, 0.0, 1.0), start=1)]
    [point] = nightly.compare(rows(130.0, 50.0), rows(100.0, 100.0), [])
    checks = {c["metric"]: c for c in point["checks"]}
    assert checks["latency_p90_ms"]["judged"] and checks["latency_p90_ms"]["verdict"] == "regression"
    assert not checks["tokens_per_s"]["judged"] and any("latency p90" in r for r in point["reasons"])
    [point] = nightly.compare(rows(105.0, 100.0), rows(100.0, 100.0), [])
    assert point["reasons"] == []


def test_readiness_for_singlestream():
    """A short SingleStream run is flagged for its duration, but not for min_query_count: the checker judges
    SingleStream by early stopping (uses_early_stopping), not by the 1,024 of its constants."""
    base = f"loadgen.scenario=SingleStream,loadgen.mlperf_model={EDGE},dataset.num_samples=24"
    w = submission_warnings(resolve(REPO / STANDIN, base + ",loadgen.min_query_count=48"))
    assert any("min_duration_ms" in x for x in w) and not any("min_query_count" in x for x in w)
    w = submission_warnings(resolve(REPO / STANDIN, "loadgen.scenario=Offline,loadgen.min_duration_ms=600000"))
    assert any("5,000 samples" in x for x in w)  # the stand-in's 24 rows are not the dataset


# ====================================================================== submission: the category

def _submission(tmp_path: Path, system_type: str, scenarios: str, maps_to: str = EDGE) -> subprocess.CompletedProcess:
    system = tmp_path / "system.yaml"
    system.write_text((REPO / "params" / "systems" / "cpu-example.yaml").read_text()
                      .replace("system_type: datacenter ", f"system_type: {system_type} "))
    ov = f"submission.submitter=PerfDag,submission.benchmark=tiny-edge,submission.maps_to={maps_to}"
    return subprocess.run([sys.executable, "-m", "pipeline", "submission", "--params-file", STANDIN, "--overrides", ov,
                           "--scenarios", scenarios, "--system", str(system)], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PERFDAG_ARTIFACTS": str(tmp_path / "a")})


@pytest.mark.parametrize("system_type,scenarios,needle", [
    ("datacenter", "SingleStream,Offline", "--scenarios (SingleStream) with system_type 'datacenter'"),
    ("edge", "SingleStream,Server", "--scenarios (Server) with system_type 'edge'"),
])
def test_submission_holds_scenarios_to_the_systems_category(tmp_path, system_type, scenarios, needle):
    """An edge benchmark in a datacenter system, or a datacenter scenario in an edge one, is refused before
    any stage (exit 2, nothing built), naming --scenarios and the system YAML's system_type."""
    proc = _submission(tmp_path, system_type, scenarios)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert needle in proc.stdout and "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / "a").exists() or not any((tmp_path / "a").glob("*/*/manifest.json"))


# ====================================================================== end to end

def _result(root: Path, stage: str = "RunLoadgen") -> dict:
    return json.loads(max(root.glob(f"{stage}/*/result.json"), key=lambda f: f.stat().st_mtime).read_text())


def _check_single_stream(result: dict, run_dir: Path):
    """result.json's SingleStream numbers are LoadGen's own, and one query was in flight at a time."""
    d = read_mllog(run_dir / "mlperf_log_detail.txt")
    assert d["effective_scenario"] == "SingleStream" and result["valid"] == "VALID"
    ss = result["single_stream"]
    assert ss["p90_latency_ms"] == pytest.approx(d["result_90.00_percentile_latency_ns"] / 1e6, abs=1e-3)
    assert ss["early_stopping_latency_ms"] == pytest.approx(d["early_stopping_latency_ss"] / 1e6, abs=1e-3)
    assert ss["early_stopping_latency_ms"] > 0
    assert ss["target_percentile"] == 90.0 and result["ttft_constraint_ms"] is None
    assert result["samples_per_s"] == pytest.approx(d["result_qps_with_loadgen_overhead"])
    assert result["ttft_ms"]["p50"] > 0 and result["tpot_ms"]["p50"] > 0  # streamed: first tokens reported
    with open(run_dir / "requests.csv") as f:
        reqs = sorted(({k: float(v) for k, v in r.items() if v} for r in csv.DictReader(f)), key=lambda r: r["issue_ms"])
    assert len(reqs) == result["query_count"] >= 64
    for a, b in zip(reqs, reqs[1:]):  # the next query is issued only after the last completed
        assert b["issue_ms"] >= a["issue_ms"] + a["latency_ms"] - 0.01


def test_singlestream_fullrun_over_grpc_and_http(built_default, tmp_path):
    """The CPU default in SingleStream through tritonserver (gRPC) and through transformers serve (HTTP):
    VALID, scored, result.json and the report carrying LoadGen's p90 and early-stopping estimate."""
    with copied_root(built_default, tmp_path / "a") as root:
        proc = run_luigi("FullRun", "--overrides", SINGLE, artifacts=root)
        assert "result     VALID" in proc.stdout and "accuracy   PASS" in proc.stdout
        assert "early-stopping estimate" in proc.stdout
        run = max(root.glob("RunLoadgen/*/result.json"), key=lambda f: f.stat().st_mtime).parent
        result = _result(root)
        _check_single_stream(result, run)
        assert "llama3_1-8b-edge.SingleStream.target_latency = 25" in (run / "user.conf").read_text()
        report = json.loads(next(root.glob("FullRun/*/report.json")).read_text())
        assert report["performance"]["single_stream"] == result["single_stream"]

        try:
            proc = run_luigi("FullRun", "--params-file", "params/examples/openai-cpu.yaml", "--overrides", SINGLE,
                             artifacts=root)
        finally:  # transformers serve, whatever happened (FullRun stops it)
            subprocess.run(["pkill", "-9", "-f", f"serve .*{root}"])
        assert "result     VALID" in proc.stdout and "accuracy   PASS" in proc.stdout
        run = max(root.glob("RunLoadgen/*/result.json"), key=lambda f: f.stat().st_mtime).parent
        result = json.loads((run / "result.json").read_text())
        assert result["harness"]["protocol"] == "openai-http"
        _check_single_stream(result, run)
