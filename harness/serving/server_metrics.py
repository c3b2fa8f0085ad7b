"""The serving stack's own metrics over LoadGen's timed window: result.json's `server_metrics`, and the
one table of each stack's metric names (serving/role_timings.py reads its per-role timings from it).

The LoadGen driver scrapes every server's Prometheus endpoint right before LoadGen's test starts
(after the warm-up) and right after it ended and its clients stopped (`scrape`); `summary` turns the
two into what explains a result: counters as differences, histograms as the mean of what they
observed in between (differences of their `_sum` and `_count`), ratios of two counters' differences
(Triton's batch size, vLLM's prefix-cache hit rate) and gauges as before and after. A counter that
went back (the server restarted between the scrapes) is said so, never a negative difference. Every
figure is the server's own.

The names are read from each stack's source: Triton's metrics port (docs/user_guide/metrics.md:
nv_inference_*, cumulative microseconds per request), vLLM's `/metrics` (vllm/v1/metrics/loggers.py;
prometheus_client adds `_total` to a counter's samples), SGLang's (srt/metrics/collector.py, served
with --enable-metrics) and trtllm-serve's `/prometheus/metrics` (tensorrt_llm/metrics/collector.py;
its `/metrics` is JSON iteration stats). Which stack a server runs is told by the names it exports,
so a server perfdag did not start (`bench --url`) is read the same way. A server with no endpoint
(`transformers serve`) has its CPU-seconds instead: result.json's host section (harness/host/state.py).
"""
from __future__ import annotations

import math
from typing import NamedTuple, Sequence

from harness.serving.bounded import read_body
from harness.serving.processes import ServerError
from harness.serving.spec import url_of

KEY = "server_metrics"  # result.json's and report.json's key
WINDOW = ("LoadGen's timed run: scraped after the warm-up, right before its test started, and right after it "
          "ended and its clients stopped")
SCRAPE_TIMEOUT_S = 2.0


class Metric(NamedTuple):
    """One figure: `kind` counter (difference), histogram (mean of what it observed), ratio (of two counters'
    differences), gauge (before and after); `names`: the samples (alternatives across versions: the first
    present is read; a ratio: numerator then denominator); `scale` to `unit`."""
    kind: str
    names: tuple[str, ...]
    unit: str = ""
    scale: float = 1.0


def _c(name, unit=""):
    return Metric("counter", (name,), unit)


def _h(name, unit="ms", scale=1e3):
    return Metric("histogram", (name,), unit, scale)


def _g(*names, unit=""):
    return Metric("gauge", names, unit)


def _r(num, den, unit="", scale=1.0):
    return Metric("ratio", (num, den), unit, scale)


# stack -> (its endpoint's path, what the report calls it -> Metric); the prefix of its names tells it apart
STACKS: dict[str, tuple[str, dict[str, Metric]]] = {
    "triton": ("/metrics", {
        "requests": _c("nv_inference_request_success"),
        "failed_requests": _c("nv_inference_request_failure"),
        "inferences": _c("nv_inference_count"),
        "executions": _c("nv_inference_exec_count"),
        "batch_size": _r("nv_inference_count", "nv_inference_exec_count", "inferences per execution"),
        "queue": _r("nv_inference_queue_duration_us", "nv_inference_request_success", "ms per request", 1e-3),
        "compute_infer": _r("nv_inference_compute_infer_duration_us", "nv_inference_request_success",
                            "ms per request", 1e-3),
        "request": _r("nv_inference_request_duration_us", "nv_inference_request_success", "ms per request", 1e-3),
        "pending_requests": _g("nv_inference_pending_request_count"),
    }),
    "vllm": ("/metrics", {
        "requests": _c("vllm:request_success_total"),
        "prompt_tokens": _c("vllm:prompt_tokens_total"),
        "generation_tokens": _c("vllm:generation_tokens_total"),
        "preemptions": _c("vllm:num_preemptions_total"),
        "prefix_cache_hit_rate": _r("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total",
                                    "hit tokens per queried token"),
        "queue": _h("vllm:request_queue_time_seconds"),
        "prefill": _h("vllm:request_prefill_time_seconds"),
        "decode": _h("vllm:request_decode_time_seconds"),
        "kv_transfer": _h("vllm:nixl_xfer_time_seconds"),
        "batch_tokens": _h("vllm:iteration_tokens_total", "tokens per step", 1.0),
        "running_requests": _g("vllm:num_requests_running"),
        "waiting_requests": _g("vllm:num_requests_waiting"),
        "kv_cache_usage": _g("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", unit="share"),
    }),
    "sglang": ("/metrics", {
        "requests": _c("sglang:num_requests_total"),
        "prompt_tokens": _c("sglang:prompt_tokens_total"),
        "generation_tokens": _c("sglang:generation_tokens_total"),
        "queue": _h("sglang:queue_time_seconds"),
        "first_token": _h("sglang:time_to_first_token_seconds"),
        "kv_transfer": _g("sglang:kv_transfer_latency_ms", unit="ms"),
        "running_requests": _g("sglang:num_running_reqs"),
        "waiting_requests": _g("sglang:num_queue_reqs"),
        "retracted_requests": _g("sglang:num_retracted_reqs"),
        "kv_cache_usage": _g("sglang:token_usage", unit="share"),
        "prefix_cache_hit_rate": _g("sglang:cache_hit_rate", unit="share"),
    }),
    "trtllm-serve": ("/prometheus/metrics", {
        "requests": _c("trtllm_request_success_total"),
        "prompt_tokens": _c("trtllm_prompt_tokens_total"),
        "generation_tokens": _c("trtllm_generation_tokens_total"),
        "queue": _h("trtllm_request_queue_time_seconds"),
        "running_requests": _g("trtllm_num_requests_running"),
        "waiting_requests": _g("trtllm_num_requests_waiting"),
        "kv_cache_usage": _g("trtllm_kv_cache_utilization", unit="share"),
        "prefix_cache_hit_rate": _g("trtllm_kv_cache_hit_rate", unit="share"),
    }),
}
PREFIXES = {"triton": "nv_inference_", "vllm": "vllm:", "sglang": "sglang:", "trtllm-serve": "trtllm_"}


