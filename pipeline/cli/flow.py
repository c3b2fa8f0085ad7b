"""Running the tasks of a command (bench, sessions, submission, search, frontier): luigi's local scheduler,
one worker, and a plain line when they did not finish (their verdicts' exit code is set at exit, with
their summaries)."""
from __future__ import annotations

import luigi


def build_flow(tasks, unfinished: str, detailed: bool = False) -> int:
    """Builds `tasks` (one task or a list); 1 and a line saying `unfinished` where any is not done.
    `detailed`: luigi's detailed summary, and its status named in that line."""
    tasks = tasks if isinstance(tasks, list) else [tasks]
    result = luigi.build(tasks, local_scheduler=True, detailed_summary=detailed, workers=1)
    if not all(t.is_done() for t in tasks):
        print(f"perfdag: {unfinished}" + (f" ({result.status.name}); see the log above" if detailed else ""))
        return 1
    return 0
