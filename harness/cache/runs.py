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

from pydantic import Field

from harness.cache import runindex
from harness.untrusted import jsonio
from harness.untrusted import records as untrusted
from harness.untrusted.records import RunId, StrictRecord, Text

ENV = "PERFDAG_RUN_ID"
RUNS = "runs"  # <root>/runs/<run id>/run.json
AGED = ("failed", "corrupt")  # runs/<id>/failed/*, runs/<id>/corrupt/*: kept files gc ages out
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
        return jsonio.loads(run_file(root).read_bytes())
    except (OSError, jsonio.NotJson):
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
           code: dict | None = None, observation: str | None = None) -> None:
    """Adds a stage to this run's run.json; 'built' overrides an earlier 'reused', never the reverse.
    An observing stage also records which observation of its key the run made or read."""
    def change(doc):
        entry_id = f"{stage}/{key[:16]}"
        _done_building(doc, entry_id)
        old = doc["stages"].get(entry_id)
        if old and old["status"] == "built" and status == "reused":
            return False
        doc["stages"][entry_id] = {"stage": stage, "key": key, "status": status, "wall_seconds": wall_seconds,
                                   "path": f"{stage}/{key[:16]}", "code": code or {},
                                   **({"observation": observation} if observation else {})}
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
    """A stage that ran as a Slurm job (tasks/slurm/submit.py): its job id, log, state; updated in place.
    A job is its id and the stage's key: the steps of one allocation share an id (`<job>/<stage>`), and
    a search measures one step per probe."""
    def change(doc):
        jobs = doc.setdefault("slurm_jobs", [])
        for i, old in enumerate(jobs):
            if old.get("job_id") == entry["job_id"] and old.get("key") == entry.get("key"):
                jobs[i] = entry
                return
        jobs.append(entry)
    _update(root, change)


def _process_is(pid: int, started_by: float) -> bool:
    """`pid` runs and was started no later than `started_by` (so it is not a recycled pid)."""
    import psutil
    try:
        return psutil.Process(pid).create_time() <= started_by + 1.0
    except (psutil.Error, ValueError, OverflowError):
        return False


def run_is_live(run_id: str) -> bool:
    """A run id is '<utc start>-<pid>' (start_new_run): live while that process still runs."""
    stamp, _, pid = run_id.rpartition("-")
    try:
        started = datetime.strptime(stamp, "%Y%m%dT%H%M%S%fZ").replace(tzinfo=timezone.utc)
        return _process_is(int(pid), started.timestamp())
    except ValueError:
        return False


# --- runs -------------------------------------------------------------------------------------
class _StageRef(StrictRecord):
    stage: Text
    key: Text
    observation: RunId | None = None  # an observing stage's: which observation of the key (observations.py)


class RunRecord(StrictRecord):
    """What gc reads back of runs/<id>/run.json, which this module writes (untrusted: checked)."""
    run_id: RunId | None = None
    started_at: str | None = None
    updated_at: str | None = None
    stages: dict[str, _StageRef] = Field(default_factory=dict)


class _StageDone(_StageRef):
    status: Text | None = None  # built, reused


class _Failure(StrictRecord):
    stage: Text
    key: Text
    error: str | None = None


class _Relaunch(StrictRecord):
    why: str | None = None
    at: str | None = None


class _Verdict(StrictRecord):
    valid: bool = True
    accuracy: bool = True
    regression: bool = False


class RunOutcomeRecord(RunRecord):
    """A run record with what it ended in (the results site's Runs page): stages built or reused, those
    that failed, builds whose process died, corrupt artifacts moved aside, relaunches, verdicts, jobs."""
    stages: dict[str, _StageDone] = Field(default_factory=dict)
    failed: dict[str, _Failure] = Field(default_factory=dict)
    building: dict[str, _StageRef] = Field(default_factory=dict)
    corrupt: dict[str, _StageRef] = Field(default_factory=dict)
    server_relaunches: list[_Relaunch] = Field(default_factory=list)
    verdicts: dict[str, _Verdict] = Field(default_factory=dict)
    slurm_jobs: list[dict] = Field(default_factory=list)


def confined(path: Path, root: Path) -> bool:
    """`path` (under the resolved `root`) reaches its target through no link."""
    try:
        return path.resolve() == root / path.relative_to(root)
    except (OSError, ValueError, RuntimeError):
        return False


def read_runs(root: Path, warnings: list[str] | None = None, seen: dict[str, int] | None = None,
              indexed: dict[str, dict] | None = None) -> list[dict]:
    """[{run_id, updated (datetime), ids: {"Stage/key16"}, observations: {"Stage/key16/<observation id>"},
    file, mtime_ns}] for every readable run.json;
    with `seen` ({file: mtime_ns} of an earlier read), only the run records written since;
    with `indexed` (runs/.index.jsonl's lines, harness/cache/runindex.py; {}: none), a record whose stats are
    still the ones its line recorded is taken from the line instead of parsed, and every record also says
    what its line would be (`name`, `now`: its stats; `aged`: its directory holds failed/ or corrupt/)."""
    out = []
    for f in sorted((root / RUNS).glob("*/run.json")):
        now = runindex.stamps(f.parent) if indexed is not None else None
        if indexed and (hit := runindex.lookup(indexed, f.parent.name, now)) is not None:
            out.append({**hit, "file": str(f), "mtime_ns": now[1][2], "name": f.parent.name, "now": now})
            continue
        try:
            st = f.stat()
            if seen is not None and seen.get(str(f)) == st.st_mtime_ns:
                continue
            mtime = st.st_mtime
        except OSError as e:
            if warnings is not None:
                warnings.append(f"unreadable run record {f}: {e}")
            continue
        doc = untrusted.read(RunRecord, f, inside=root)
        if doc is None:  # gone meanwhile, or malformed (reported)
            continue
        updated = (parse_time(doc.get("updated_at")) or parse_time(doc.get("started_at"))
                   or datetime.fromtimestamp(mtime, timezone.utc))
        ids = {f"{ent['stage']}/{ent['key'][:16]}" for ent in (doc.get("stages") or {}).values()}
        obs = {f"{ent['stage']}/{ent['key'][:16]}/{ent['observation']}" for ent in (doc.get("stages") or {}).values()
               if ent.get("observation")}
        out.append({"run_id": doc.get("run_id") or f.parent.name, "updated": updated, "ids": ids, "observations": obs,
                    "file": str(f), "mtime_ns": st.st_mtime_ns})
        if indexed is not None:  # taken after the stats: a directory changed meanwhile has moved them on
            out[-1].update(name=f.parent.name, now=now, aged=any(
                os.path.lexists(f.parent / sub) for sub in AGED))
    return out


def parse_time(s) -> datetime | None:
    """An ISO time as run records and manifests write it (naive means UTC); None when it is not one."""
    if not isinstance(s, str) or not s:
        return None
    try:
        t = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)
