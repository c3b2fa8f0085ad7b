"""Running one flow task from a command (search, frontier): luigi's local scheduler, one worker, and a
plain line when it did not finish (its verdict's exit code is set at exit, with its summary)."""
from __future__ import annotations

import luigi


def build_flow(task, unfinished: str) -> int:
    luigi.build([task], local_scheduler=True, detailed_summary=False, workers=1)
    if not task.is_done():
        print(f"perfdag: {unfinished}")
        return 1
    return 0
