"""One session replay against one OpenAI-compatible server: its turns, metrics, accuracy and files.

Writes `turns.jsonl` (one row per sent turn: times, token counts, the generated message, whether
it is inside the performance window) and returns the result that goes into result.json. LoadGen
does not model sessions; the result says that perfdag's own scheduler produced it.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from harness.errors import MeasurementError
from harness.serving.openai.client import base_url
from harness.sessions import inline, metrics
from harness.sessions.chat import send_turn
from harness.sessions.scheduler import SESSION_HEADER, Plan, Replay, replay
from harness.sessions.trajectories import Trajectory

SCHEDULER = "perfdag's session scheduler (LoadGen does not model sessions: harness/sessions/scheduler.py)"


@dataclass(frozen=True)
class Request:
    """What every turn's request carries besides its messages."""
    model: str = ""
    max_tokens: int = 1024
    temperature: float = 0.0
    include_usage: bool = True  # stream_options.include_usage: the server's token and cached-token counts
    extra: dict = field(default_factory=dict)  # e.g. seed, chat_template_kwargs

    def body(self, messages: list, tools) -> dict:
        body = {"messages": messages, "max_tokens": self.max_tokens, "temperature": self.temperature,
                "stream": True, **self.extra}
        if self.model:
            body["model"] = self.model
        if tools:
            body["tools"] = tools
        if self.include_usage:
            body["stream_options"] = {"include_usage": True}
        return body


def server_for(conversation_id: str, urls: Sequence[str]) -> str:
    """The server a conversation stays on (session affinity without a router): by a hash of its id."""
    return urls[int(hashlib.blake2b(conversation_id.encode(), digest_size=4).hexdigest(), 16) % len(urls)]


async def _run(urls: Sequence[str], trajectories: Sequence[Trajectory], plan: Plan, req: Request,
               timeout_s: float, limits: Mapping[str, int]) -> Replay:
    import aiohttp

    tools = {t.conversation_id: t.tools for t in trajectories}
    conn = aiohttp.TCPConnector(limit=plan.users, limit_per_host=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30.0, sock_read=timeout_s)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
        async def send(turn, messages, headers):
            url = server_for(headers[SESSION_HEADER], urls)
            return await send_turn(session, url, req.body(messages, tools[turn.conversation_id]), headers, **limits)
        return await replay(trajectories, plan, send)


def run_sessions(urls: str | Sequence[str], trajectories: Sequence[Trajectory], plan: Plan, req: Request, out_dir: Path,
                 timeout_s: float = 600.0, osl_band: tuple[float, float] | None = None,
                 limits: Mapping[str, int] | None = None) -> tuple[dict, list[dict]]:
    """Replay `trajectories` against the servers at `urls` (a conversation stays on one); write
    turns.jsonl; return the result and the inline accuracy of each scored turn. `limits`: how much of
    one answer is read (max_response_bytes, max_event_bytes: harness/untrusted/limits.py)."""
    urls = [base_url(u) for u in ([urls] if isinstance(urls, str) else urls)]
    rep = asyncio.run(_run(urls, trajectories, plan, req, timeout_s, dict(limits or {})))
    rows = metrics.rows_of(rep)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "turns.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    if rep.failed is not None:
        f = rep.failed
        at = server_for(f.conversation_id, urls).removeprefix("http://")
        raise MeasurementError(f"session turn failed: conversation {f.conversation_id!r} turn {f.turn.turn} at {at}: "
                               f"{f.reply.error}; the replay stopped (turns so far in {out_dir / 'turns.jsonl'})")
    t0 = rep.t_start
    window_end = None if rep.t_window_end is None else round(rep.t_window_end - t0, 6)
    scored = inline.score((rec.source_id, rec.repeat, rec.turn.turn, rec.turn.expected, rec.reply.message())
                          for rec in rep.records)
    return {
        "workload": "sessions", "scheduler": SCHEDULER, "session_header": SESSION_HEADER,
        "servers": urls, "plan": asdict(plan), "request": {k: v for k, v in asdict(req).items()},
        "trajectories": {"conversations": len(trajectories), "client_turns": sum(len(t.turns) for t in trajectories),
                         "started": rep.started},
        "metrics": metrics.summarize(rows, window_end, rep.t_end - t0),
        "inline_accuracy": {k: v for k, v in scored.items() if k != "per_turn"},
        "osl": inline.osl_band([r["output_tokens"] or 0 for r in rows if r["error"] is None], osl_band),
        "concurrency": metrics.concurrency(rows),
    }, scored["per_turn"]
