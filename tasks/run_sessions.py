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
from harness.serving.endpoints import endpoints_and_models, protocol_of
from harness.sessions.scheduler import Plan
from harness.sessions.trajectories import read_trajectories
from tasks.base import log
from tasks.launch_servers import LaunchServers
from tasks.measuring import MeasuringStage
from tasks.registry import register

SESSION_CODE = ("harness.sessions", "harness.sessions.trajectories", "harness.sessions.salts", "harness.sessions.chat",
                "harness.sessions.scheduler", "harness.sessions.metrics", "harness.sessions.inline",
                "harness.sessions.workload", "harness.serving.openai.sse", "harness.serving.openai.toolcalls",
                "harness.serving.openai.client",
                "harness.reports.sessions")


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

    def upstream(self):
        return {"servers": self.clone(LaunchServers)}

    def key_inputs(self):  # unset: a key all the same (status lists every stage); building it says what is missing
        path = self.params.sessions.trajectories_file
        return {**super().key_inputs(), "trajectories_sha256": file_sha256(path) if path else None}

    def code(self):
        return SESSION_CODE

    def tools(self):
        return {}

    def build(self, out_dir: Path) -> dict:
        # numpy, through the sessions' metrics: imported when the stage builds, never on the cached no-op
        from harness.reports.sessions import write_report
        from harness.sessions.workload import Request, run_sessions

        s = self.params.sessions
        servers = self.upstream()["servers"].servers()
        if protocol_of(servers) != "openai-http":
            raise InputError("sessions send chat completions: set build.backend: openai (an OpenAI-compatible server)")
        urls, models = endpoints_and_models(servers)
        trajectories = read_trajectories(trajectories_path(self.params))
        plan = Plan(users=s.users, trajectories=s.trajectories, salt=s.salt, tool_delays=s.tool_delays, drain=s.drain)
        req = Request(model=models[0] if models else "", max_tokens=s.max_tokens, temperature=s.temperature,
                      extra=dict(s.request_extra))
        h = self.params.harness  # how much of an answer is read: no part of the key (tasks/base.py UNKEYED)
        result, per_turn = run_sessions(urls, trajectories, plan, req, out_dir, timeout_s=s.turn_timeout_s,
                                        osl_band=tuple(s.osl_band) if s.osl_band else None,
                                        limits={"max_response_bytes": h.max_response_bytes,
                                                "max_event_bytes": h.max_event_bytes})
        (out_dir / "result.json").write_text(json.dumps(result, indent=1))
        (out_dir / "inline_accuracy.json").write_text(json.dumps(per_turn, indent=1))
        rows = [json.loads(line) for line in (out_dir / "turns.jsonl").read_text().splitlines()]
        write_report(out_dir, result, rows)
        m = result["metrics"]
        log.info("RunSessions: %d turns, %d in the window, %.1f tokens/s, inline accuracy %s", m["turns"],
                 m["window"]["turns"], m["window"]["tokens_per_s"] or 0, result["inline_accuracy"]["score"])
        return {"result": {k: v for k, v in result.items() if k != "concurrency"}}