def metric(stack: str, what: str) -> Metric:
    """The table's entry (KeyError for a stack or figure it has not)."""
    return STACKS[stack][1][what]


def parse(text: str) -> dict[str, float]:
    """Prometheus text as sample name -> value summed over its label sets (a histogram's `_sum` and
    `_count`; its buckets and non-finite values are left out). ValueError where the text is not
    Prometheus' exposition format."""
    from prometheus_client.parser import text_string_to_metric_families  # only a run that scrapes pays for it

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith(("_bucket", "_created")) or not math.isfinite(s.value):
                continue  # a NaN or infinite sample is no figure (and no JSON)
            out[s.name] = out.get(s.name, 0.0) + float(s.value)
    return out


def stack_of(samples: dict[str, float]) -> str | None:
    """The stack whose names the samples carry (the most of them), or None."""
    counts = {stack: sum(n.startswith(p) for n in samples) for stack, p in PREFIXES.items()}
    best = max(counts, key=counts.get)
    return best if counts[best] else None


def targets(servers: Sequence[dict]) -> list[dict]:
    """Where each server's metrics may be read: Triton's metrics port, else the server's own address
    (`/metrics`, then `/prometheus/metrics`); a layout's router is left out (its workers are read)."""
    out = []
    for rec in servers:
        if rec.get("role") == "router":
            continue
        if str(rec.get("protocol", "triton-grpc")).startswith("triton"):
            urls = [f"http://{rec['host']}:{rec['metrics_port']}/metrics"] if rec.get("metrics_port") else []
        else:
            urls = [f"http://{url_of(rec)}{path}" for path in dict.fromkeys(p for p, _ in STACKS.values())]
        out.append({"server": url_of(rec), "role": rec.get("role"), "urls": urls})
    return out


