"""A Sweep under Slurm: its points as one job array, `--array=0-<N-1>%<slurm.max_parallel>`.

Array task i runs point i's whole FullRun on its node, as a run of its own (runs/<run id>/run.json
on the shared root), with the local scheduler: build stages, servers and LoadGen all in that task
(it is the point's allocation; no nested jobs, which could wait forever for the CPUs the array
holds). Points that share a stage share its key, and perfdag's per-key locks make concurrent tasks
build it once: the first builds, the others wait on the lock and reuse it. Servers are shared the
same way, across nodes too: a task on another node measures against them at their address while
the job that launched them runs (harness/serving/elsewhere.py), and a task that launched servers
other tasks still lease waits for them before it ends (its servers end with its job). The worker submits, streams each task's
progress, waits for the array, reports per point, then writes the sweep's table from the points'
reports as a Sweep without Slurm does.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING

from harness.cache import runs as runlog
from harness.cache.store import ArtifactStore
from harness.serving.registry import ServerRegistry
from harness.serving.spec import this_node
from harness.slurm import JobError, JobSpec, SlurmJob, cancel, job_lines, submit
from tasks.base import log
from tasks.settings import REPO_ROOT, artifacts_root, params_path
from tasks.slurm.submit import IN_POINT, PASS_ENV

if TYPE_CHECKING:
    from pipeline.sweep import Sweep

# A point's FullRun exits 0, or with its verdict (10 INVALID, 11 accuracy FAIL, 12 both): measured.
MEASURED = {"0": "", "10": "INVALID", "11": "accuracy FAIL", "12": "INVALID, accuracy FAIL"}
_ENTRY = "import sys; from pipeline.sweep_array import point_main; sys.exit(point_main(sys.argv[1]))"
_WAITING = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED")


def fans_out(sweep: "Sweep") -> bool:
    if os.environ.get(IN_POINT):
        return False
    first = next(iter(sweep.upstream().values()), None)
    s = first.params.slurm if first is not None else None
    return s is not None and s.array


def run_array(sweep: "Sweep") -> None:
    points = list(sweep.upstream().values())
    s = points[0].params.slurm
    key16, n = sweep.key[:16], len(points)
    jobs_dir = sweep.store.root / "runs" / runlog.current_run_id() / "slurm"
    jobs_dir.mkdir(parents=True, exist_ok=True)
    points_file = jobs_dir / f"Sweep-{key16}.points.json"
    points_file.write_text(json.dumps([
        {"task": p.get_task_family(), "args": _cli_args(p), "label": p.point_label, "key": p.key} for p in points],
        indent=2))
    k = min(s.max_parallel, n)
    env = {"PYTHONPATH": str(REPO_ROOT), "PERFDAG_ARTIFACTS": str(sweep.store.root), IN_POINT: "1",
           runlog.ENV: "",  # each task is a run of its own
           **{name: os.environ[name] for name in PASS_ENV if name in os.environ}}
    spec = JobSpec(name=f"perfdag-sweep-{sweep.definition_name()}", log=jobs_dir / f"Sweep-{key16}-%A_%a.log",
                   command=[sys.executable, "-c", _ENTRY, str(points_file)], workdir=REPO_ROOT, env=env,
                   partition=s.partition, account=s.account, gpus=s.gpus_for("LaunchServers"), cpus=s.cpus,
                   mem=s.mem, time_limit=str(s.time_limit_min) if s.time_limit_min else "",
                   extra_args=tuple(s.extra_args), array=f"0-{n - 1}%{k}")
    job = submit(spec, jobs_dir / f"Sweep-{key16}.sbatch")
    log.info("Sweep %s: %d point(s) as Slurm job array %s (--array=0-%d%%%d); logs %s", sweep.definition_name(), n,
             job.job_id, n - 1, k, jobs_dir / f"Sweep-{key16}-{job.job_id}_<i>.log")
    try:
        final = _wait(sweep, job, points, s.poll_s)
    except BaseException:
        cancel(job.job_id)
        log.warning("Sweep %s: cancelled Slurm job array %s", sweep.definition_name(), job.job_id)
        runlog.record_job(sweep.store.root, {"stage": "Sweep", "key": sweep.key, "job_id": job.job_id,
                                             "kind": "array", "state": "CANCELLED by the worker"})
        raise
    failed = []
    for i, p in enumerate(points):
        info = final.get(i, {})
        state, code = info.get("JobState", "UNKNOWN"), info.get("ExitCode", "?:?").split(":")[0]
        tlog = jobs_dir / f"Sweep-{key16}-{job.job_id}_{i}.log"
        ok = code in MEASURED and state in ("COMPLETED", "FAILED")
        runlog.record_job(sweep.store.root, {"stage": "Sweep", "key": sweep.key, "job_id": f"{job.job_id}_{i}",
                                             "kind": "array task", "point": p.point_label, "point_key": p.key,
                                             "state": state, "exit_code": code, "node": info.get("NodeList"),
                                             "log": str(tlog)})
        verdict = "measured" + (f" ({MEASURED[code]})" if MEASURED.get(code) else "") if ok else \
            f"{state} (exit {code})"
        log.info("Sweep point %s: job %s_%d on %s: %s; log %s", p.point_label, job.job_id, i,
                 info.get("NodeList", "?"), verdict, tlog)
        if not ok or p.manifest() is None:
            failed.append(f"point {p.point_label}: Slurm job {job.job_id}_{i} {state} (exit {code}); log: {tlog}")
    if failed:
        raise JobError(f"Sweep {sweep.definition_name()}: {len(failed)} of {n} point(s) were not measured:\n  "
                       + "\n  ".join(failed))


def _wait(sweep, job: SlurmJob, points, poll_s: float) -> dict[int, dict]:
    """Polls the array until every task has ended; streams perfdag's lines of each task's log."""

    seen: dict[int, str] = {}
    tails: dict[int, SlurmJob] = {}
    unknown_since = None
    while True:
        lines = job_lines(job.job_id)
        tasks: dict[int, dict] = {}
        pending_range = False
        for info in lines:
            tid = info.get("ArrayTaskId", "")
            if tid.isdigit():
                tasks[int(tid)] = info
            else:
                pending_range = True  # "2-3%2": not started yet
        if not lines:
            unknown_since = unknown_since or time.monotonic()
            if time.monotonic() - unknown_since > max(120, 10 * poll_s):
                raise JobError(f"Slurm job array {job.job_id}: scontrol no longer knows it; logs: {job.log}")
        else:
            unknown_since = None
        for i, info in sorted(tasks.items()):
            state = info.get("JobState", "")
            if seen.get(i) != state:
                seen[i] = state
                log.info("Sweep point %s: job %s_%d %s%s", points[i].point_label, job.job_id, i, state,
                         f" on {info['NodeList']}" if state == "RUNNING" and info.get("NodeList") else "")
            if i not in tails:
                tails[i] = SlurmJob(f"{job.job_id}_{i}", JobSpec(name="", command=[], workdir=REPO_ROOT,
                                    log=job.spec.log.parent / f"{job.spec.log.name.split('-%A')[0]}-{job.job_id}_{i}.log"),
                                    job.script)
            for line in tails[i].new_log_lines():
                if line.startswith("perfdag"):  # perfdag's own progress; luigi's chatter stays in the log
                    log.info("  [point %d] %s", i + 1, line)
        if lines and not pending_range and len(tasks) == len(points) \
                and all(t.get("JobState", "") not in _WAITING for t in tasks.values()):
            for i, t in tails.items():
                for line in t.new_log_lines():
                    if line.startswith("perfdag"):
                        log.info("  [point %d] %s", i + 1, line)
            return tasks
        time.sleep(poll_s)


def _cli_args(point) -> list[str]:
    """The point's FullRun on the command line: every parameter that shapes its keys (params file,
    overrides, a Nightly's date, rerun_from), so the task computes the keys the worker computed."""
    args = []
    for name, value in point.to_str_params(only_significant=True).items():
        if name == "params_file":
            value = str(params_path(value).resolve())
        if value not in ("", None):
            args += [f"--{name.replace('_', '-')}", value]
    return args


