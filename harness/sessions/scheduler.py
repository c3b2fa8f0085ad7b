"""perfdag's session scheduler: conversations replayed by concurrent users, turn after turn.

LoadGen issues independent queries; it has no notion of a conversation, so sessions are scheduled
here, following MLCommons' agentic client (mlcommons/endpoints at ea33275, the agentic strategy):
- `users` users, each replaying one trajectory at a time; when it ends the user takes the next one
  (trajectory k is conversation k mod n, pass k // n + 1; a later pass's id ends in `__repeat_<p>`),
  until `trajectories` have been started (unset: one pass over the dataset).
- one turn in flight per conversation: a turn is sent when its predecessor's reply has ended and
  its own `delay_seconds` (the tool's run time) has passed, with the conversation so far as
  recorded, salted (salts.py) unless salting is off, and `X-Session-ID: <conversation id>` (and
  `X-SMG-Routing-Key`, the same id: session_headers).
- the performance window ends when the first user finishes its last trajectory (no trajectory
  left to start): turns sent before stay measured even if they end later, turns sent after are
  not. With `drain` the started trajectories are finished (for accuracy); without it no turn is
  sent after the window ends, and those in flight are awaited.
A failed turn fails its conversation, as MLCommons' client does (the agentic strategy's
`_abort_remaining_turns`): the conversation's remaining turns are recorded as never sent
(`TurnAbortedByPriorFailure`), its user takes the next trajectory, and the other conversations go on.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Sequence

from harness.errors import InputError
from harness.sessions.chat import ChatReply
from harness.sessions.salts import salted
from harness.sessions.trajectories import ClientTurn, Trajectory

SESSION_HEADER = "X-Session-ID"  # vllm-router's consistent_hash policy keys on it (its first choice)
ROUTING_KEY_HEADER = "X-SMG-Routing-Key"  # SGLang's routers (sglang-router, smg): the manual policy's key


def session_headers(conversation_id: str) -> dict:
    """What every turn of a conversation carries so that a router's session policy keeps it on one worker
    (the salts, in the system prompt, serve the cache-aware policies, which route on the text)."""
    return {SESSION_HEADER: conversation_id, ROUTING_KEY_HEADER: conversation_id}
Send = Callable[[ClientTurn, list, dict], Awaitable[ChatReply]]


@dataclass(frozen=True)
class Plan:
    users: int = 1
    trajectories: int | None = None  # trajectories to start; None: one pass over the dataset
    salt: bool = True
    tool_delays: bool = True
    drain: bool = True


@dataclass
class TurnRecord:
    user: int
    conversation_id: str  # as sent in the session header: the dataset's id, `__repeat_<p>` for pass p > 1
    source_id: str
    repeat: int
    turn: ClientTurn
    reply: ChatReply
    in_window: bool = True


@dataclass
class Replay:
    records: list[TurnRecord] = field(default_factory=list)  # every turn, sent or aborted
    t_start: float = 0.0
    t_window_end: float | None = None  # the first user's completion
    t_end: float = 0.0
    started: int = 0
    failed: list[TurnRecord] = field(default_factory=list)  # the turn that failed each failed conversation

    @property
    def sent(self) -> list[TurnRecord]:
        return [r for r in self.records if r.reply.sent]


def check_plan(trajectories: Sequence[Trajectory], plan: Plan) -> None:
    """Refuse what cannot be replayed before anything is sent."""
    if not trajectories:
        raise InputError("no trajectories to replay; give a trajectory file with at least one conversation")
    if plan.users < 1:
        raise InputError(f"sessions.users={plan.users}: give at least 1 user")
    if plan.trajectories is not None and plan.trajectories < 1:
        raise InputError(f"sessions.trajectories={plan.trajectories}: give at least 1 (or leave it unset: one pass)")
    if plan.salt:
        bare = [t.conversation_id for t in trajectories if not t.has_system]
        if bare:
            raise InputError(f"salting needs a system prompt in every conversation; {len(bare)} have none "
                             f"(first: {bare[0]!r}); give them a 'system' field or set sessions.salt: false")


async def replay(trajectories: Sequence[Trajectory], plan: Plan, send: Send) -> Replay:
    check_plan(trajectories, plan)
    budget = plan.trajectories if plan.trajectories is not None else len(trajectories)
    out = Replay(t_start=time.monotonic())
    stop = asyncio.Event()

    def next_instance():
        if stop.is_set() or out.started >= budget:
            return None
        k, out.started = out.started, out.started + 1
        source, repeat = trajectories[k % len(trajectories)], k // len(trajectories) + 1
        cid = source.conversation_id if repeat == 1 else f"{source.conversation_id}__repeat_{repeat}"
        return source, repeat, cid

    async def user(u: int) -> None:
        while (inst := next_instance()) is not None:
            source, repeat, cid = inst
            for turn in source.turns:
                if plan.tool_delays and turn.delay_s > 0:
                    try:  # the tool's run time; cut short only by a stop
                        await asyncio.wait_for(stop.wait(), turn.delay_s)
                    except asyncio.TimeoutError:
                        pass
                if stop.is_set():
                    return
                msgs = salted(turn.messages, source.conversation_id, repeat) if plan.salt else list(turn.messages)
                reply = await send(turn, msgs, session_headers(cid))
                rec = TurnRecord(u, cid, source.conversation_id, repeat, turn, reply)
                out.records.append(rec)
                if reply.error is not None:  # the conversation fails; its user goes on with the next one
                    out.failed.append(rec)
                    why = f"TurnAbortedByPriorFailure: turn {turn.turn} failed ({reply.error})"
                    out.records += [TurnRecord(u, cid, source.conversation_id, repeat, rest,
                                               ChatReply(t_sent=reply.t_end, t_end=reply.t_end, error=why, sent=False))
                                    for rest in source.turns[turn.index + 1:]]
                    break
            if out.started >= budget and out.t_window_end is None:  # the first user is done
                out.t_window_end = time.monotonic()
                if not plan.drain:
                    stop.set()

    await asyncio.gather(*(user(u) for u in range(min(plan.users, budget))))
    out.t_end = time.monotonic()
    end = out.t_window_end if out.t_window_end is not None else out.t_end
    for rec in out.records:
        rec.in_window = rec.reply.sent and rec.reply.t_sent < end
    return out
