"""Per-turn and per-session metrics of a replay, from its turn rows (turns.jsonl).

A row's times are seconds from the replay's start. TTFT is first generated event minus send;
TPOT is (last event - first event) / (output tokens - 1); latency is end minus send. Output tokens
are the server's `usage.completion_tokens`, else the events that carried text; input tokens and
cached tokens are what the server reports (`usage.prompt_tokens`,
`usage.prompt_tokens_details.cached_tokens`), absent when it reports none.
Throughput counts the turns sent inside the performance window: their output tokens over the time
from the replay's start until the last of them ended (a turn sent in the window is measured to its
end, as LoadGen measures a query issued before its run ends).
"""
from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np

from harness.loadgen.chunks import distribution, pct_key
from harness.loadgen.early_stopping import estimate
from harness.loadgen.results import ES_PERCENTILES
from harness.sessions.scheduler import Replay


def row(rec, t0: float) -> dict:
    """One turn as written to turns.jsonl (times relative to `t0`)."""
    r, usage = rec.reply, rec.reply.usage or {}
    rel = (lambda t: None if t is None else round(t - t0, 6))
    n_out = usage.get("completion_tokens") if isinstance(usage.get("completion_tokens"), int) else r.events
    details = usage.get("prompt_tokens_details") or {}
    return {"user": rec.user, "conversation_id": rec.conversation_id, "source_id": rec.source_id,
            "repeat": rec.repeat, "turn": rec.turn.turn, "index": rec.turn.index,
            "t_sent": rel(r.t_sent), "t_first": rel(r.t_first), "t_last": rel(r.token_times[-1] if r.token_times else None),
            "t_end": rel(r.t_end), "events": len(r.token_times), "output_tokens": n_out,
            "input_tokens": usage.get("prompt_tokens"), "cached_tokens": details.get("cached_tokens"),
            "input_messages": rec.turn.size, "in_window": rec.in_window,
            "finish_reason": r.finish_reason, "error": r.error, "sent": r.sent, **r.message()}


def derived(r: dict) -> dict:
    """TTFT, TPOT and latency of one row, in ms (None where it has no value)."""
    ok = r["error"] is None and r["t_first"] is not None
    n = r["output_tokens"] or 0
    return {"ttft_ms": (r["t_first"] - r["t_sent"]) * 1e3 if ok else None,
            "tpot_ms": (r["t_last"] - r["t_first"]) * 1e3 / (n - 1) if ok and n > 1 else None,
            "latency_ms": (r["t_end"] - r["t_sent"]) * 1e3 if r["error"] is None else None}


def _stats(values) -> dict | None:
    v = np.asarray([x for x in values if x is not None], dtype=float)
    if not v.size:
        return None
    return {"mean": round(float(v.mean()), 3), "p50": round(float(np.percentile(v, 50)), 3),
            "p90": round(float(np.percentile(v, 90)), 3), "p99": round(float(np.percentile(v, 99)), 3),
            "max": round(float(v.max()), 3), "n": int(v.size)}


def _mean(values):
    v = [x for x in values if x is not None]
    return round(sum(v) / len(v), 3) if v else None


def concurrency(rows: list[dict]) -> list[tuple[float, int]]:
    """Turns in flight over time: (time, count) at every send and end (turns never sent left out)."""
    rows = [r for r in rows if r.get("sent", True)]
    events = sorted([(r["t_sent"], 1) for r in rows] + [(r["t_end"], -1) for r in rows], key=lambda e: (e[0], e[1]))
    out, n = [], 0
    for t, d in events:
        n += d
        out.append((t, n))
    return out


def _mean_concurrency(series, t0: float, t1: float) -> float | None:
    if t1 <= t0:
        return None
    area, prev_t, prev_n = 0.0, t0, 0
    for t, n in series:
        if t > t0:
            area += prev_n * (min(t, t1) - max(prev_t, t0))
        if t >= t1:
            break
        prev_t, prev_n = max(t, t0), n
    else:
        area += prev_n * max(0.0, t1 - prev_t)
    return round(area / (t1 - t0), 3)