def scrape(targets_: Sequence[dict], known: dict | None = None, timeout_s: float = SCRAPE_TIMEOUT_S) -> dict:
    """server -> {"endpoint", "stack", "samples"} or {"error"}: the first of its urls whose answer is a
    known stack's Prometheus text (`known`: the first scrape's answer, whose endpoint is read again)."""
    import httpx  # heavy (~0.1 s): only a run that scrapes pays for it

    out = {}
    for t in targets_:
        was = (known or {}).get(t["server"]) or {}
        urls = [was["endpoint"]] if was.get("endpoint") else t["urls"]
        errors = []
        for url in urls:
            try:
                with httpx.stream("GET", url, timeout=timeout_s) as r:
                    if r.status_code != 200:
                        errors.append(f"{url}: HTTP {r.status_code}")
                        continue
                    samples = parse(read_body(r, f"metrics of {t['server']}").decode("utf-8", "replace"))
            except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError, ServerError) as exc:
                errors.append(f"{url}: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            except ValueError as exc:
                errors.append(f"{url}: not Prometheus text ({str(exc)[:200]})")
                continue
            if (stack := stack_of(samples)) is None:
                errors.append(f"{url}: no metric of a known stack ({', '.join(PREFIXES.values())})")
                continue
            out[t["server"]] = {"endpoint": url, "stack": stack, "samples": samples}
            break
        else:
            out[t["server"]] = {"error": "; ".join(errors) or "no metrics endpoint known for it"}
    return out


def _first(samples: dict, names: Sequence[str]) -> str | None:
    return next((n for n in names if n in samples), None)


def _sample(name: str, samples: dict) -> str:
    """The key a counter's samples are under: prometheus_client's parser names them `<family>_total`
    (Triton's `nv_inference_count` is read as `nv_inference_count_total`); an untyped one, as written."""
    return name if name in samples or name.endswith("_total") else name + "_total"


def _figure(m: Metric, b: dict, a: dict) -> dict | None:
    """One figure over the window from the samples before (`b`) and after (`a`); None where absent."""
    if m.kind == "gauge":
        name = _first(a, m.names) or _first(b, m.names)
        if name is None:
            return None
        return {"name": name, "before": b.get(name), "after": a.get(name), "unit": m.unit}
    if m.kind == "counter":
        pairs = [(_sample(m.names[0], a), "")]
    elif m.kind == "histogram":
        pairs = [(m.names[0] + "_sum", "sum"), (m.names[0] + "_count", "count")]
    else:
        pairs = [(_sample(m.names[0], a), "num"), (_sample(m.names[1], a), "den")]
    if any(n not in a or n not in b for n, _ in pairs):
        return None
    d = {role: a[n] - b[n] for n, role in pairs}
    out = {"name": " / ".join(m.names) if m.kind == "ratio" else m.names[0], "unit": m.unit}
    if any(a[n] < b[n] for n, _ in pairs):  # a counter never goes back: the server restarted in between
        return {**out, "reset": True, "note": "a counter went back between the scrapes (the server restarted?): "
                                              "no difference over the window"}
    if m.kind == "counter":
        return {**out, "delta": d[""]}
    if m.kind == "histogram":
        mean = None if not d["count"] else round(d["sum"] / d["count"] * m.scale, 6)
        return {**out, "count": d["count"], "mean": mean}
    value = None if not d["den"] else round(d["num"] / d["den"] * m.scale, 6)
    return {**out, "delta": [d["num"], d["den"]], "value": value}


def summary(targets_: Sequence[dict], before: dict, after: dict) -> dict:
    """result.json's `server_metrics`: each server's figures over the window, or why there are none."""
    rows = []
    for t in targets_:
        b, a = before.get(t["server"]) or {}, after.get(t["server"]) or {}
        row = {"server": t["server"], "role": t.get("role"), "endpoint": a.get("endpoint") or b.get("endpoint"),
               "stack": a.get("stack") or b.get("stack")}
        if "samples" not in b or "samples" not in a:
            said = [f"{when}: {x['error']}" for when, x in (("before", b), ("after", a)) if "error" in x]
            row["error"] = "; ".join(said) or "not scraped"
            rows.append(row)
            continue
        figures = {what: f for what, m in STACKS[row["stack"]][1].items()
                   if (f := _figure(m, b["samples"], a["samples"])) is not None}
        row["metrics"] = figures
        if any(f.get("reset") for f in figures.values()):
            row["reset"] = True
        rows.append(row)
    return {"window": WINDOW, "servers": rows}


def markdown(section: dict | None, host: dict | None = None) -> list[str]:
    """report.md's server-side section: each server's own figures; where it had none, its CPU-seconds
    from the host section (harness/host/state.py) stand in."""
    if not section or not section.get("servers"):
        return []
    cpu = {s["server"]: s for s in (host or {}).get("servers") or []}
    lines = ["", "## Server-side (the servers' own metrics)", "", f"Over {section['window']}.", "",
             "| server | stack | figure | value | metric |", "|---|---|---|---|---|"]
    for row in section["servers"]:
        who = row["server"] + (f" ({row['role']})" if row.get("role") else "")
        if "metrics" not in row:
            c = cpu.get(row["server"]) or {}
            stand_in = (f"no metrics ({row.get('error')}); its CPU-seconds instead: "
                        + (f"{c['cpu_s']:.2f} ({c.get('from')})" if c.get("cpu_s") is not None else
                           f"not measured ({c.get('why') or 'no host section'})"))
            lines.append(f"| {who} | {row.get('stack') or '-'} | - | {stand_in} | - |")
            continue
        for what, f in row["metrics"].items():
            lines.append(f"| {who} | {row['stack']} | {what} | {_value(f)} | `{f['name']}` |")
    return lines


#: the figures the summary prints per server (report.md has them all), and for how many servers
SUMMARY = ("requests", "queue", "batch_size", "batch_tokens", "kv_cache_usage", "prefix_cache_hit_rate", "preemptions")
SUMMARY_SERVERS = 4


def lines(section: dict | None) -> list[str]:
    """The summary's lines: each server's main figures, labelled as its own."""
    rows = (section or {}).get("servers") or []
    out = []
    for row in rows[:SUMMARY_SERVERS]:
        if "metrics" not in row:
            out.append(f"{row['server']}: no metrics of its own (its CPU-seconds: the host line)")
            continue
        figs = [f"{w} {_value(row['metrics'][w])}" for w in SUMMARY if w in row["metrics"]]
        out.append(f"{row['server']}, {row['stack']}'s own: " + (", ".join(figs) or "none of its main figures"))
    if len(rows) > SUMMARY_SERVERS:
        out.append(f"... and {len(rows) - SUMMARY_SERVERS} more server(s): report.md")
    return out


def _value(f: dict) -> str:
    unit = f" {f['unit']}" if f.get("unit") else ""
    if f.get("reset"):
        return "reset (the server restarted?)"
    if "before" in f:
        return f"{_num(f['before'])} -> {_num(f['after'])}{unit}"
    if "mean" in f:
        return f"mean {_num(f['mean'])}{unit} over {_num(f['count'])}"
    if "value" in f:
        return f"{_num(f['value'])}{unit}"
    return f"+{_num(f['delta'])}{unit}"


def _num(x) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.3f}"
