"""LoadGen's results as perfdag reads them: mlperf_log_detail/summary parsed into result.json,
the harness' own per-request measurements (requests.csv) beside them.
Over 400 lines because every scenario's summary fields (Offline, Server, Interactive, SingleStream) are read and checked against the detail log in one place."""
from __future__ import annotations

import collections
import contextlib
import csv
import json
import operator
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from harness.loadgen.chunks import chunk_stats, concat, distribution, pct_key
from harness.loadgen.early_stopping import estimate
from harness.loadgen.verdict import errors_reason, read_errors, run_validity


def read_mllog(path: Path) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if not path.is_file():
        return values
    with open(path, errors="replace") as f:
        for line in f:
            i = line.find(":::MLLOG")
            if i < 0:
                continue
            try:
                obj = json.loads(line[i + len(":::MLLOG"):])
            except json.JSONDecodeError:
                continue
            key = obj.get("key")
            if key is not None:
                values[key] = obj.get("value")
    return values


def _ns_to_ms(v) -> float | None:
    try:
        return round(float(v) / 1e6, 3)
    except (TypeError, ValueError):
        return None


def _percentiles_ms(d: dict, fmt: str) -> dict | None:
    out = {}
    for p in ("50.00", "90.00", "95.00", "97.00", "99.00", "99.90"):
        v = d.get(fmt.format(p=p))
        if v is not None:
            out["p" + p.rstrip("0").rstrip(".").replace(".", "_")] = _ns_to_ms(v)
    return out or None


def parse_summary(out_dir: str | os.PathLike) -> dict:
    """Parse LoadGen's ``mlperf_log_detail.txt`` (falling back to ``mlperf_log_summary.txt``)
    in ``out_dir`` into ``result.json``'s LoadGen part.

    Keys: scenario, mode, valid ("VALID"/"INVALID"/None in accuracy runs; INVALID wherever LoadGen
    logged an error, verdict.py), loadgen_valid (LoadGen's own "Result is"), invalid_reason(s),
    loadgen_errors ({count, first, kinds}), samples_per_s, tokens_per_s, latency_ms / ttft_ms /
    tpot_ms ({p50, p90, p95, p97, p99, p99_9, mean}; ttft/tpot None where LoadGen measured none),
    early_stopping ({met, ttft, tpot}), min_duration_met, min_queries_met, perf_constraints_met, query_count,
    target_qps, ttft_constraint_ms, tpot_constraint_ms (None for Offline and SingleStream),
    single_stream (SingleStream's p90 latency and early-stopping estimate, `single_stream()`; None
    elsewhere), num_errors, warnings, loadgen_version. SingleStream's samples/s and tokens/s are
    LoadGen's rates with its overhead (one query at a time).
    """
    out = Path(out_dir)
    d = read_mllog(out / "mlperf_log_detail.txt")
    summary_path = out / "mlperf_log_summary.txt"
    summ = summary_path.read_text(errors="replace") if summary_path.is_file() else ""
    if not d and not summ:
        raise FileNotFoundError(f"no LoadGen logs (mlperf_log_detail.txt / mlperf_log_summary.txt) in {out}")
    scenario = d.get("effective_scenario") or _summary_field(summ, "Scenario")
    mode = d.get("effective_test_mode") or _summary_field(summ, "Mode")
    is_offline, single = scenario == "Offline", scenario == "SingleStream"
    # SingleStream: one query at a time, so throughput is LoadGen's "with loadgen overhead" rate
    sps = d.get("result_samples_per_second" if is_offline else "result_qps_with_loadgen_overhead" if single
                else "result_completed_samples_per_sec")
    tps = d.get("result_tokens_per_second" if is_offline else "result_token_throughput_with_loadgen_overhead"
                if single else "result_completed_tokens_per_second")
    if sps is None:
        sps = _summary_number(summ, ("Samples per second", "Completed samples per second", "QPS w/ loadgen overhead"))
    if tps is None:
        tps = _summary_number(summ, ("Tokens per second", "Completed tokens per second", "TPS w/ loadgen overhead"))
    valid = d.get("result_validity")
    if valid is None:
        m = _summary_field(summ, "Result is")
        valid = m or None
    errors = read_errors(out / "mlperf_log_detail.txt", summ)
    reasons = invalid_reasons(d, scenario)
    if errors["count"]:  # first: LoadGen's own verdict may well say VALID
        reasons.insert(0, errors_reason(errors))
    latency = _percentiles_ms(d, "result_{p}_percentile_latency_ns") or {}
    if d.get("result_mean_latency_ns") is not None:
        latency["mean"] = _ns_to_ms(d["result_mean_latency_ns"])
    ttft = _percentiles_ms(d, "result_first_token_{p}_percentile_latency_ns")
    if ttft is not None and d.get("result_first_token_mean_latency_ns") is not None:
        ttft["mean"] = _ns_to_ms(d["result_first_token_mean_latency_ns"])
    tpot = _percentiles_ms(d, "result_time_per_output_token_{p}_percentile_ns")
    if tpot is not None and d.get("result_time_to_output_token_mean") is not None:
        tpot["mean"] = _ns_to_ms(d["result_time_to_output_token_mean"])
    # LoadGen logs 0 for token latencies nobody reported (no FirstTokenComplete): say so
    if ttft and not any(v for k, v in ttft.items()):
        ttft = None
    if tpot and not any(v for k, v in tpot.items()):
        tpot = None
    es_met = d.get("early_stopping_met")
    streamed_limits = not (is_offline or single)  # SingleStream holds no TTFT/TPOT limit
    result = {
        "scenario": scenario,
        "mode": mode,
        "valid": run_validity(valid, errors),
        "loadgen_valid": valid,
        "invalid_reason": "; ".join(reasons) or None,
        "invalid_reasons": reasons,
        "loadgen_errors": errors,
        "samples_per_s": _float(sps),
        "tokens_per_s": _float(tps),
        "latency_ms": latency or None,
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "early_stopping": None if es_met is None else {
            "met": bool(es_met),
            "ttft": _squash(d.get("early_stopping_ttft_result")),
            "tpot": _squash(d.get("early_stopping_tpot_result")),
            "result": _squash(d.get("early_stopping_result")),
        },
        "min_duration_met": d.get("result_min_duration_met"),
        "min_queries_met": d.get("result_min_queries_met"),
        "perf_constraints_met": d.get("result_perf_constraints_met"),
        "query_count": d.get("result_query_count"),
        "target_qps": d.get("effective_target_qps"),
        "ttft_constraint_ms": _ns_to_ms(d.get("requested_server_ttft_latency")) if streamed_limits else None,
        "tpot_constraint_ms": _ns_to_ms(d.get("requested_server_tpot_latency")) if streamed_limits else None,
        "single_stream": single_stream(d) if single else None,
        "num_errors": d.get("num_errors"),
        "warnings": "No warnings encountered during test." not in summ if summ else None,
        "loadgen_version": d.get("loadgen_version"),
    }
    return result


