"""One session replay against OpenAI-compatible servers: its turns, metrics, accuracy and files.

Writes `turns.jsonl` (one row per turn: times, token counts, the generated message, whether it
was sent and inside the performance window) and returns the result that goes into result.json.
LoadGen does not model sessions; the result says that perfdag's own scheduler produced it.

A failed turn fails its conversation (as MLCommons' client does): the conversation is named in the
result with its turn, server and error, its scorable turns score 0 in the inline accuracy, and the
result is INVALID (the edge rules call a replay valid only with no missing turn). Each request
takes its row's own fields (model, max tokens, stream, tools) over the run's.
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
from harness.sessions.chat import TurnSender, request_body
from harness.sessions.scheduler import SESSION_HEADER, Plan, Replay, replay
from harness.sessions.trajectories import ClientTurn, Trajectory

SCHEDULER = "perfdag's session scheduler (LoadGen does not model sessions: harness/sessions/scheduler.py)"


@dataclass(frozen=True)
class Request:
    """What every turn's request carries besides its messages (a row's own fields win)."""
    model: str = ""
    max_tokens: int = 1024
    temperature: float = 0.0
    include_usage: bool = True  # stream_options.include_usage: the server's token and cached-token counts
    extra: dict = field(default_factory=dict)  # e.g. seed, chat_template_kwargs

    def run(self, turn: ClientTurn) -> dict:
        """The run's part of `turn`'s request: model, max_tokens, temperature, stream (the row's own
        model, max tokens and stream where it has them)."""
        own = turn.request
        stream = own.get("stream", True)
        doc = {"max_tokens": int(own.get("max_tokens", self.max_tokens)), "temperature": self.temperature,
               "stream": stream, **self.extra}
        model = own.get("model") or self.model
        if model:
            doc["model"] = model
        if stream and self.include_usage:
            doc["stream_options"] = {"include_usage": True}
        return doc


def server_for(conversation_id: str, urls: Sequence[str]) -> str:
    """The server a conversation stays on (session affinity without a router): by a hash of its id."""
    return urls[int(hashlib.blake2b(conversation_id.encode(), digest_size=4).hexdigest(), 16) % len(urls)]


async def _run(urls: Sequence[str], trajectories: Sequence[Trajectory], plan: Plan, req: Request,
               timeout_s: float, limits: Mapping[str, int]) -> Replay:
    tools = {t.conversation_id: t.tools for t in trajectories}
    sender = TurnSender(plan.users, timeout_s, **limits)
    try:
        async def send(turn, messages, headers):
            url = server_for(headers[SESSION_HEADER], urls)
            run = req.run(turn)
            body = request_body(messages, turn.request.get("tools", tools[turn.conversation_id]), run)
            return await sender.send(url, body, headers, run["stream"])
        return await replay(trajectories, plan, send)
    finally:
        sender.close()


def failed_conversations(rep: Replay, urls: Sequence[str]) -> list[dict]:
    """Each failed conversation: its id, the turn that failed, where, why, and how many turns it lost."""
    aborted: dict[str, int] = {}
    for rec in rep.records:
        if not rec.reply.sent:
            aborted[rec.conversation_id] = aborted.get(rec.conversation_id, 0) + 1
    return [{"conversation_id": f.conversation_id, "turn": f.turn.turn, "index": f.turn.index,
             "server": server_for(f.conversation_id, urls).removeprefix("http://"), "error": f.reply.error,
             "turns_not_sent": aborted.get(f.conversation_id, 0)} for f in rep.failed]


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
    failed = failed_conversations(rep, urls)
    if failed and not any(r["error"] is None for r in rows):
        f = failed[0]
        raise MeasurementError(f"session turn failed: conversation {f['conversation_id']!r} turn {f['turn']} at "
                               f"{f['server']}: {f['error']}; no turn of the replay was answered (every one in "
                               f"{out_dir / 'turns.jsonl'})")
    t0 = rep.t_start
    window_end = None if rep.t_window_end is None else round(rep.t_window_end - t0, 6)
    # every turn of a started conversation counts, sent or not: one never answered scores 0
    scored = inline.score((rec.source_id, rec.repeat, rec.turn.turn, rec.turn.expected,
                           rec.reply.message() if rec.reply.error is None else None) for rec in rep.records)
    osl = inline.osl_band([r["output_tokens"] or 0 for r in rows if r["error"] is None], osl_band)
    reasons = ([f"{len(failed)} conversation(s) failed ({', '.join(repr(f['conversation_id']) for f in failed[:5])}"
                f"{', ...' if len(failed) > 5 else ''}): a valid replay has no missing turn"] if failed else []) + \
        (["the mean output length per turn is outside sessions.osl_band"] if osl["ok"] is False else [])
    return {
        "workload": "sessions", "scheduler": SCHEDULER, "session_header": SESSION_HEADER,
        "servers": urls, "plan": asdict(plan), "request": {k: v for k, v in asdict(req).items()},
        "valid": not reasons, "invalid_reasons": reasons, "failed_conversations": failed,
        "trajectories": {"conversations": len(trajectories), "client_turns": sum(len(t.turns) for t in trajectories),
                         "started": rep.started},
        "metrics": metrics.summarize(rows, window_end, rep.t_end - t0),
        "measured": metrics.measured(rows),  # the window's turns as a LoadGen run's client-side numbers
        "inline_accuracy": {k: v for k, v in scored.items() if k != "per_turn"},
        "osl": osl,
        "concurrency": metrics.concurrency(rows),
    }, scored["per_turn"]
