"""MLPerf's endpoints results layout: a scenario's run as MLCommons' endpoints client publishes it.

The v6.1 checker reads a result without LoadGen logs from three files (its parsers/endpoints_parser.py;
the models it allows this for are its ENDPOINTS_ALLOWED_MODELS, the only route for qwen3.6-27b):

    results/<system>/<benchmark>/<Scenario>/
        config.yaml                        the run's configuration: type (offline / online), model_params,
                                           settings.runtime (durations, seeds, samples), settings.load_pattern
        performance/result_summary.json    the rollups: samples issued / completed / failed, duration_ns, qps,
                                           tps, latency / ttft / tpot (min, max, avg, percentiles and
                                           early_stopping_percentiles, ns), output_sequence_lengths
        accuracy/accuracy_results.json     accuracy_scores: per dataset its score, total_samples, breakdown
        measurements.json  README.md

The files have the shapes endpoints writes (mlcommons/endpoints ea33275: metrics/report.py Report,
commands/benchmark/accuracy.py, config/schema.py), filled from perfdag's own measurement: a LoadGen
run's client-side numbers (result.json `measured`: perfdag's client, as endpoints' numbers are its
client's) or a session replay's turns. Where endpoints' `scripts/publish_submission.py` puts them
differs from where the checker reads them (it copies result_summary.json and config.yaml into
performance/run_1/ and config.yaml into accuracy/; the checker reads <Scenario>/config.yaml,
<Scenario>/performance/result_summary.json and <Scenario>/accuracy/accuracy_results.json): perfdag
writes the checker's layout, the one that is judged. No luigi.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from harness.mlperf import benchmarks
from harness.mlperf.submission import write_top
from harness.untrusted import yamlio

#: perfdag's distribution keys (harness/loadgen/chunks.py: p50, p99_9...) -> endpoints' percentile keys.
PERCENTILES = {"p50": "50.0", "p90": "90.0", "p95": "95.0", "p99": "99.0", "p99_9": "99.9"}
MS = 1_000_000  # ns a millisecond
#: The checker's scenario directory -> endpoints' run type (online: Server, Interactive, SingleStream).
RUN_TYPE = {"Offline": "offline", "Server": "online", "Interactive": "online", "SingleStream": "online"}


@dataclass
class EndpointsRun:
    """One scenario's run in the endpoints layout, as perfdag measured it."""
    scenario: str
    measured: Mapping[str, Any]     # requests, tokens, duration_s, samples_per_s, tokens_per_s, failed, and
    #                                 latency_ms / ttft_ms / tpot_ms / output_tokens distributions, early_stopping
    config: Mapping[str, Any]       # what config.yaml says of the run (config_yaml's keyword arguments)
    scores: Mapping[str, Any]       # the scorer's metrics of the accuracy run
    accuracy_samples: int           # rows the accuracy run scored
    readme: str = ""


def _metric(dist: Mapping[str, Any] | None, early: Mapping[str, Any] | None, scale: float) -> dict:
    """endpoints' rollup of one series (Report._series_to_metric_dict) from perfdag's distribution."""
    if not dist:
        return {}
    n = int(dist.get("n") or 0)
    conv = (lambda v: None if v is None else (round(v * scale) if scale != 1 else v))
    out = {"total": conv(dist["mean"] * n) if n else 0, "min": conv(dist["min"]), "max": conv(dist["max"]),
           "median": conv(dist.get("p50")), "avg": conv(dist["mean"]), "count": n,
           "percentiles": {v: conv(dist[k]) for k, v in PERCENTILES.items() if k in dist}}
    if early is not None:  # the early-stopping estimate at each percentile (None: too few samples for it)
        out["early_stopping_percentiles"] = {v: conv(early.get(k)) for k, v in PERCENTILES.items() if k in early}
    return out