def by_turn_index(rows: list[dict]) -> list[dict]:
    groups = defaultdict(list)
    for r in rows:
        groups[r["index"]].append(r)
    out = []
    for i in sorted(groups):
        g = groups[i]
        d = [derived(r) for r in g]
        out.append({"index": i, "turns": len(g), "ttft_ms": _stats(x["ttft_ms"] for x in d),
                    "tpot_ms": _stats(x["tpot_ms"] for x in d), "latency_ms": _stats(x["latency_ms"] for x in d),
                    "input_tokens": _mean(r["input_tokens"] for r in g), "input_messages": _mean(r["input_messages"] for r in g),
                    "output_tokens": _mean(r["output_tokens"] for r in g),
                    "cached_tokens": _mean(r["cached_tokens"] for r in g)})
    return out


def summarize(rows: list[dict], window_end: float | None, t_end: float) -> dict:
    """The replay's metrics: the window, throughput in it, latencies of its turns, per turn index."""
    measured = [r for r in rows if r["in_window"] and r["error"] is None]
    d = [derived(r) for r in measured]
    last = max((r["t_end"] for r in measured), default=0.0)
    tokens = sum(r["output_tokens"] or 0 for r in measured)
    series = concurrency(rows)
    cached = [r["cached_tokens"] for r in measured if r["cached_tokens"] is not None]
    inputs = [r["input_tokens"] for r in measured if r["input_tokens"] is not None]
    return {
        "window": {"end_s": window_end, "measured_until_s": round(last, 6), "turns": len(measured),
                   "turns_after": sum(not r["in_window"] for r in rows), "output_tokens": tokens,
                   "tokens_per_s": round(tokens / last, 3) if last > 0 else None,
                   "turns_per_s": round(len(measured) / last, 3) if last > 0 else None,
                   "mean_concurrency": _mean_concurrency(series, 0.0, last),
                   "max_concurrency": max((n for t, n in series if t < last), default=0)},
        "ttft_ms": _stats(x["ttft_ms"] for x in d), "tpot_ms": _stats(x["tpot_ms"] for x in d),
        "latency_ms": _stats(x["latency_ms"] for x in d),
        "input_tokens": _stats(inputs), "output_tokens": _stats(r["output_tokens"] for r in measured),
        "cached_tokens": {"reported": bool(cached), "total": sum(cached),
                          "of_input": round(sum(cached) / sum(inputs), 4) if cached and sum(inputs) else None},
        "duration_s": round(t_end, 6), "turns": sum(r.get("sent", True) for r in rows),
        "failed_turns": sum(r["error"] is not None and r.get("sent", True) for r in rows),
        "aborted_turns": sum(not r.get("sent", True) for r in rows),
        "by_turn_index": by_turn_index(measured),
    }


def measured(rows: list[dict]) -> dict:
    """The window's turns in the form of a LoadGen run's client-side measurement (result.json `measured`:
    distributions in ms and tokens, early-stopping estimates, counts, throughput), for the endpoints
    results layout: each measured turn is one sample."""
    done = [r for r in rows if r["in_window"] and r["error"] is None]
    d = [derived(r) for r in done]
    last = max((r["t_end"] for r in done), default=0.0)
    tokens = sum(r["output_tokens"] or 0 for r in done)
    series = {"latency_ms": [x["latency_ms"] for x in d], "ttft_ms": [x["ttft_ms"] for x in d if x["ttft_ms"] is not None],
              "tpot_ms": [x["tpot_ms"] for x in d if x["tpot_ms"] is not None]}
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in series.items()}
    return {"requests": len(done), "tokens": tokens,
            "failed": sum(r["error"] is not None for r in rows),
            "duration_s": round(last, 6) if last > 0 else None,
            "samples_per_s": round(len(done) / last, 3) if last > 0 else None,
            "tokens_per_s": round(tokens / last, 3) if last > 0 else None,
            **{k: distribution(v) for k, v in arrays.items()},
            "output_tokens": distribution(np.asarray([r["output_tokens"] or 0 for r in done], dtype=np.float64)),
            "input_tokens": distribution(np.asarray([r["input_tokens"] for r in done if r["input_tokens"] is not None],
                                                    dtype=np.float64)),
            "early_stopping": {k: {pct_key(100 * q): estimate(v, q) for q in ES_PERCENTILES}
                               for k, v in arrays.items() if v.size},
            "finish_reasons": dict(Counter(r["finish_reason"] for r in done if r.get("finish_reason")))}


def rows_of(rep: Replay) -> list[dict]:
    return [row(rec, rep.t_start) for rec in rep.records]
