"""`python -m pipeline compare`: two FullRuns side by side, named by report, key or run id."""
from __future__ import annotations

import json

import pytest

from harness.cache import integrity
from harness.cache.store import ArtifactStore
from harness.errors import InputError
from pipeline.cli import main


def fullrun(root, key16, tokens, tpot99, batch, run_id=None):
    d = root / "FullRun" / key16
    d.mkdir(parents=True)
    report = {"model": "tiny-llama", "stages": {"FullRun": key16 * 4},
              "performance": {"scenario": "Server", "valid": True, "tokens_per_second": tokens,
                              "samples_per_second": tokens / 32, "ttft_ms": {"p50": 9.3, "p90": 20.0, "p99": 51.0},
                              "tpot_ms": {"p50": 1.1, "p90": 3.3, "p99": tpot99}, "latency_ms": {"p99": 90.0}},
              "accuracy": {"passed": True, "rouge1": 100.0, "tokens_per_sample": 32.0}}
    (d / "report.json").write_text(json.dumps(report))
    params = {"build": {"max_batch_size": batch, "dtype": "float32"}, "loadgen": {"scenario": "Server"}}
    files, links = integrity.describe(d)  # published as the store publishes: compare checks it
    (d / "manifest.json").write_text(json.dumps({"key": key16 * 4, "resolved_params": params, "files": files,
                                                 "links": links, "observation": run_id or "20261124T000000000000Z-9"}))
    if run_id:
        r = root / "runs" / run_id
        r.mkdir(parents=True)
        (r / "run.json").write_text(json.dumps({"stages": {f"FullRun/{key16}": {"stage": "FullRun", "key": key16 * 4,
                                                                                   "status": "built", "observation": run_id}}}))
    return d


def test_compare_prints_metrics_side_by_side_and_only_the_differing_parameters(artifacts, capsys):
    fullrun(artifacts, "a" * 16, 617.4, 10.05, 32, run_id="20261124T010000000000Z-1")
    b = fullrun(artifacts, "b" * 16, 617.0, 2.7, 8)
    assert main(["compare", "20261124T010000000000Z-1", str(b / "report.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    tpot = next(x for x in out if x.startswith("TPOT p99 ms"))
    assert tpot.split() == ["TPOT", "p99", "ms", "10.1", "2.70", "-73.1%", "better"]
    assert next(x for x in out if x.startswith("tokens/s")).split()[1:] == [  # Server: follows the target
        "617.4", "617", "-0.1%", "(follows", "the", "target", "QPS)"]
    params = out[out.index(next(x for x in out if x.startswith("parameter"))) + 1:]
    assert [p.split() for p in params] == [["build.max_batch_size", "32", "8"]]  # dtype, scenario: the same


def test_compare_by_key_prefix_json_and_a_clear_error(artifacts, capsys):
    fullrun(artifacts, "a" * 16, 600.0, 10.0, 32)
    fullrun(artifacts, "b" * 16, 660.0, 10.0, 32)
    assert main(["compare", "aaaa", "bbbb", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["params"] == [] and next(m for m in doc["metrics"] if m["metric"] == "tokens/s")["delta"] == pytest.approx(0.1)
    assert main(["compare", "aaaa", "nothing-like-it"]) == 2
    assert "not a report.json, a FullRun directory" in capsys.readouterr().err
    with pytest.raises(InputError):
        from pipeline.cli.compare import resolve
        resolve("", ArtifactStore(artifacts))


def test_compare_judges_no_number_that_follows_the_target(artifacts, capsys):
    """Server tokens/s and samples/s follow server_target_qps: compare shows their change unjudged, while
    it still judges latency; Offline throughput stays judged."""
    fullrun(artifacts, "a" * 16, 200.0, 10.0, 32)
    fullrun(artifacts, "b" * 16, 626.4, 9.0, 32)
    assert main(["compare", "aaaa", "bbbb"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert next(x for x in out if x.startswith("tokens/s")).split()[1:] == [
        "200", "626.4", "+213.2%", "(follows", "the", "target", "QPS)"]
    assert "better" not in next(x for x in out if x.startswith("samples/s"))
    assert next(x for x in out if x.startswith("TPOT p99 ms")).endswith("better")
    for d in ("a", "b"):
        report = artifacts / "FullRun" / (d * 16) / "report.json"
        doc = json.loads(report.read_text())
        doc["performance"]["scenario"] = "Offline"
        report.write_text(json.dumps(doc))
        fullrun_dir = report.parent
        m = json.loads((fullrun_dir / "manifest.json").read_text())
        m["files"], m["links"] = integrity.describe(fullrun_dir)
        (fullrun_dir / "manifest.json").write_text(json.dumps(m))
    assert main(["compare", "aaaa", "bbbb"]) == 0
    assert next(x for x in capsys.readouterr().out.splitlines() if x.startswith("tokens/s")).endswith("+213.2% better")
