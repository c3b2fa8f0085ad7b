"""One chat turn sent and timed: a streamed `/v1/chat/completions` request and what came back.

Kept to one function on purpose: it is the session workload's only contact with the protocol, so
the chat-completions core (harness/loadgen/cores/, issue 31) can take its place in one line.
Events are parsed with harness/serving/openai/sse.py. The first event that carries generated text
(content, reasoning or a tool call's name or arguments) is the first token; every such event's
arrival is kept for TPOT. Tool calls arrive as deltas by `index`, joined by
harness/serving/openai/toolcalls.py.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from harness.serving.openai.sse import DONE, SSEParser
from harness.serving.openai.toolcalls import as_openai, merge_stream
from harness.untrusted.limits import MAX_EVENT_BYTES, MAX_RESPONSE_BYTES, response_too_large


@dataclass
class ChatReply:
    t_sent: float                       # time.monotonic() when the request went out
    t_first: float | None = None        # the first event with generated text
    t_end: float | None = None          # the stream's end
    token_times: list[float] = field(default_factory=list)  # each event with generated text
    content: str = ""
    reasoning_content: str = ""
    tool_calls: dict[int, dict] = field(default_factory=dict)  # by index (harness/serving/openai/toolcalls.py)
    usage: dict | None = None
    finish_reason: str | None = None
    error: str | None = None

    def message(self) -> dict:
        """The generated turn as an assistant message (what inline accuracy scores)."""
        return {"role": "assistant", "content": self.content or None,
                "reasoning_content": self.reasoning_content or None, "tool_calls": as_openai(self.tool_calls) or None}


def _event(reply: ChatReply, data: str, now: float) -> None:
    if data == DONE:
        return
    try:
        obj = json.loads(data)
    except ValueError as exc:  # transformers serve writes a parser's error message into JSON unescaped
        raise RuntimeError(f"the server sent an event that is not JSON ({exc}): {data[:300]!r}") from None
    if "error" in obj and not obj.get("choices"):
        raise RuntimeError(f"server error: {obj['error']}")
    if obj.get("usage"):
        reply.usage = obj["usage"]
    got = False
    for choice in obj.get("choices") or ():
        delta = choice.get("delta") or choice.get("message") or {}
        for key in ("content", "reasoning_content"):
            if delta.get(key):
                setattr(reply, key, getattr(reply, key) + delta[key])
                got = True
        got = merge_stream(reply.tool_calls, delta.get("tool_calls")) or got
        reply.finish_reason = choice.get("finish_reason") or reply.finish_reason
    if got:
        reply.token_times.append(now)
        if reply.t_first is None:
            reply.t_first = now


async def send_turn(session, url: str, body: dict, headers: dict, max_response_bytes: int = MAX_RESPONSE_BYTES,
                    max_event_bytes: int = MAX_EVENT_BYTES) -> ChatReply:
    """POST one streamed chat completion with `session` (aiohttp) and read it to the end, at most
    `max_response_bytes` of it and `max_event_bytes` of one event (harness/untrusted/limits.py). A failure
    (HTTP status, an error event, a broken stream, an answer over a bound) is returned in `error`, not raised."""
    reply = ChatReply(t_sent=time.monotonic())
    try:
        async with session.post(f"{url}/v1/chat/completions", json=body, headers=headers) as r:
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}: {(await r.content.read(300))!r}")
            parser = SSEParser(max_event_bytes)
            got = 0
            async for chunk in r.content.iter_any():
                now = time.monotonic()
                got += len(chunk)
                if got > max_response_bytes:
                    raise response_too_large(max_response_bytes, got)
                for data in parser.feed(chunk):
                    _event(reply, data, now)
            for data in parser.close():
                _event(reply, data, time.monotonic())
    except Exception as exc:  # noqa: BLE001 - the scheduler reports it with the turn it belongs to
        reply.error = f"{type(exc).__name__}: {exc}"
    reply.t_end = time.monotonic()
    return reply