def result_summary(measured: Mapping[str, Any], *, version: str, git_sha: str | None) -> dict:
    """performance/result_summary.json (endpoints' Report, less its accuracy) from perfdag's measurement."""
    es = measured.get("early_stopping") or {}
    n = int(measured.get("requests") or 0)
    duration_s = measured.get("duration_s")
    if duration_s is None and n and measured.get("samples_per_s"):  # a LoadGen run's: its span, from its rate
        duration_s = n / measured["samples_per_s"]
    return {
        "version": version, "git_sha": git_sha, "test_started_at": 0,
        "n_samples_issued": n + int(measured.get("failed") or 0), "n_samples_completed": n,
        "n_samples_failed": int(measured.get("failed") or 0),
        "duration_ns": None if duration_s is None else round(duration_s * 1e9),
        "state": "complete", "complete": True,
        "ttft": _metric(measured.get("ttft_ms"), es.get("ttft_ms", {}), MS),
        "tpot": _metric(measured.get("tpot_ms"), es.get("tpot_ms", {}), MS),
        "latency": _metric(measured.get("latency_ms"), es.get("latency_ms", {}), MS),
        "output_sequence_lengths": _metric(measured.get("output_tokens"), None, 1),
        "input_sequence_lengths": _metric(measured.get("input_tokens"), None, 1),
        "legacy_loadgen_window_duration_ns": None,
        "qps": measured.get("samples_per_s"), "tps": measured.get("tokens_per_s"),
        "finish_reason_counts": dict(measured.get("finish_reasons") or {}),
        "run_config": None,
    }


def config_yaml(*, benchmark: str, scenario: str, round_: str, model: str, streaming: bool, max_new_tokens: int,
                min_duration_ms: int, max_duration_ms: int, samples: int, load_pattern: dict, endpoints: list[str],
                datasets: list[dict], generated_by: str) -> dict:
    """config.yaml: the run's configuration in endpoints' schema, with the seeds of the round."""
    sample_seed, schedule_seed = benchmarks.ROUND_SEEDS[round_][1:]
    return {
        "name": f"perfdag-{benchmark}-{scenario}".lower(), "version": generated_by, "type": RUN_TYPE[scenario],
        "submission_ref": {"model": benchmark, "ruleset": f"mlperf-inference-{round_}"},
        "model_params": {"name": model, "temperature": 0, "max_new_tokens": max_new_tokens,
                         "streaming": "on" if streaming else "off"},
        "datasets": datasets,
        "settings": {"runtime": {"min_duration_ms": min_duration_ms, "max_duration_ms": max_duration_ms,
                                 "n_samples_to_issue": samples, "scheduler_random_seed": schedule_seed,
                                 "dataloader_random_seed": sample_seed},
                     "load_pattern": load_pattern},
        "endpoint_config": {"endpoints": list(endpoints), "api_type": "openai"},
    }


def accuracy_results(benchmark: str, scores: Mapping[str, Any], samples: int, dataset_name: str) -> dict:
    """accuracy/accuracy_results.json: one accuracy entry (endpoints' shape) with the scorer's score in its
    reference form (scoring.endpoints_score: a fraction for qwen3-vl's F1 and BFCL's overall accuracy)."""
    from harness.mlperf import scoring  # numpy: only when a tree is written

    score, breakdown = scoring.endpoints_score(benchmarks.get(benchmark), scores)
    entry = {"dataset_name": dataset_name, "score": score, "unit_samples": samples, "num_repeats": 1,
             "total_samples": samples, "complete": True, "dataset_type": "accuracy"}
    if breakdown is not None:
        entry["breakdown"] = {**breakdown, "total_samples": samples, "issued_samples": samples}
    return {**({"average_accuracy": score} if isinstance(score, (int, float)) else {}), "accuracy_scores": [entry]}


def assemble(root: Path, *, division: str, submitter: str, system: str, benchmark: str, maps_to: str | None,
             system_desc: dict, measurements: dict, runs: list[EndpointsRun], src_readme: str, params_yaml: str,
             version: str, git_sha: str | None) -> list[str]:
    """Writes the endpoints tree under `root` (which must not exist yet); returns its files, relative."""
    top = write_top(root, division, submitter, system, benchmark, maps_to, system_desc, src_readme, params_yaml)
    name = maps_to or benchmark
    for r in runs:
        d = top / "results" / system / benchmark / r.scenario
        (d / "performance").mkdir(parents=True)
        (d / "accuracy").mkdir()
        (d / "config.yaml").write_text(yamlio.dumps(dict(config_yaml(**r.config)), sort_keys=False))
        (d / "performance" / "result_summary.json").write_text(
            json.dumps(result_summary(r.measured, version=version, git_sha=git_sha), indent=2) + "\n")
        dataset = r.config["datasets"][-1]["name"]
        (d / "accuracy" / "accuracy_results.json").write_text(
            json.dumps(accuracy_results(name, r.scores, r.accuracy_samples, dataset), indent=2) + "\n")
        (d / "measurements.json").write_text(json.dumps(measurements, indent=2) + "\n")
        (d / "README.md").write_text(r.readme or f"# {benchmark} {r.scenario}\n")
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
