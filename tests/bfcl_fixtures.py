"""A synthetic BFCL answer set over the 995-row accuracy set: for each row, answers a server could
send (streamed deltas or a whole message), made from the row's truth with a seeded choice of what
goes wrong: right calls, a wrong value, calls as text, as a JSON list of names, malformed argument
JSON, no call, reasoning before text calls, parallel calls reversed, an extra call, a duplicate
answer, and rows never answered. Hallucination rows answer with or without a call.

EXPECTED is what MLCommons' endpoints client's own BFCLv4Scorer (ea33275, bfcl_v4_scorer.py with
its extractor and merge_tool_calls, bfcl-eval 2026.3.23) gave for these answers, run offline during
development with its events replaced by these answers; its code is not in this repository.
"""
from __future__ import annotations

import json
import random

EXPECTED = {
    "overall_accuracy": 59.4, "normalized_single_turn_score": 58.34,
    "non_live": 59.34, "live": 60.0, "hallucination": 55.68,
    "subset_scores": {"irrelevance": 62.5, "live_irrelevance": 48.86, "live_multiple": 53.33, "live_parallel": 50.0,
                      "live_parallel_multiple": 83.33, "live_simple": 72.0, "multiple": 62.9, "parallel": 62.1,
                      "parallel_multiple": 73.39, "simple_java": 33.87, "simple_javascript": 19.35,
                      "simple_python": 63.71},
    "total_samples": 954,
}
HALLUCINATION = ("irrelevance", "live_irrelevance")


def truth_calls(row: dict) -> list[tuple[str, dict]]:
    """The row's first acceptable call(s), names as an OpenAI server returns them (dots as underscores)."""
    truth = json.loads(row["ground_truth"])
    out = []
    for call in truth if isinstance(truth, list) else []:
        for name, args in call.items():
            out.append((name.replace(".", "_"), {k: v[0] for k, v in args.items() if v and v[0] != ""}))
    return out


def _resolved(value):
    """A truth's value with every nested option list resolved to its first option."""
    if isinstance(value, dict):
        return {k: _resolved(v[0]) for k, v in value.items() if v and v[0] != ""}
    if isinstance(value, list):
        return [_resolved(v) for v in value]
    return value


def reference_calls(row: dict) -> list[tuple[str, dict]]:
    """The row's truth as a correct answer: first options all the way down (nested objects too)."""
    truth = json.loads(row["ground_truth"])
    return [(name.replace(".", "_"), _resolved(args)) for call in truth if isinstance(truth, list)
            for name, args in call.items()]


def streamed(calls, content: str = "", reasoning: str = "") -> dict:
    events = []
    if reasoning:
        events.append({"choices": [{"delta": {"reasoning_content": reasoning}}]})
    if content:
        events.append({"choices": [{"delta": {"content": content}}]})
    for i, (name, args) in enumerate(calls):
        text = args if isinstance(args, str) else json.dumps(args)
        k = max(1, len(text) // 3)
        events.append({"choices": [{"delta": {"tool_calls": [{"index": i, "id": f"call_{i}", "type": "function",
                                                                "function": {"name": name, "arguments": text[:k]}}]}}]})
        for j in range(k, len(text), k):
            events.append({"choices": [{"delta": {"tool_calls": [{"index": i, "function": {"arguments": text[j:j + k]}}]}}]})
    events.append({"choices": [{"delta": {}, "finish_reason": "stop"}], "usage": {"completion_tokens": 5}})
    return {"stream": True, "events": events}


def message(calls, content: str = "") -> dict:
    msg = {"role": "assistant", "content": content or None}
    if calls:
        msg["tool_calls"] = [{"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                             for i, (n, a) in enumerate(calls)]
    return {"stream": False, "events": [{"choices": [{"message": msg}], "usage": {"completion_tokens": 5}}]}


def _as_text(calls) -> str:
    return "; ".join(f"{n}({', '.join(f'{k}={v!r}' for k, v in a.items())})" for n, a in calls)


def answers(rows: list[dict], seed: int = 7) -> list:
    """Per row: one answer, a list of answers (logged twice), or None (never answered)."""
    rng = random.Random(seed)
    out = []
    for row in rows:
        calls = truth_calls(row)
        kind = rng.randrange(12)
        if row["subset"] in HALLUCINATION:
            kind = rng.choice([6, 0, 13, 3])
            calls = calls or [("some_tool", {"x": 1})]
        wrong = [(n, {**a, **({next(iter(a)): "WRONG"} if a else {"zzz": 1})}) for n, a in calls]
        out.append({
            0: lambda: streamed(calls), 1: lambda: message(calls), 2: lambda: streamed(wrong),
            3: lambda: streamed([], content="Here is the call: " + _as_text(calls)),
            4: lambda: streamed([], content=json.dumps([{"name": n, "arguments": a} for n, a in calls])),
            5: lambda: streamed([(n, json.dumps(a)[:-1]) for n, a in calls]),
            6: lambda: streamed([], content="I cannot help with that."),
            7: lambda: streamed([], reasoning="Let me think. ", content=" ".join(_as_text([c]) for c in calls)),
            8: lambda: streamed(list(reversed(calls))), 9: lambda: None,
            10: lambda: [streamed(calls), streamed([])],
            11: lambda: streamed(calls + [("extra_fn", {"q": 2})]),
            13: lambda: streamed(calls, content="Sure, calling it."),
        }[kind]())
    return out


def sse(answer: dict) -> bytes:
    if not answer["stream"]:
        return json.dumps(answer["events"][0]).encode()
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in answer["events"]) + b"data: [DONE]\n\n"
