"""Turns whose prompt and output cannot fit the model's context, found before anything is sent.

A server refuses a request longer than its context (vLLM and trtllm-serve answer 400, `transformers
serve` fails the stream), which fails the turn and so its conversation. MLCommons' client sends it
anyway; perfdag says so first. Per conversation, the first client turn whose prompt (every
message's text, tool calls' arguments and the tools' schemas) plus its max tokens passes
`context_tokens` is named. Tokens are counted with `count` (a tokenizer's), else estimated at 4
UTF-8 bytes a token, and said so. Linear in the rows: a running sum over each conversation's one
history.
"""
from __future__ import annotations

import json
from typing import Callable, Sequence

from harness.sessions.trajectories import Trajectory

BYTES_PER_TOKEN = 4


def estimate(text: str) -> int:
    return -(-len(text.encode("utf-8")) // BYTES_PER_TOKEN)


def _text(msg: dict) -> str:
    parts = [msg.get("content"), msg.get("reasoning_content")]
    parts += [json.dumps(c.get("function") or {}, ensure_ascii=False) for c in msg.get("tool_calls") or ()]
    out = []
    for p in parts:
        if isinstance(p, str):
            out.append(p)
        elif isinstance(p, list):  # content parts
            out += [x.get("text") or "" for x in p if isinstance(x, dict)]
    return "\n".join(out)


def overflows(trajectories: Sequence[Trajectory], context_tokens: int, max_tokens: int,
              count: Callable[[str], int] | None = None) -> list[str]:
    """One line per conversation that has a turn past `context_tokens` (its first such turn)."""
    counter, how = (count, "counted") if count is not None else (estimate, f"estimated at {BYTES_PER_TOKEN} bytes a token")
    out = []
    for t in trajectories:
        if not t.turns:
            continue
        history = t.turns[-1].history
        tools = counter(json.dumps(t.tools, ensure_ascii=False)) if t.tools else 0
        sums, total = [0], 0
        for msg in history:
            total += counter(_text(msg))
            sums.append(total)
        for turn in t.turns:
            prompt = sums[turn.size] + (counter(json.dumps(turn.request["tools"])) if "tools" in turn.request else tools)
            out_tokens = int(turn.request.get("max_tokens", max_tokens))
            if prompt + out_tokens > context_tokens:
                out.append(f"conversation {t.conversation_id!r} turn {turn.turn}: its prompt is about {prompt:,} tokens "
                           f"({how}) + max_tokens {out_tokens:,} > the model's context of {context_tokens:,}; the "
                           "server will refuse it and the conversation will fail")
                break
    return out
