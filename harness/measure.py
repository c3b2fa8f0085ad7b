"""Glue between the serving records, the dataset and the LoadGen SUT (no luigi)."""
from __future__ import annotations

import json
from pathlib import Path

from .accuracy import check, parse_accuracy_log, score_outputs
from .loadgen import run_loadgen
from .loadgen.settings import from_params


def endpoints_and_models(servers: list[dict]) -> tuple[list[str], list[str]]:
    """One (endpoint, model) pair per engine instance, so the SUT spreads over all of them."""
    eps, names = [], []
    for s in servers:
        for m in s["models"]:
            eps.append(f"{s['host']}:{s.get('port', s.get('grpc_port'))}")
            names.append(m)
    return eps, names


def protocol_of(servers: list[dict]) -> str:
    protocols = {s.get("protocol", "triton-grpc") for s in servers}
    if len(protocols) != 1:
        raise ValueError(f"servers speak different protocols: {sorted(protocols)}")
    return protocols.pop()


def run_performance(servers: list[dict], samples, params, out_dir: Path, *, end_id: int, pad_id: int | None) -> dict:
    eps, names = endpoints_and_models(servers)
    h = params.harness
    return run_loadgen(eps, names, samples, from_params(params.loadgen, len(samples)), out_dir,
                       scenario=params.loadgen.scenario, mode="PerformanceOnly", frontends=h.frontends,
                       clients_per_frontend=h.clients_per_frontend, warmup_queries=h.warmup_queries,
                       end_id=end_id, pad_id=pad_id, max_new_tokens=params.dataset.max_new_tokens,
                       request_timeout_s=h.request_timeout_s, protocol=protocol_of(servers))


def run_accuracy(servers: list[dict], samples, params, out_dir: Path, *, end_id: int, pad_id: int | None,
                 tokenizer_dir: str, reference_scores: dict) -> dict:
    """An AccuracyOnly LoadGen run (Offline: every sample once), scored and checked."""
    eps, names = endpoints_and_models(servers)
    h, a = params.harness, params.accuracy
    if a.num_samples:
        samples = samples[:a.num_samples]
    settings = {**from_params(params.loadgen, len(samples)), "performance_sample_count": len(samples)}
    run_loadgen(eps, names, samples, settings, out_dir, scenario="Offline", mode="AccuracyOnly",
                frontends=h.frontends, clients_per_frontend=h.clients_per_frontend, warmup_queries=0,
                end_id=end_id, pad_id=pad_id, max_new_tokens=params.dataset.max_new_tokens,
                request_timeout_s=h.request_timeout_s, protocol=protocol_of(servers))
    outputs = parse_accuracy_log(out_dir / "mlperf_log_accuracy.json")
    scores = score_outputs(outputs, samples, tokenizer_dir)
    verdict = check(scores, reference_scores, target=a.target, tolerance=a.tokens_per_sample_tolerance)
    doc = {"scores": scores, "reference_scores": reference_scores, "target": a.target,
           "tokens_per_sample_tolerance": a.tokens_per_sample_tolerance, "samples": len(samples),
           "passed": bool(verdict["passed"]), "check": verdict}
    (out_dir / "accuracy.json").write_text(json.dumps(doc, indent=2))
    return doc