def single_stream(d: dict) -> dict:
    """SingleStream's own numbers: the 90th-percentile latency (what MLCommons' checker reports for an
    LLM, e.g. llama3.1-8b-edge), LoadGen's early-stopping estimate of it (the checker's result for
    other benchmarks; with token latencies LoadGen estimates it over the first-token latencies, which
    it checks last), the expected latency LoadGen planned with and the rates with and without
    LoadGen's overhead."""
    pct = d.get("effective_target_latency_percentile")
    return {"target_percentile": None if pct is None else round(float(pct) * 100, 3),
            "p90_latency_ms": _ns_to_ms(d.get("result_90.00_percentile_latency_ns")),
            "early_stopping_latency_ms": _ns_to_ms(d.get("early_stopping_latency_ss")),
            "expected_latency_ms": _ns_to_ms(d.get("requested_single_stream_expected_latency_ns")),
            "qps_with_loadgen_overhead": _float(d.get("result_qps_with_loadgen_overhead")),
            "qps_without_loadgen_overhead": _float(d.get("result_qps_without_loadgen_overhead"))}


def invalid_reasons(d: dict, scenario: str | None) -> list[str]:
    """Why LoadGen called a run INVALID, one item per failed condition, from the detail log's
    verdict flags (LoadGen's own `result_invalid_reason` omits early stopping), each with the
    numbers and the setting that fixes it. Empty for a VALID run or an accuracy run."""
    if d.get("result_validity") != "INVALID":
        return []
    out = []
    if d.get("result_perf_constraints_met") is False:
        out.append("latency constraint not met: " + _latency_breach(d))
    if d.get("result_min_duration_met") is False:
        need = _s(d.get("effective_min_duration_ms"), 1e3)
        if scenario == "Offline":
            out.append(f"min duration not met: the run took {_s(d.get('result_max_latency_ns'), 1e9)} s < "
                       f"min_duration {need} s (raise loadgen.offline_expected_qps: LoadGen issues "
                       "expected_qps x min_duration samples)")
        elif scenario == "SingleStream":
            out.append(f"min duration not met: the last query was issued at {_last_issue_s(d)} s < min_duration "
                       f"{need} s (lower loadgen.single_stream_expected_latency_ms: LoadGen generates 2 x "
                       "min_duration / expected latency queries, and ran out)")
        else:
            out.append(f"min duration not met: queries were scheduled over {_s(d.get('generated_query_duration'), 1e9)}"
                       f" s < min_duration {need} s (raise loadgen.server_target_qps or min_duration_ms)")
    if d.get("result_min_queries_met") is False:
        out.append(f"min queries not met: {d.get('result_query_count')} queries < min_query_count "
                   f"{d.get('effective_min_query_count')} (raise loadgen.min_duration_ms or the QPS)")
    if d.get("early_stopping_met") is False:
        for what, key in (("TTFT", "early_stopping_ttft_result"), ("TPOT", "early_stopping_tpot_result"),
                          ("latency", "early_stopping_result")):
            text = _squash(d.get(key)) or ""
            if "unsuccessful" in text or "Only processed" in text:
                out.append(f"early stopping not met ({what}): {_early_stopping_numbers(text)} "
                           "(raise loadgen.min_query_count, or the QPS x min_duration)")
        if not any(r.startswith("early stopping") for r in out):
            out.append("early stopping not met")
    if not out:  # a condition this parser does not know: LoadGen's own words
        out.append(_squash(d.get("result_invalid_reason")) or "LoadGen reported INVALID without a reason")
    return out


