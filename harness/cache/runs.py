"""artifacts/runs/<utc-time>-<pid>/run.json: what one invocation touched, built or reused.

The run id lives in the environment so luigi's forked worker processes write to the same run.
On a read-only artifacts root the record is skipped with one warning: a fully cached run still
works there.
"""
from __future__ import annotations

import json
import logging
import os
from datetime import datetime, timezone
from pathlib import Path

ENV = "PERFDAG_RUN_ID"
_warned = {"readonly": False}


def start_new_run() -> str:
    run_id = f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S%fZ}-{os.getpid()}"
    os.environ[ENV] = run_id
    return run_id


def current_run_id() -> str:
    return os.environ.get(ENV) or start_new_run()


def run_file(root: Path) -> Path:
    return root / "runs" / current_run_id() / "run.json"


def read(root: Path) -> dict | None:
    try:
        return json.loads(run_file(root).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _update(root: Path, change) -> None:
    from filelock import FileLock

    f = run_file(root)
    try:
        f.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(f) + ".lock"):
            doc = json.loads(f.read_text()) if f.exists() else {
                "run_id": current_run_id(), "started_at": datetime.now(timezone.utc).isoformat(), "stages": {}}
            if change(doc) is False:
                return
            doc["updated_at"] = datetime.now(timezone.utc).isoformat()
            tmp = f.with_name(f".run.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(doc, indent=2))
            os.replace(tmp, f)
    except OSError as e:
        if not _warned["readonly"]:
            _warned["readonly"] = True
            logging.getLogger("perfdag").warning("run record not written (%s): %s", f, e.strerror or e)


def record_building(root: Path, stage: str, key: str) -> None:
    """A stage this process starts to build. It leaves `building` when it is recorded built, reused or
    failed; one still there names a build whose process died (a native library's abort, SIGKILL)."""
    def change(doc):
        doc.setdefault("building", {})[f"{stage}/{key[:16]}"] = {
            "stage": stage, "key": key, "pid": os.getpid(), "since": datetime.now(timezone.utc).isoformat()}
    _update(root, change)


def _done_building(doc: dict, entry_id: str) -> None:
    building = doc.get("building")
    if isinstance(building, dict):
        building.pop(entry_id, None)
        if not building:
            doc.pop("building")


def record(root: Path, stage: str, key: str, status: str, wall_seconds: float | None = None,
           code: dict | None = None) -> None:
    """Adds a stage to this run's run.json; 'built' overrides an earlier 'reused', never the reverse."""
    def change(doc):
        entry_id = f"{stage}/{key[:16]}"
        _done_building(doc, entry_id)
        old = doc["stages"].get(entry_id)
        if old and old["status"] == "built" and status == "reused":
            return False
        doc["stages"][entry_id] = {"stage": stage, "key": key, "status": status, "wall_seconds": wall_seconds,
                                   "path": f"{stage}/{key[:16]}", "code": code or {}}
    _update(root, change)


def record_verdict(root: Path, task_id: str, verdict: dict) -> None:
    """A top-level result (FullRun, Sweep): what the exit code of this invocation reports."""
    def change(doc):
        doc.setdefault("verdicts", {})[task_id] = verdict
    _update(root, change)


def record_failure(root: Path, stage: str, key: str, error: str, kept: str | None) -> None:
    """The stage that failed, its error and where its files were kept (runs/<id>/failed/...)."""
    def change(doc):
        entry = {"stage": stage, "key": key, "error": error, "kept": kept,
                 "at": datetime.now(timezone.utc).isoformat()}
        _done_building(doc, f"{stage}/{key[:16]}")
        doc.setdefault("failed", {})[f"{stage}/{key[:16]}"] = entry
    _update(root, change)


def record_corrupt(root: Path, stage: str, key: str, problems: list[str], kept: str) -> None:
    """A published artifact found corrupt and moved aside (runs/<id>/corrupt/...) to be rebuilt."""
    def change(doc):
        doc.setdefault("corrupt", {})[f"{stage}/{key[:16]}"] = {
            "stage": stage, "key": key, "problems": problems[:50], "kept": kept,
            "at": datetime.now(timezone.utc).isoformat()}
    _update(root, change)


def record_relaunch(root: Path, entry: dict) -> None:
    """Servers that crashed mid-measurement and were relaunched (tasks/measuring.py): which, where."""
    def change(doc):
        doc.setdefault("server_relaunches", []).append(
            {**entry, "at": datetime.now(timezone.utc).isoformat()})
    _update(root, change)


def record_job(root: Path, entry: dict) -> None:
    """A stage that ran as a Slurm job (tasks/slurm/submit.py): its job id, log, state; updated in place."""
    def change(doc):
        jobs = doc.setdefault("slurm_jobs", [])
        for i, old in enumerate(jobs):
            if old.get("job_id") == entry["job_id"]:
                jobs[i] = entry
                return
        jobs.append(entry)
    _update(root, change)
