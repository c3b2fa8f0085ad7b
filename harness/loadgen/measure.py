"""Glue between the serving records, the dataset and the LoadGen SUT (no luigi, no scoring)."""
from __future__ import annotations

from pathlib import Path

from harness.loadgen import run_loadgen
from harness.loadgen.settings import from_params
from harness.serving.layout import front_door, layout_summary
from harness.serving.protocols import protocol


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


#: Output length that `harness.request_timeout_s` is meant for; longer requests get proportionally more.
TIMEOUT_TOKENS = 1024


def request_timeout(base_s: float, max_new_tokens: int) -> float:
    """The timeout for requests of up to `max_new_tokens` tokens: `base_s` up to TIMEOUT_TOKENS,
    scaled linearly beyond (a reasoning model's 20,000-token answer may take minutes unstreamed)."""
    return float(base_s) * max(1.0, int(max_new_tokens) / TIMEOUT_TOKENS)


def _run(servers, samples, params, out_dir: Path, *, mode: str, settings: dict, warmup: int, end_id, pad_id,
         tokenizer_dir=None, **extra) -> dict:
    layout = layout_summary(servers)
    if layout is not None:  # result.json names the layout: each role's instances and nodes
        extra["notes"] = {"layout": layout}
    servers = front_door(servers)  # a layout's router, or every data-parallel server
    eps, names = endpoints_and_models(servers)
    h = params.harness
    name = protocol_of(servers)
    if protocol(name).core_setup:  # what the core is told beyond endpoints (OpenAI: prompts, tokens)
        extra["api"], extra["prompt_texts"] = protocol(name).load("core_setup")(params, samples, tokenizer_dir)
    return run_loadgen(eps, names, samples, settings, out_dir, scenario=params.loadgen.scenario, mode=mode,
                       frontends=h.frontends, clients_per_frontend=h.clients_per_frontend, warmup_queries=warmup,
                       end_id=end_id, pad_id=pad_id, max_new_tokens=params.dataset.max_new_tokens,
                       request_timeout_s=request_timeout(h.request_timeout_s, params.dataset.max_new_tokens),
                       protocol=name,
                       max_in_flight=max(in_flight_per_server(params) * len(eps), h.frontends * h.clients_per_frontend),
                       **extra)


def in_flight_per_server(params) -> int:
    """harness.max_in_flight, or what one server batches at once (build.max_batch_size)."""
    return params.harness.max_in_flight or params.build.max_batch_size


def run_performance(servers: list[dict], samples, params, out_dir: Path, *, end_id: int, pad_id: int | None,
                    **extra) -> dict:
    """The timed run in loadgen.scenario."""
    return _run(servers, samples, params, out_dir, mode="PerformanceOnly",
                settings=from_params(params.loadgen, len(samples)), warmup=params.harness.warmup_queries,
                end_id=end_id, pad_id=pad_id, **extra)


def run_accuracy(servers: list[dict], samples, params, out_dir: Path, *, end_id: int, pad_id: int | None,
                 **extra) -> dict:
    """An AccuracyOnly run in loadgen.scenario (streaming for Server and Interactive): every sample
    once, its tokens in mlperf_log_accuracy.json."""
    settings = {**from_params(params.loadgen, len(samples)), "performance_sample_count": len(samples)}
    return _run(servers, samples, params, out_dir, mode="AccuracyOnly", settings=settings, warmup=0,
                end_id=end_id, pad_id=pad_id, **extra)