def _s(v, div: float) -> str:
    try:
        return f"{float(v) / div:.1f}"
    except (TypeError, ValueError):
        return "?"


def _last_issue_s(d: dict) -> str:
    """When SingleStream issued its last query, in s: LoadGen logs only the rate it derives from it,
    (queries - 1) / that time."""
    try:
        return f"{(int(d['result_query_count']) - 1) / float(d['result_qps_with_loadgen_overhead']):.1f}"
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return "?"


def _latency_breach(d: dict) -> str:
    parts = []
    for name, got, limit in (("TTFT", "result_first_token_99.00_percentile_latency_ns", "requested_server_ttft_latency"),
                             ("TPOT", "result_time_per_output_token_99.00_percentile_ns", "requested_server_tpot_latency")):
        g, lim = _ns_to_ms(d.get(got)), _ns_to_ms(d.get(limit))
        if g is not None and lim and g > lim:
            parts.append(f"{name} p99 {g:.1f} ms > {lim:.1f} ms")
    if not parts:
        g, lim = _ns_to_ms(d.get("result_99.00_percentile_latency_ns")), _ns_to_ms(d.get("effective_target_latency_ns"))
        parts.append(f"p99 latency {g} ms > target {lim} ms" if lim else
                     (_squash(d.get("result_invalid_reason")) or "a latency limit was exceeded"))
    return ", ".join(parts) + " (lower loadgen.server_target_qps)"


def _early_stopping_numbers(text: str) -> str:
    """LoadGen's recommendation in a few words: 'processed 256 queries, needs at least 203 more'."""
    import re

    done = re.search(r"[Pp]rocessed (?:at least )?(\d+) queries", text)
    more = re.search(r"at least (\d+) more queries", text)
    need = re.search(r"Need to process at least (\d+) queries", text)
    if done and more:
        return f"processed {done.group(1)} queries, needs at least {more.group(1)} more"
    if need:
        return f"{text.split('.')[0].strip(' *')}; needs at least {need.group(1)} queries"
    return text.strip(" *")


def _float(v) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _squash(text) -> str | None:
    if text is None:
        return None
    s = " ".join(str(text).split())
    return s or None


def _summary_field(summ: str, name: str) -> str | None:
    for line in summ.splitlines():
        if line.strip().startswith(name) and ":" in line:
            return line.split(":", 1)[1].strip()
    return None


