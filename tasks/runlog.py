"""artifacts/runs/<utc-time>-<pid>/run.json: what one invocation touched, built or reused.

The run id lives in the environment so luigi's forked worker processes write to the same run.
"""
from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

from filelock import FileLock

ENV = "PERFDAG_RUN_ID"


def start_new_run() -> str:
    run_id = f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S%fZ}-{os.getpid()}"
    os.environ[ENV] = run_id
    return run_id


def current_run_id() -> str:
    return os.environ.get(ENV) or start_new_run()


def run_file(root: Path) -> Path:
    return root / "runs" / current_run_id() / "run.json"


def record(root: Path, stage: str, key: str, status: str, wall_seconds: float | None = None,
           path: str | None = None) -> None:
    """Adds a stage to this run's run.json; 'built' overrides an earlier 'reused', never the reverse."""
    f = run_file(root)
    f.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(f) + ".lock"):
        doc = json.loads(f.read_text()) if f.exists() else {
            "run_id": current_run_id(), "started_at": datetime.now(timezone.utc).isoformat(), "stages": {}}
        entry_id = f"{stage}/{key[:16]}"
        old = doc["stages"].get(entry_id)
        if old and old["status"] == "built" and status == "reused":
            return
        doc["stages"][entry_id] = {"stage": stage, "key": key, "status": status,
                                   "wall_seconds": wall_seconds, "path": path}
        doc["updated_at"] = datetime.now(timezone.utc).isoformat()
        tmp = f.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=2))
        os.replace(tmp, f)
