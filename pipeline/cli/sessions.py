"""`python -m pipeline sessions`: replay agentic sessions (RunSessions) against a server that runs
already, or the one the params file builds.

With `--url` it measures the running server as `bench` does (ExternalServers: no model stage); the
flags are parameters (`--trajectories` is sessions.trajectories_file, `--users` sessions.users), so the
same replay is a params file with those keys.
"""
from __future__ import annotations

import json

from harness.errors import PerfdagError
from pipeline.cli.bench import add_server_flags, server_items
from pipeline.cli.flow import build_flow
from tasks import lifecycle
from tasks.run_sessions import RunSessions
from tasks.settings import DEFAULT_PARAMS


def add_parser(sub) -> None:
    sp = sub.add_parser("sessions", help="replay agentic sessions against a running server (--url) or the params' one",
                        description="Replays multi-turn agentic trajectories with perfdag's session scheduler "
                                    "(RunSessions): with --url against a server that runs already, no model "
                                    "stages. Exit 0: VALID; 10: INVALID.")
    add_server_flags(sp)
    sp.add_argument("--trajectories", default="", metavar="FILE", help="the trajectory JSONL (sessions.trajectories_file)")
    sp.add_argument("--users", type=int, default=0, metavar="N", help="concurrent users (sessions.users)")
    sp.add_argument("--params-file", default=DEFAULT_PARAMS)
    sp.add_argument("--overrides", default="", help='"section.key=value,..." applied last')
    sp.add_argument("--rerun-from", default="", help="replay again (RunSessions) instead of reusing a replay")
    sp.add_argument("--verbose", action="store_true", help="show third-party warnings and chatter")


def overrides(args) -> str:
    items = server_items(args) if args.url else []
    if args.trajectories:
        items.append(f"sessions.trajectories_file={json.dumps(args.trajectories)}")
    if args.users:
        items.append(f"sessions.users={args.users}")
    return ",".join(items + ([args.overrides] if args.overrides.strip() else []))


def run(args) -> int:
    try:  # bad flags and parameters: one line each, nothing run
        task = RunSessions(params_file=args.params_file, overrides=overrides(args), endpoint=bool(args.url),
                           rerun_from=args.rerun_from, verbose=args.verbose)
    except PerfdagError as e:
        print(e)
        return 2
    if build_flow(task, "the replay was not completed", detailed=True):
        return 1
    doc = json.loads((task.artifact_dir / "result.json").read_text())
    lifecycle.note_result(task.task_id, valid=bool(doc.get("valid")), summary=summary(doc, task), persist=False)
    return 0


def summary(result: dict, task) -> str:
    """The replay's verdict and headline numbers, whose they are (perfdag's session scheduler)."""
    m, w = result["metrics"], result["metrics"]["window"]
    acc = (result.get("inline_accuracy") or {}).get("score")
    return "\n".join([
        f"perfdag sessions: {'VALID' if result.get('valid') else 'INVALID'} (perfdag's replay; LoadGen does not "
        "model sessions)",
        f"  turns      {m['turns']:,} sent, {w['turns']:,} in the window; {len(result.get('failed_conversations') or []):,} "
        "conversation(s) failed",
        f"  throughput {w.get('tokens_per_s') or 0:,.1f} tokens/s in the window",
        f"  inline accuracy {acc if acc is not None else '-'}",
        f"  report     {task.artifact_dir / 'report.md'}"])
