"""One chat turn sent and timed through the chat-completions core's own parts.

The LoadGen chat core (harness/loadgen/cores/openai_chat.py) is made of: one HTTP/1.1 connection
pool parsed by httptools (cores/http_pool.py), request bodies encoded by
harness/serving/openai/chat.py (the run's part, then the sample's `messages` and `tools`), a stream
scanned as bytes as each read arrives (cores/http_core.py's EventScan: the first event with output
is the first token, an error event ends the request, `usage.completion_tokens` is the count), and
the answer decoded once by chat.py's `Answer` (content, reasoning and tool calls kept apart, a
stream's tool-call pieces joined by index). A turn goes through exactly these, so what a replay
costs and how its answers are read are what the chat core's tests and benches measure; only the
LoadGen-facing queue of the core (qids, samples, the driver's sink) is not used, since LoadGen
does not model sessions.

Times are per read of the stream (as in the core): `t_first` is the first read with output,
`token_times` every read with output (`events` counts the output events in them, the token count
of a server that sends no usage).
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

from harness.loadgen.cores.http_core import EventScan
from harness.loadgen.cores.http_pool import HttpPool, Target
from harness.serving.openai import chat
from harness.serving.openai.sse import DONE, SSEParser
from harness.serving.openai.toolcalls import as_openai
from harness.untrusted.limits import MAX_EVENT_BYTES, MAX_RESPONSE_BYTES

PATH = "/v1/chat/completions"


@dataclass
class ChatReply:
    t_sent: float                       # time.monotonic() when the request went out
    t_first: float | None = None        # the first read with generated output
    t_end: float | None = None          # the reply's end
    token_times: list[float] = field(default_factory=list)  # each read with generated output
    events: int = 0                     # output events in those reads
    content: str = ""
    reasoning_content: str = ""
    tool_calls: list[dict] = field(default_factory=list)  # OpenAI tool calls, joined by index
    usage: dict | None = None
    finish_reason: str | None = None
    error: str | None = None
    sent: bool = True                   # False: never sent (its conversation had failed before it)

    def message(self) -> dict:
        """The generated turn as an assistant message (what inline accuracy scores)."""
        return {"role": "assistant", "content": self.content or None,
                "reasoning_content": self.reasoning_content or None, "tool_calls": self.tool_calls or None}


class SessionTarget(Target):
    """The chat core's target with a session's own header (`X-Session-ID`) before Content-Length."""

    def __init__(self, base: str, headers: dict[str, str]):
        super().__init__(base, PATH)
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("ascii")
        self.head = self.head.replace(b"Content-Length: ", extra + b"Content-Length: ", 1)


class _TurnStream(EventScan):
    """The chat core's scan of a stream (openai_chat._ChatStream), keeping each output read's time."""

    def __init__(self, reply: ChatReply, max_event: int):
        # the bound is all it takes of a core; a replay counts no finish reasons (the LoadGen cores' empty-answer check)
        super().__init__(SimpleNamespace(max_event=max_event, note_finish=lambda qid, reason: None), None)
        self.reply = reply
        self.kept: list[bytes] = []

    def _scan(self, region: bytes) -> None:
        now = time.monotonic()
        if b'"error"' in region:
            chat.raise_errors(region)
        found = len(chat.FIRST_OUTPUT.findall(region))
        if found:
            self.reply.events += found
            self.reply.token_times.append(now)
            if self.reply.t_first is None:
                self.reply.t_first = now
        self.kept.append(region)

    def result(self) -> bytes:
        return b"".join(self.kept)


def request_body(messages: list, tools, run: dict) -> bytes:
    """The request as the chat core encodes it: the run's part (model, max_tokens, temperature,
    stream...) then the sample's (messages, tools), each encoded once."""
    run_part = json.dumps(run, separators=(",", ":")).encode()[1:-1]
    return chat.body(run_part, chat.sample_part(messages, tools or None))


def _read(reply: ChatReply, raw: bytes, streamed: bool, max_event: int) -> None:
    """The answer decoded as the chat core decodes it (chat.Answer), plus the usage and finish reason."""
    answer = chat.Answer()
    objs = [json.loads(raw)] if not streamed else [
        json.loads(d) for d in (lambda p: p.feed(raw) + p.close())(SSEParser(max_event)) if d != DONE]
    for obj in objs:
        if not isinstance(obj, dict):
            raise RuntimeError(f"the server sent an event that is not an object: {str(obj)[:200]!r}")
        answer.add(obj)
        if isinstance(obj.get("usage"), dict):
            reply.usage = obj["usage"]
        for choice in obj.get("choices") or ():
            reply.finish_reason = choice.get("finish_reason") or reply.finish_reason
    reply.content, reply.reasoning_content = answer.text, answer.reasoning_text
    reply.tool_calls = as_openai(answer.tool_calls)
    if not streamed and (answer.text or answer.reasoning_text or answer.tool_calls):
        reply.events = 1


class TurnSender:
    """Sends turns on the running loop through one connection pool (the chat core's). An answer is read
    up to `max_response_bytes` whole and `max_event_bytes` an event (harness/untrusted/limits.py; the
    harness's fields of those names), as the core reads it."""

    def __init__(self, size: int, timeout_s: float, max_response_bytes: int = MAX_RESPONSE_BYTES,
                 max_event_bytes: int = MAX_EVENT_BYTES):
        self.pool = HttpPool(SimpleNamespace(loop=asyncio.get_running_loop()), size, max_response_bytes)
        self.pool.users = 1  # released by close(), as a core releases the frontend's pool
        self.timeout_s = timeout_s
        self.max_event = max_event_bytes

    async def send(self, url: str, body: bytes, headers: dict[str, str], stream: bool) -> ChatReply:
        """POST one chat completion and read it to the end. A failure (HTTP status, an error event, a
        broken stream, a reply not done within timeout_s) is returned in `error`, not raised."""
        reply = ChatReply(t_sent=time.monotonic())
        try:
            target = SessionTarget(url, headers)
            scan = _TurnStream(reply, self.max_event)
            pieces: list[bytes] = []
            status, err = await asyncio.wait_for(
                self.pool.post(target, body, scan.feed if stream else pieces.append), self.timeout_s)
            if status != 200:
                raise RuntimeError(f"HTTP {status}: {err[:300]!r}")
            raw = scan.end() if stream else b"".join(pieces)
            reply.t_end = time.monotonic()
            if not stream and raw:
                reply.t_first = reply.t_end
                reply.token_times.append(reply.t_end)
            _read(reply, raw, stream, self.max_event)
        except asyncio.TimeoutError:
            reply.error = f"TurnTimeout: no complete reply within {self.timeout_s:g} s (sessions.turn_timeout_s)"
        except Exception as exc:  # noqa: BLE001 - the scheduler reports it with the turn it belongs to
            reply.error = f"{type(exc).__name__}: {exc}"
        if reply.t_end is None:
            reply.t_end = time.monotonic()
        return reply

    def close(self) -> None:
        self.pool.release()
