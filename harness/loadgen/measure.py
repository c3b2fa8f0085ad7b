"""Glue between the serving records, the dataset and the LoadGen SUT (no luigi, no scoring)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from harness.errors import MeasurementError

from harness.loadgen import run_loadgen
from harness.loadgen.chunks import CHUNKS_FILE
from harness.loadgen.client_nodes import on_node, placement
from harness.loadgen.runner import LOADGEN_FILES
from harness.loadgen.settings import from_params
from harness.loadgen.timings import REQUESTS_JSONL
from harness.serving.endpoints import endpoints_and_models, protocol_of
from harness.serving.gpu_telemetry import GpuTelemetry
from harness.serving.layout import front_door, layout_summary
from harness.serving.protocols import protocol
from harness.serving.server_metrics import targets as metrics_targets


#: Output length that `harness.request_timeout_s` is meant for; longer requests get proportionally more.
TIMEOUT_TOKENS = 1024


def request_timeout(base_s: float, max_new_tokens: int) -> float:
    """The timeout for requests of up to `max_new_tokens` tokens: `base_s` up to TIMEOUT_TOKENS,
    scaled linearly beyond (a reasoning model's 20,000-token answer may take minutes unstreamed)."""
    return float(base_s) * max(1.0, int(max_new_tokens) / TIMEOUT_TOKENS)


def _run(servers, samples, params, out_dir: Path, *, mode: str, settings: dict, warmup: int, end_id, pad_id,
         tokenizer_dir=None, **extra) -> dict:
    if extra.pop("scrape_metrics", False):  # the timed run: each server's own metrics around it (not the router)
        extra["server_metrics"] = metrics_targets(servers)
    layout = layout_summary(servers)
    if layout is not None:  # result.json names the layout: each role's instances and nodes
        extra["notes"] = {"layout": layout}
    servers = front_door(servers)  # a layout's router, or every data-parallel server
    eps, names = endpoints_and_models(servers)
    h = params.harness
    name = protocol_of(servers)
    if protocol(name).core_setup:  # what the core is told beyond endpoints (OpenAI: prompts, tokens)
        extra["api"], extra["prompt_texts"] = protocol(name).load("core_setup")(params, samples, tokenizer_dir)
    in_flight = in_flight_per_server(params) * len(eps)
    # Fewer clients than requests allowed in flight: a client holds at least one (max_in_flight 1 is
    # one client, one request at a time), never the limit raised to the client count.
    frontends = min(h.frontends, in_flight)
    per_frontend = max(1, min(h.clients_per_frontend, in_flight // frontends))
    # frontends on other nodes (harness.client_nodes); they read the tokenizer, if any
    extra.update(placement(params, frontends, (str(tokenizer_dir),) if tokenizer_dir else ()))
    return run_loadgen(eps, names, samples, settings, out_dir, scenario=params.loadgen.scenario, mode=mode,
                       frontends=frontends, clients_per_frontend=per_frontend, warmup_queries=warmup,
                       end_id=end_id, pad_id=pad_id, max_new_tokens=params.dataset.max_new_tokens,
                       request_timeout_s=request_timeout(h.request_timeout_s, params.dataset.max_new_tokens),
                       protocol=name, streaming=h.stream,
                       max_in_flight=in_flight,
                       limits={"max_response_bytes": h.max_response_bytes, "max_event_bytes": h.max_event_bytes},
                       **extra)


def in_flight_per_server(params) -> int:
    """harness.max_in_flight, or what one server batches at once (build.max_batch_size)."""
    return params.harness.max_in_flight or params.build.max_batch_size


#: loadgen.offline_expected_qps: auto sets the rate at this many times the sizing runs' samples/s: the
#: timed run lasts about this many times its min_duration, and at least its min_duration wherever the
#: host runs up to this much faster then (short sizing runs underestimate: their ramp and drain count).
#: One that still ends short is run once more at RETRY_MARGIN x its own rate, its logs kept under sizing/short/.
AUTO_MARGIN = 1.5
RETRY_MARGIN = 1.5
#: The first sizing run's rate; each next one (at most SIZING_RUNS) at SIZING_GROWTH x what the last one
#: measured, until a run is slower than asked (it lasted its duration: the rate is a sustained one, not
#: a burst). Each asks for an eighth of min_duration: the last lasts about SIZING_GROWTH / 8 of it.
SIZING_START_QPS = 64.0
SIZING_GROWTH = 2.0
SIZING_SHARE = 8
SIZING_RUNS = 4


def run_performance(servers: list[dict], samples, params, out_dir: Path, *, end_id: int, pad_id: int | None,
                    **extra) -> dict:
    """The timed run in loadgen.scenario. Offline with offline_expected_qps: auto first measures the rate
    with short sizing runs (an eighth of min_duration each, in `sizing/<i>/`) and records them in
    result.json's `offline_expected_qps_auto` (a timed run that ended short is run once more); SingleStream with single_stream_expected_latency_ms: auto
    measures the latency with one probe (`sizing/0/`), recorded in `single_stream_expected_latency_ms_auto`."""
    settings = from_params(params.loadgen, len(samples))
    sized, key = None, None
    lg = params.loadgen
    if lg.offline_expected_qps == "auto" and lg.scenario == "Offline":
        sized = size_offline(servers, samples, params, Path(out_dir), settings, end_id=end_id, pad_id=pad_id, **extra)
        key = "offline_expected_qps"
    elif lg.single_stream_expected_latency_ms == "auto" and lg.scenario == "SingleStream":
        sized = size_single_stream(servers, samples, params, Path(out_dir), settings, end_id=end_id, pad_id=pad_id,
                                   **extra)
        key = "single_stream_expected_latency_ms"
    if sized:
        settings[key] = sized[key]
    # each role's GPUs over the timed run, a sampler on each node with some (None: no GPUs)
    telemetry = GpuTelemetry.for_servers(servers, on_node=on_node(params, "gpu-telemetry"))
    if telemetry is not None:
        telemetry.start()
    try:
        result = _run(servers, samples, params, out_dir, mode="PerformanceOnly", settings=settings,
                      warmup=params.harness.warmup_queries, end_id=end_id, pad_id=pad_id, scrape_metrics=True,
                      **extra)
        if key == "offline_expected_qps" and result.get("min_duration_met") is False and result.get("samples_per_s"):
            settings[key] = _short_run_kept(sized, result, Path(out_dir))
            result = _run(servers, samples, params, out_dir, mode="PerformanceOnly", settings=settings,
                          warmup=0, end_id=end_id, pad_id=pad_id, scrape_metrics=True, **extra)
    finally:
        gpus = telemetry.stop() if telemetry is not None else None
    added = {**({f"{key}_auto": sized} if sized else {}), **({"gpu_telemetry": gpus} if gpus else {})}
    if added:
        result.update(added)
        path = Path(out_dir) / "result.json"
        doc = json.loads(path.read_text())
        doc.update(added)
        path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return result


#: single_stream_expected_latency_ms: auto asks for the probe's median latency: LoadGen then generates (and
#: with equal issue, issues) 2 x min_duration of queries, so the timed run lasts its min_duration wherever
#: the host answers up to 2x faster than during the probe, and about twice it where as fast.
PROBE_QUERIES = 16


def size_single_stream(servers, samples, params, out_dir: Path, settings: dict, **kw) -> dict:
    """The SingleStream latency the timed run expects: the median of a short probe's queries."""
    probe = _run(servers, samples, params, out_dir / "sizing" / "0", mode="PerformanceOnly",
                 settings={**settings, "single_stream_expected_latency_ms": 1e6, "min_duration_ms": 0,
                           "min_query_count": PROBE_QUERIES, "max_duration_ms": None},
                 warmup=params.harness.warmup_queries, **kw)
    median = ((probe.get("measured") or {}).get("latency_ms") or {}).get("p50")
    if not median:
        raise MeasurementError("loadgen.single_stream_expected_latency_ms: auto: the probe measured no latency "
                               f"(see {out_dir / 'sizing' / '0'}); set it to a number of milliseconds")
    return {"single_stream_expected_latency_ms": round(median, 3), "probe_queries": probe.get("query_count"),
            "dir": "sizing/0"}


def _short_run_kept(sized: dict, result: dict, out_dir: Path) -> float:
    """A timed run that ended before its min_duration: its LoadGen logs moved to sizing/short/ and
    recorded with the sizing runs; the rate the next one asks for (RETRY_MARGIN x its samples/s)."""
    short = out_dir / "sizing" / "short"
    short.mkdir(parents=True, exist_ok=True)
    for name in (*LOADGEN_FILES, "result.json", "requests.csv", REQUESTS_JSONL, CHUNKS_FILE, "user.conf"):
        if (out_dir / name).is_file():
            os.replace(out_dir / name, short / name)
    rate = result["samples_per_s"]
    sized["sizing_runs"].append({"asked_qps": sized["offline_expected_qps"], "samples_per_s": rate,
                                 "dir": "sizing/short", "timed_run_short": True})
    sized.update(offline_expected_qps=round(rate * RETRY_MARGIN, 3), margin=RETRY_MARGIN)
    return sized["offline_expected_qps"]


def size_offline(servers, samples, params, out_dir: Path, settings: dict, **kw) -> dict:
    """The Offline rate the timed run asks for: AUTO_MARGIN x the samples/s of the last sizing run."""
    duration_ms = max(250, params.loadgen.min_duration_ms // SIZING_SHARE)
    guess, runs = SIZING_START_QPS, []
    for i in range(SIZING_RUNS):
        probe = _run(servers, samples, params, out_dir / "sizing" / str(i), mode="PerformanceOnly",
                     settings={**settings, "offline_expected_qps": guess, "min_duration_ms": duration_ms,
                               "min_query_count": 1, "max_duration_ms": None},
                     warmup=params.harness.warmup_queries if i == 0 else 0, **kw)
        rate = probe.get("samples_per_s") or 0.0
        runs.append({"asked_qps": guess, "samples_per_s": rate, "dir": f"sizing/{i}"})
        if rate <= 0:
            raise MeasurementError("loadgen.offline_expected_qps: auto: a sizing run measured no samples/s "
                                   f"(see {out_dir / 'sizing' / str(i)}); set loadgen.offline_expected_qps to a number")
        if rate < guess:
            break
        guess = rate * SIZING_GROWTH
    return {"offline_expected_qps": round(rate * AUTO_MARGIN, 3), "margin": AUTO_MARGIN, "sizing_runs": runs}


def run_accuracy(servers: list[dict], samples, params, out_dir: Path, *, end_id: int, pad_id: int | None,
                 **extra) -> dict:
    """An AccuracyOnly run in loadgen.scenario (streaming for Server and Interactive): every sample
    once, its tokens in mlperf_log_accuracy.json."""
    settings = {**from_params(params.loadgen, len(samples)), "performance_sample_count": len(samples)}
    return _run(servers, samples, params, out_dir, mode="AccuracyOnly", settings=settings, warmup=0,
                end_id=end_id, pad_id=pad_id, **extra)