def point_main(points_file: str) -> int:
    """Inside array task i: point i's FullRun or PerformanceRun (the luigi CLI, local scheduler, a run of its own), then
    the servers it launched stay up while other tasks still lease them."""
    import subprocess

    i = int(os.environ["SLURM_ARRAY_TASK_ID"])
    point = json.loads(open(points_file).read())[i]
    print(f"perfdag: sweep point {point['label']} in Slurm job {os.environ.get('SLURM_ARRAY_JOB_ID')}_{i} "
          f"on {this_node()}", flush=True)
    env = {k: v for k, v in os.environ.items() if k != runlog.ENV}
    task = point.get("task", "FullRun")  # a PerformanceRun with --no-accuracy
    rc = subprocess.call([sys.executable, "-m", "luigi", "--module", "pipeline", task, "--local-scheduler",
                          *point["args"]], cwd=REPO_ROOT, env=env)
    _wait_for_other_holders()
    print(f"perfdag: sweep point {point['label']}: {task} exited {rc}", flush=True)
    return rc


def _wait_for_other_holders(poll_s: float = 1.0) -> None:
    """Servers launched in this job end with it: while another task of the sweep leases them, wait;
    then stop them (under the key's lock, so no task starts using them meanwhile)."""

    store = ArtifactStore(artifacts_root())
    registry = ServerRegistry(store.root)
    job = os.environ.get("SLURM_JOB_ID")
    mine = {r["key16"] for r in registry.records() if r.get("node") == this_node() and _launched_in(r, job)}
    said = set()
    while mine:
        for key16 in sorted(mine):
            with store.lock("LaunchServers", key16):
                holders = registry.holders(key16)
                if not holders:
                    registry.stop(key16, 10.0)
                    mine.discard(key16)
                    continue
            if key16 not in said:
                said.add(key16)
                print(f"perfdag: servers {key16} were launched in this job and run(s) "
                      f"{', '.join(h['run_id'] for h in holders)} still use them: waiting", flush=True)
        if mine:
            time.sleep(poll_s)


def _launched_in(rec: dict, job: str | None) -> bool:
    """The server process belongs to this job (its parent chain leads here, or its environment says so)."""
    import psutil

    try:
        return psutil.Process(int(rec["pid"])).environ().get("SLURM_JOB_ID") == job
    except (psutil.Error, KeyError, ValueError):
        return False
