"""Per-role timings of a serving layout, where its stack exposes them: each worker instance's own
metrics read before and after the measurement, and each timing's mean over the requests in
between, per role (the prefill queue of the context workers, the KV transfer of the generation ones).

Read from the stacks' own sources: vLLM's Prometheus `/metrics` (vllm/v1/metrics/loggers.py for the
request phases, its NIXL connector's stats for vllm:nixl_xfer_time_seconds, per transfer), SGLang's
(srt/metrics/collector.py, with --enable-metrics; its KV-transfer figures are gauges: the last value
is kept), and trtllm-serve's `/perf_metrics` (tensorrt_llm/serve/openai_server.py: one entry per
request, its timing_metrics; served only with return_perf_metrics and perf_metrics_max_requests in
its options, and emptied by each read). trtllm-serve's own `/metrics` is iteration stats: not read.
"""
from __future__ import annotations

import json
from pathlib import Path

from harness.serving.bounded import read_body
import harness.serving.server_metrics as server_metrics
from harness.serving.processes import ServerError
from harness.serving.spec import url_of
from harness.untrusted import jsonio

# stack -> the figures read per role: vLLM's and SGLang's from server_metrics.STACKS (their names, kinds
# and units there); trtllm-serve's summed here from /perf_metrics' entries (each read empties it)
ROLE_FIGURES = {"vllm": ("queue", "prefill", "decode", "kv_transfer"),
                "sglang": ("queue", "first_token", "kv_transfer"),
                "trtllm-serve": ("queue", "first_token", "kv_transfer")}
# trtllm-serve's timing_metrics: what -> (from, to), seconds on one clock
PERF_SPANS = {"queue": ("arrival_time", "first_scheduled_time"), "first_token": ("arrival_time", "first_token_time"),
              "kv_transfer": ("kv_cache_transfer_start", "kv_cache_transfer_end")}


def stack_of(params) -> str | None:
    """The stack whose metrics are read: a layout's openai server that exposes them; else None."""
    if params.layout is None or params.build.backend != "openai" or params.openai.server not in ROLE_FIGURES:
        return None
    if params.openai.server == "trtllm-serve" and not params.openai.llm_api_options.get("return_perf_metrics"):
        return None  # its per-request timings are served only when asked for
    return params.openai.server


def scrape(servers: list[dict], stack: str | None, timeout_s: float = 5.0) -> dict[str, dict[str, float]] | None:
    """Each worker instance's metrics by address (None: no stack to read; {} for an instance that did not answer)."""
    if stack is None:
        return None
    import httpx  # heavy (~0.1 s): only a run that scrapes servers pays for it, never the cached no-op

    out = {}
    for rec in servers:
        if rec.get("role") in (None, "router"):
            continue
        url = url_of(rec)
        try:
            with httpx.stream("GET", f"http://{url}/{'perf_metrics' if stack == 'trtllm-serve' else 'metrics'}",
                              timeout=timeout_s) as r:
                data = read_body(r, f"metrics of {url}") if r.status_code == 200 else None
            out[url] = {} if data is None else perf_sums(jsonio.loads(data)) if stack == "trtllm-serve" else \
                server_metrics.parse(data.decode("utf-8", "replace"))
        except (httpx.HTTPError, ValueError, ServerError):
            out[url] = {}
    return out


def _figure(stack: str, what: str) -> tuple[str, str, float]:
    """(its name, histogram, gauge or requests, scale to milliseconds)."""
    if stack == "trtllm-serve":
        return what, "requests", 1e3
    m = server_metrics.metric(stack, what)
    return m.names[0], m.kind, m.scale


def perf_sums(entries: list) -> dict[str, float]:
    """trtllm-serve's /perf_metrics entries as sums and counts of each span (`queue_sum`, `queue_count`)."""
    out: dict[str, float] = {}
    for entry in entries if isinstance(entries, list) else []:
        t = ((entry or {}).get("perf_metrics") or {}).get("timing_metrics") or {}
        for what, (start, end) in PERF_SPANS.items():
            if isinstance(t.get(start), (int, float)) and isinstance(t.get(end), (int, float)):
                out[f"{what}_sum"] = out.get(f"{what}_sum", 0.0) + t[end] - t[start]
                out[f"{what}_count"] = out.get(f"{what}_count", 0.0) + 1
    return out


def per_role(servers: list[dict], stack: str, before: dict, after: dict) -> dict[str, dict[str, dict]]:
    """role -> what -> {"mean_ms", "count"} over the measured requests (a gauge: its last value, "last_ms")."""
    sums: dict[str, dict[str, list[float]]] = {}
    for rec in servers:
        url = url_of(rec)
        if url not in after:
            continue
        for what in ROLE_FIGURES[stack]:
            name, kind, scale = _figure(stack, what)
            b, a = before.get(url, {}), after[url]
            acc = sums.setdefault(rec["role"], {}).setdefault(what, [0.0, 0.0, 0.0])
            if kind == "requests":
                b = {}  # read once: what came before was emptied by the first read
            if kind in ("histogram", "requests") and f"{name}_count" in a:
                acc[0] += (a[f"{name}_sum"] - b.get(f"{name}_sum", 0.0)) * scale
                acc[1] += a[f"{name}_count"] - b.get(f"{name}_count", 0.0)
            elif kind == "gauge" and name in a:
                acc[2] = max(acc[2], a[name] * scale)
                acc[1] = max(acc[1], 1.0)
    out: dict[str, dict[str, dict]] = {}
    for role, whats in sums.items():
        for what, (total, count, last) in whats.items():
            if count <= 0:
                continue
            kind = _figure(stack, what)[1]
            out.setdefault(role, {})[what] = ({"last_ms": round(last, 3)} if kind == "gauge" else
                                              {"mean_ms": round(total / count, 3), "count": int(count)})
    return out


def record(out_dir: Path, result: dict, timings: dict) -> None:
    """Adds the per-role timings to the result's layout (result.json and the dict returned)."""
    if not timings or not result.get("layout"):
        return
    result["layout"]["timings"] = timings
    path = Path(out_dir) / "result.json"
    doc = json.loads(path.read_text())
    doc.setdefault("layout", {})["timings"] = timings
    path.write_text(json.dumps(doc, indent=2, default=str))