def _summary_number(summ: str, names: Sequence[str]) -> float | None:
    for name in names:
        v = _summary_field(summ, name)
        if v is not None:
            with contextlib.suppress(ValueError):
                return float(v)
    return None


def merge_measured(result: dict, stats: dict, cfg: dict) -> dict:
    """Harness-side numbers next to LoadGen's (fills TTFT/TPOT LoadGen did not measure)."""
    measured = stats.get("measured") or {}
    extra = {
        "harness": {
            "endpoints": cfg["endpoints"], "models": cfg["models"], "frontends": cfg["frontends"],
            "clients_per_frontend": cfg["clients_per_frontend"], "streaming": stats.get("streaming"),
            "warmup_queries": stats.get("warmup_requests"), "warmup_s": stats.get("warmup_s"),
            "max_new_tokens": cfg["max_new_tokens"], "end_id": cfg["end_id"],
            "request_errors": stats.get("request_errors", 0), "per_server": stats.get("per_server"),
            "protocol": cfg.get("protocol"), "methods": stats.get("methods"),
            "client_cpu_s": stats.get("client_cpu_s"), "client_cpu": stats.get("client_cpu"),
            "max_in_flight": stats.get("max_in_flight", cfg.get("max_in_flight")),
            "peak_in_flight": stats.get("peak_in_flight"),
        },
        "client_bound": stats.get("client_bound"),
        "client_bound_reason": stats.get("client_bound_reason"),
        "clients": stats.get("clients"),  # per node: frontends, CPU, responses, clock offset (clients.py)
        "measured": measured,
        "ttft_source": "loadgen" if result.get("ttft_ms") else None,
        "tpot_source": "loadgen" if result.get("tpot_ms") else None,
    }
    if not result.get("ttft_ms") and measured.get("ttft_ms"):
        extra["ttft_ms"] = measured["ttft_ms"]
        extra["ttft_source"] = "harness"
    if not result.get("tpot_ms") and measured.get("tpot_ms"):
        extra["tpot_ms"] = measured["tpot_ms"]
        extra["tpot_source"] = "harness"
    return extra


#: result.json's ttft_source / tpot_source -> whose number it is, as every report labels it
SOURCE_LABELS = {"loadgen": "LoadGen", "harness": "client"}


def sources(result: dict) -> dict[str, str | None]:
    """Whose number each latency of result.json is: "LoadGen" (its mlperf_log_detail.txt) or "client"
    (perfdag's own per-request timings, filled in where LoadGen measured none: a streamed closed loop);
    None where there is none. `latency_from`: where the client's own latencies start ("issue", or
    "send" in Offline's closed loop, where LoadGen's start at its one issue of everything)."""
    def of(key: str, source_key: str) -> str | None:
        if not result.get(key):
            return None
        return SOURCE_LABELS.get(result.get(source_key) or "loadgen", "LoadGen")
    return {"ttft_ms": of("ttft_ms", "ttft_source"), "tpot_ms": of("tpot_ms", "tpot_source"),
            "latency_ms": "LoadGen" if result.get("latency_ms") else None,
            "latency_from": (result.get("measured") or {}).get("latency_from")}


def read_requests_csv(path: str | os.PathLike) -> list[dict]:
    """Per-request rows written by the driver: sample_index, server, issue_ms (since the first
    issue), ttft_ms (None when not streamed), latency_ms, n_tokens, tpot_ms, queue_ms (None when unknown),
    start_ms (since the first issue: where ttft_ms and latency_ms start; issue_ms in a file older than it)."""
    path = Path(path)
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        reader = csv.reader(f)  # by column position: a DictReader's dict per row costs as much as the rest
        col = {name: i for i, name in enumerate(next(reader, []))}
        rows = []
        if not col:
            return rows
        fields = operator.itemgetter(*(col[k] for k in ("sample_index", "server", "issue_ms", "ttft_ms", "latency_ms",
                                                        "n_tokens", "tpot_ms")))
        queue, start = col.get("queue_ms"), col.get("start_ms")
        for r in reader:
            if not r:
                continue  # a blank line, which DictReader skips too
            r += [""] * (len(col) - len(r))  # a short row's missing fields are empty
            si, server, issue, ttft, latency, n_tokens, tpot = fields(r)
            rows.append({
                "sample_index": int(si), "server": int(server), "issue_ms": float(issue),
                "ttft_ms": float(ttft) if ttft else None, "latency_ms": float(latency), "n_tokens": int(n_tokens),
                "tpot_ms": float(tpot) if tpot else None,
                "queue_ms": float(r[queue]) if queue is not None and r[queue] else None,
                "start_ms": float(r[start]) if start is not None and r[start] else float(issue),
            })
    return rows


