"""A stage's build as a Slurm job: the luigi worker submits, waits, streams the log; the job builds.

Where params set a `slurm` section and list the stage, StageTask.run() comes here. The job runs
`tasks.slurm.entry.main(<Stage>, <params>)` from this checkout with this interpreter: the same
stage, same params, same run id, against the same artifacts root, so it builds in the temp dir and
publishes under the same per-key lock and atomic rename as a local build would, and its key cannot
depend on where it ran. The worker holds no lock while it waits (the job takes it). A job killed
mid-build publishes nothing; its temp dir is cleared by the next builder of that key.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import sys
import time
from typing import TYPE_CHECKING

from harness.cache import runs as runlog
from harness.config import ENV_FLAGS
from harness.slurm import JobError, JobSpec, SlurmJob, container_of, submit
from tasks.settings import REPO_ROOT, params_path

if TYPE_CHECKING:
    from tasks.base import StageTask

IN_JOB = "PERFDAG_SLURM_STAGE"  # set inside a job to the "<Stage>/<key>" it builds: that one runs here
IN_POINT = "PERFDAG_SLURM_POINT"  # set in a Sweep's array task: the whole point runs on that node, no jobs
PASS_ENV = (*ENV_FLAGS, "PERFDAG_VERBOSE", "PERFDAG_VERIFY")  # shape params or checks; Slurm may not export all
_active: dict[str, SlurmJob] = {}
log = logging.getLogger("perfdag")
# What the job runs: the in-job entry, which registers every stage first.
_ENTRY = "import sys; from tasks.slurm.entry import main; sys.exit(main(sys.argv[1:]))"


def submits(task: "StageTask") -> bool:
    s = task.params.slurm
    return (s is not None and task.stage in s.stages and not os.environ.get(IN_POINT)
            and not runs_here(task))


def runs_here(task: "StageTask") -> bool:
    """This process is the job (or step) submitted for this very stage."""
    return os.environ.get(IN_JOB) == f"{task.stage}/{task.key}"


def job_env(task: "StageTask") -> dict[str, str]:
    """What a job or step running `task` needs from here (Slurm may not export all of it)."""
    return {"PYTHONPATH": str(REPO_ROOT), "PERFDAG_ARTIFACTS": str(task.store.root),
            runlog.ENV: runlog.current_run_id(), IN_JOB: f"{task.stage}/{task.key}",
            **{k: os.environ[k] for k in PASS_ENV if k in os.environ}}


def job_command(task: "StageTask") -> list[str]:
    """The interpreter running `main(<Stage>, <params>)` from this checkout."""
    params = task.to_str_params()
    params["params_file"] = str(params_path(task.params_file).resolve())  # the job's cwd is the checkout
    s = task.params.slurm  # in a container: the image's (the bundle's) python3
    python = "python3" if s.container_image or s.container_bundle else sys.executable
    return [python, "-c", _ENTRY, task.stage, json.dumps(params, sort_keys=True)]


def job_spec(task: "StageTask", *, name: str = "", gpus: int | None = None) -> JobSpec:
    s = task.params.slurm
    root, key16 = task.store.root, task.key[:16]
    jobs_dir = root / "runs" / runlog.current_run_id() / "slurm"
    return JobSpec(name=name or f"perfdag-{task.stage}-{key16}", log=jobs_dir / f"{task.stage}-{key16}-%j.log",
                   command=job_command(task), workdir=REPO_ROOT, env=job_env(task), partition=s.partition,
                   account=s.account, gpus=s.gpus_for(task.stage) if gpus is None else gpus, cpus=s.cpus, mem=s.mem,
                   time_limit=str(s.time_limit_min) if s.time_limit_min else "", extra_args=tuple(s.extra_args),
                   container=container_of(s, (root, REPO_ROOT), REPO_ROOT))


def run_as_job(task: "StageTask") -> None:
    spec = job_spec(task)
    spec.log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    job = submit(spec, spec.log.parent / f"{task.stage}-{task.key[:16]}.sbatch")
    log_path = job.log
    log.info("%s %s: Slurm job %s submitted; log %s", task.stage, task.key[:16], job.job_id, log_path)
    entry = {"stage": task.stage, "key": task.key, "job_id": job.job_id, "log": str(log_path),
             "script": str(job.script), "state": "SUBMITTED"}
    runlog.record_job(task.store.root, entry)
    if not _active:  # registered when a job exists (importing perfdag changes no global state)
        atexit.unregister(_cancel_leftovers)
        atexit.register(_cancel_leftovers)
    _active[job.job_id] = job
    info: dict = {}
    try:
        info = job.wait(poll_s=task.params.slurm.poll_s,
                        on_line=lambda line: log.info("  [job %s] %s", job.job_id, line),
                        on_state=lambda state, i: log.info("%s %s: job %s %s%s", task.stage, task.key[:16],
                                                           job.job_id, state, _reason(i)))
    except JobError as e:
        runlog.record_job(task.store.root, {**entry, "state": "FAILED", "error": str(e)})
        raise JobError(f"{task.stage} {task.key[:16]}: {e}") from None
    except BaseException:  # Ctrl-C, SIGTERM (lifecycle turns it into KeyboardInterrupt), anything else
        cancelled = job.cancel()
        log.warning("%s %s: %s Slurm job %s (log %s)", task.stage, task.key[:16],
                    "cancelled" if cancelled else "could not cancel", job.job_id, log_path)
        runlog.record_job(task.store.root, {**entry, "state": "CANCELLED by the worker"})
        raise
    finally:
        _active.pop(job.job_id, None)
    wall = round(time.monotonic() - t0, 3)
    runlog.record_job(task.store.root, {**entry, "state": info.get("JobState", "COMPLETED"),
                                        "node": info.get("NodeList"), "wall_seconds": wall})
    if task.manifest() is None:
        raise JobError(f"{task.stage} {task.key[:16]}: Slurm job {job.job_id} completed but published nothing at "
                       f"{task.artifact_dir}; log: {log_path}")
    log.info("%s %s: done in Slurm job %s on %s in %.1fs", task.stage, task.key[:16], job.job_id,
             info.get("NodeList", "?"), wall)


def _reason(info: dict) -> str:
    r = info.get("Reason")
    return f" ({r})" if r and r != "None" else ""


def _cancel_leftovers() -> None:
    """A worker that exits while waiting (not through run_as_job's handlers) leaves no job behind."""
    for job in list(_active.values()):
        job.cancel()



