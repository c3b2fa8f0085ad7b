"""RunSessions: agentic trajectories replayed against the servers by perfdag's own scheduler.

LoadGen has no sessions, so this stage does not run it: harness/sessions/ sends each conversation's
turns in order, one in flight per conversation, and measures per turn and inside the performance
window. The trajectory file enters the key by content; the servers by their stage's key.
"""
from __future__ import annotations

import json
from pathlib import Path

from harness.cache.hashing import file_sha256
from harness.config.sessions import SessionsSection
from harness.errors import InputError
from harness.model.tokenizer import load_tokenizer
from harness.serving.endpoints import endpoints_and_models, protocol_of
from harness.serving.layout import front_door
from harness.sessions.context import overflows
from harness.sessions.trajectories import read_trajectories
from tasks.base import log
from tasks.measuring import MeasuringStage, servers_of
from tasks.registry import register

SESSION_CODE = ("harness.sessions", "harness.model.tokenizer", "harness.sessions.trajectories",
                "harness.sessions.context",
                "harness.sessions.salts", "harness.sessions.chat",
                "harness.sessions.scheduler", "harness.sessions.metrics", "harness.sessions.inline",
                "harness.sessions.workload", "harness.serving.openai.sse", "harness.serving.openai.toolcalls",
                "harness.serving.openai.client", "harness.serving.layout",  # a layout's router only
                "harness.serving.openai.chat",  # the chat core's encoding, Answer
                "harness.loadgen.cores.http_core", "harness.loadgen.cores.http_pool",  # its stream scan and pool
                "harness.loadgen.cores.base", "harness.loadgen.cores.aioloop", "harness.loadgen.chunks",
                "harness.loadgen.messages",
                "harness.loadgen.early_stopping", "harness.loadgen.results", "harness.loadgen.verdict",  # metrics
                "harness.reports.sessions", "harness.host.state")


def trajectories_path(params) -> Path:
    path = params.sessions.trajectories_file
    if not path:
        raise InputError("sessions.trajectories_file is not set; give the path of an agentic trajectory JSONL")
    return Path(path)


@register
class RunSessions(MeasuringStage):
    stage = "RunSessions"
    # Every sessions.* setting but the file's path: the file enters by its content (key_inputs).
    reads = tuple(f"sessions.{k}" for k in SessionsSection.model_fields if k != "trajectories_file")

    tokenizes = False  # the recorded text is sent as it is; a tokenizer only checks the context

    def upstream(self):  # a running server's (endpoint: no model stages), or the servers perfdag launches
        return {"servers": servers_of(self)}

    def key_inputs(self):  # unset: a key all the same (status lists every stage); building it says what is missing
        path = self.params.sessions.trajectories_file
        return {**super().key_inputs(), "trajectories_sha256": file_sha256(path) if path else None}

    def code(self):
        return SESSION_CODE

    def tools(self):
        return {}

    def context_warnings(self, trajectories) -> list[str]:
        """Turns that cannot fit the served model's context, said before anything is sent."""
        s, p = self.params.sessions, self.params
        context = s.context_tokens or (None if p.openai.endpoints else p.build.max_seq_len)
        if context is None:
            log.info("RunSessions: the servers' context is unknown (set sessions.context_tokens to check turns "
                     "against it before sending)")
            return []
        count = None
        if p.dataset.tokenizer:
            tok = load_tokenizer(p.dataset.tokenizer)
            count = (lambda text: len(tok.encode(text, add_special_tokens=False)))
        out = overflows(trajectories, context, s.max_tokens, count)
        for line in out:
            log.warning("RunSessions: %s", line)
        return out

    def build(self, out_dir: Path) -> dict:
        # numpy, through the sessions' metrics: imported when the stage builds, never on the cached no-op
        from harness.sessions.scheduler import Plan  # the chat core, numpy with it
        from harness.sessions.workload import Request, run_sessions

        s = self.params.sessions
        servers = self.upstream()["servers"].measured_servers()
        if protocol_of(servers) != "openai-http":
            raise InputError("sessions send chat completions: set build.backend: openai (an OpenAI-compatible server)")
        urls, models = endpoints_and_models(front_door(servers))  # a layout's router, or every server
        trajectories = read_trajectories(trajectories_path(self.params))
        too_long = self.context_warnings(trajectories)
        plan = Plan(users=s.users, trajectories=s.trajectories, salt=s.salt, tool_delays=s.tool_delays, drain=s.drain)
        req = Request(model=models[0] if models else "", max_tokens=s.max_tokens, temperature=s.temperature,
                      extra=dict(s.request_extra))
        h = self.params.harness  # how much of an answer is read: no part of the key (tasks/base.py UNKEYED)
        result, per_turn = run_sessions(urls, trajectories, plan, req, out_dir, timeout_s=s.turn_timeout_s,
                                        osl_band=tuple(s.osl_band) if s.osl_band else None,
                                        limits={"max_response_bytes": h.max_response_bytes,
                                                "max_event_bytes": h.max_event_bytes})
        result["context_warnings"] = too_long
        (out_dir / "result.json").write_text(json.dumps(result, indent=1))
        (out_dir / "inline_accuracy.json").write_text(json.dumps(per_turn, indent=1))
        m = result["metrics"]
        log.info("RunSessions: %s (perfdag's replay): %d turns, %d in the window, %.1f tokens/s, inline accuracy %s",
                 "VALID" if result["valid"] else "INVALID", m["turns"], m["window"]["turns"],
                 m["window"]["tokens_per_s"] or 0, result["inline_accuracy"]["score"])
        for f in result["failed_conversations"]:
            log.warning("RunSessions: conversation %r failed at turn %d (%s): %s; %d later turn(s) not sent, "
                        "scored 0", f["conversation_id"], f["turn"], f["server"], f["error"], f["turns_not_sent"])
        return {"result": {k: v for k, v in result.items() if k != "concurrency"}}

    def after_measurement(self, out_dir: Path) -> None:
        """report.md and report.json (what history and compare read) once result.json holds the host's state too."""
        from harness.reports.sessions import write_report  # numpy, as in build
        rows = [json.loads(line) for line in (out_dir / "turns.jsonl").read_text().splitlines()]
        write_report(out_dir, json.loads((out_dir / "result.json").read_text()), rows, self.building.get("observation"))