def latency_start_ms(request: dict) -> float:
    """Where a request's TTFT and latency start, since the run's first issue: its start_ms, or its
    issue where a row has none (latency from LoadGen's issue); it completes at this + latency_ms."""
    return request.get("start_ms", request["issue_ms"])


def json_default(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    return str(o)


#: The percentiles whose early-stopping estimate a run reports (p99.9 needs 6,636 queries).
ES_PERCENTILES = (0.5, 0.9, 0.99, 0.999)

REQUEST_COLUMNS = ["sample_index", "server", "issue_ms", "ttft_ms", "latency_ms", "n_tokens", "tpot_ms", "queue_ms",
                   "start_ms"]


def _starts(records: Sequence[tuple], from_send: bool) -> np.ndarray:
    """Where each request's TTFT and latency start: LoadGen's issue (its own definition: Server,
    Interactive, SingleStream), or, with `from_send` (Offline: a closed loop, where the client decides
    when to send), the moment the client sent it; the wait between is queue_ms."""
    ti = np.array([r[2] for r in records], dtype=np.float64)
    if not from_send:
        return ti
    ts = np.array([r[6] if len(r) > 6 else 0 for r in records], dtype=np.float64)
    return np.where(ts > 0, ts, ti)


def write_requests_csv(path: Path, records: Sequence[tuple], t0: int, from_send: bool = False) -> None:
    """records: (sample index, server, t_issue, t_first or 0, t_done, n_tokens, t_sent or 0), monotonic ns.
    issue_ms is since the first issue; ttft_ms and latency_ms start where `_starts` says, at start_ms
    (since the first issue too), so a request completes at start_ms + latency_ms."""
    start = _starts(records, from_send) if records else []
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(REQUEST_COLUMNS)
        for r, t in zip(records, start):
            sidx, s, ti, tf, td, n = r[:6]
            ts = r[6] if len(r) > 6 else 0
            ttft = f"{(tf - t) / 1e6:.3f}" if tf else ""
            tpot = f"{(td - tf) / 1e6 / (n - 1):.4f}" if tf and n > 1 else ""
            queue = f"{(ts - ti) / 1e6:.3f}" if ts else ""
            w.writerow([sidx, s, f"{(ti - t0) / 1e6:.3f}", ttft, f"{(td - t) / 1e6:.3f}", n, tpot, queue,
                        f"{(t - t0) / 1e6:.3f}"])


def finish_counts(n_tokens: np.ndarray, limits: np.ndarray) -> dict:
    """Why each request ended, as OpenAI servers' finish_reason says it, read from the token counts
    (so every protocol has it): "length" when it reached its output limit, "stop" before it."""
    length = int((n_tokens >= limits).sum())
    return {"stop": int(n_tokens.size) - length, "length": length, "from": "token counts"}


def measured_stats(records: Sequence[tuple], chunks: Sequence[bytes] = (), from_send: bool = False,
                   limits: np.ndarray | None = None) -> dict:
    """Harness-side throughput and latency percentiles from the per-request records, and the
    inter-token latency of their streamed chunks (chunks.py). TTFT and latency start where `_starts`
    says; queue_ms is the wait between LoadGen's issue and the send. `limits`: each record's output
    limit (max tokens), for the finish reasons."""
    if not records:
        return {}
    rec = np.array([(r[2], r[3], r[4], r[5]) for r in records], dtype=np.float64)
    ti, tf, td, n = rec[:, 0], rec[:, 1], rec[:, 2], rec[:, 3]
    t0 = _starts(records, from_send)
    ts = np.array([r[6] if len(r) > 6 else 0 for r in records], dtype=np.float64)
    span = (td.max() - ti.min()) / 1e9

    pct = distribution  # n, mean, min, max, p1 .. p99.9
    has_first = tf > 0
    multi = has_first & (n > 1)
    return {
        "requests": int(len(rec)),
        "tokens": int(n.sum()),
        "samples_per_s": round(len(rec) / span, 3) if span > 0 else None,
        "tokens_per_s": round(float(n.sum()) / span, 3) if span > 0 else None,
        "latency_ms": pct((td - t0) / 1e6),
        "ttft_ms": pct((tf[has_first] - t0[has_first]) / 1e6),
        "tpot_ms": pct((td[multi] - tf[multi]) / 1e6 / (n[multi] - 1)),
        "output_tokens": pct(n),
        "queue_ms": pct((ts[ts > 0] - ti[ts > 0]) / 1e6) if (ts > 0).any() else None,
        "finish": None if limits is None else finish_counts(n, np.asarray(limits, dtype=np.float64)),
        # LoadGen's early-stopping estimate at each percentile the report shows (None: too few queries)
        "early_stopping": {name: {pct_key(100 * q): estimate(values, q) for q in ES_PERCENTILES}
                           for name, values in (("latency_ms", (td - t0) / 1e6),
                                                ("ttft_ms", (tf[has_first] - t0[has_first]) / 1e6),
                                                ("tpot_ms", (td[multi] - tf[multi]) / 1e6 / (n[multi] - 1)))
                           if values.size},
        "latency_from": "send" if from_send else "issue",
        **_chunk_stats(chunks),
    }


def _chunk_stats(per_request: Sequence[bytes]) -> dict:
    if not any(per_request):
        return {}
    return chunk_stats(*concat(per_request))


def answers(frontends: dict[int, dict]) -> dict:
    """What the clients saw of the answers themselves over the timed run: how many held no token at all
    (`empty`, before LoadGen's padding to 2 end tokens) and the server's own finish reasons
    (`server_finish`, OpenAI servers; None where the server sends none, Triton)."""
    empty, finish = 0, collections.Counter()
    for fe in frontends.values():
        for c in (fe.get("clients") or {}).values():
            empty += int(c.get("empty") or 0)
            finish.update(c.get("finish") or {})
    return {"empty": empty, "server_finish": dict(finish) or None}


#: A client process whose busiest thread ran or waited to run more than this share of the timed
#: run (harness/loadgen/usage.py) was, or nearly was, what limited the run, not the server.
CLIENT_BOUND_BUSY = 0.8


def client_usage(driver: dict, frontends: dict[int, dict]) -> dict:
    """CPU of the driver and of each frontend over the timed run, how busy each was (`busy`: its
    busiest thread's run + run-queue time over the wall time; CPU / wall where that is unknown),
    the peak of requests in flight, and whether a client process was the bottleneck
    (`client_bound`, with the setting to raise)."""
    def row(u: dict, **extra) -> dict:
        cpu, wall = u.get("cpu_s"), u.get("wall_s")
        busy = u.get("demand")
        if busy is None and cpu is not None and wall:
            busy = cpu / wall
        return {**extra, "cpu_s": None if cpu is None else round(cpu, 4),
                "wall_s": None if wall is None else round(wall, 3), "busy": None if busy is None else round(busy, 3)}

    fes = [row(u, frontend=i) for i, u in sorted(frontends.items())]
    drv = row(driver)
    reasons = []
    for f in fes:
        if f["busy"] is not None and f["busy"] > CLIENT_BOUND_BUSY:
            reasons.append(f"frontend {f['frontend']} was busy {f['busy']:.0%} of the timed run "
                           f"(raise harness.frontends: each frontend is one process, one core; "
                           f"harness.clients_per_frontend spreads connections, not CPU)")
    if drv["busy"] is not None and drv["busy"] > CLIENT_BOUND_BUSY:
        reasons.append(f"the LoadGen driver was busy {drv['busy']:.0%} of the timed run (LoadGen itself and "
                       "its completions, per query: fewer, longer queries or a faster host)")
    peaks = [u.get("peak_in_flight") for u in frontends.values() if u.get("peak_in_flight") is not None]
    return {"client_cpu_s": round((drv["cpu_s"] or 0.0) + sum(f["cpu_s"] or 0.0 for f in fes), 4),
            "client_cpu": {"driver": drv, "frontends": fes},
            # per frontend exact; summed over frontends (their peaks may not coincide)
            "peak_in_flight": sum(peaks) if peaks else None,
            "client_bound": bool(reasons), "client_bound_reason": "; ".join(reasons) or None}
