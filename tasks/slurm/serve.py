"""Serving and measuring of one point inside one Slurm allocation (params: slurm.serve, the default).

LaunchServers submits a holder job, `perfdag-serve-<key16>`: its batch step runs LaunchServers'
own build on the allocated node (spawn, ready, warm up, record, publish under the key's lock) and
then holds the servers until the job is cancelled. Server records carry the node (`node`) and the
job (`slurm_job`); the registry keeps the job id (.servers/<key16>/slurm.json) the moment it exists.
The measuring stages (RunLoadgen, RunAccuracy, compliance runs) run their build as a step of that
job, `srun --jobid=<id> --overlap`, so the LoadGen client runs on the servers' node and talks to
them over the node's loopback; so does the liveness probe. Stopping the servers = scancel the
allocation: the last lease holder to leave does it (FullRun's end, the run's exit, Ctrl-C or
SIGTERM of the worker), or Slurm does at slurm.time_limit_min.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from harness.cache import runs as runlog
from harness.serving.launcher import stop_recorded
from harness.serving.registry import serves_key
from harness.serving.spec import this_node
from harness.slurm import JobError, SlurmJob, container_of, ended_error, job_lines, srun_argv, submit
from tasks import lifecycle
from tasks.settings import REPO_ROOT
from tasks.slurm.submit import IN_POINT, job_command, job_env, job_spec, runs_here

log = logging.getLogger("perfdag")

if TYPE_CHECKING:
    from tasks.base import StageTask
    from tasks.launch_servers import LaunchServers

_PROBE = ("import json, sys; from harness.serving.launcher import servers_live; "
          "sys.exit(0 if servers_live(json.loads(sys.argv[1]), patience_s=float(sys.argv[2])) else 1)")


_GONE = ("import json, sys; from harness.serving.launcher import gone_servers; "
         "print(chr(10).join(gone_servers(json.loads(sys.argv[1]), sys.argv[2])))")


def _in_allocation(task: "LaunchServers", job_id: str, code: str, arg: str,
                   timeout_s: float) -> subprocess.CompletedProcess | None:
    """`python -c code <servers.json> arg` as a step of the servers' allocation, where the processes
    that hold them run (None: it did not finish in time)."""
    argv = srun_argv(job_id, [sys.executable, "-c", code, json.dumps(task.servers()), arg],
                     name=f"perfdag-probe-{task.key[:16]}")
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, cwd=REPO_ROOT,
                              env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    except subprocess.TimeoutExpired:
        return None


def gone_in_allocation(task: "LaunchServers") -> list[str]:
    """The recorded instances that are gone, each named by its role and node ('generation 1 on node7 (pid
    ...) is gone'), as seen from inside their allocation."""
    alloc = allocation_of(task.servers())
    out = alloc and _in_allocation(task, alloc[0], _GONE, str(task.artifact_dir), 60)
    return [line for line in out.stdout.splitlines() if line.strip()] if out else []


def serving(task: "StageTask") -> bool:
    """Servers of this task's point live in an allocation, and this process is not inside it."""
    s = task.params.slurm
    return s is not None and s.serve and not os.environ.get(IN_POINT) and not runs_here(task)


def allocation_of(servers: list[dict]) -> tuple[str, str] | None:
    """(job id, node) of the allocation the recorded servers run in, if they do."""
    for rec in servers:
        if rec.get("slurm_job"):
            return str(rec["slurm_job"]), rec.get("node", "")
    return None


def job_marks(task: "LaunchServers") -> dict:
    """What a server record gets when launched inside a Slurm job: its node, and in the holder job the
    allocation; in a Sweep's array task, which measures on its node itself, the task's job, which
    points on other nodes check before they share the servers (harness/serving/elsewhere.py)."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return {}
    return {"node": this_node(), **({"slurm_job": job} if runs_here(task) else {"launch_job": job})}


# --- LaunchServers --------------------------------------------------------------------------------

def live(task: "LaunchServers", patience_s: float = 30.0) -> bool:
    """The allocation still RUNNING and its servers answering, probed from inside it (a step on the node)."""
    alloc = allocation_of(task.servers())
    if alloc is None:
        return False
    job_id, _ = alloc
    lines = job_lines(job_id)
    if not lines or lines[0].get("JobState") != "RUNNING" or not serves_key(lines[0], task.key[:16]):
        return False  # (a servers.json naming another job is no allocation of these servers: nothing runs in it)
    out = _in_allocation(task, job_id, _PROBE, str(patience_s), patience_s + 60)
    return out is not None and out.returncode == 0


def launch(task: "LaunchServers") -> None:
    """The worker's side: submit the holder job, stream its log until it has published the servers,
    take this run's lease. Interrupted or failed, the job is cancelled."""

    lifecycle.setup(task.verbose, root=task)
    key16, t0 = task.key[:16], time.monotonic()
    with task.store.lock(task.stage, task.key):  # decided like local launches: nobody else launches meanwhile
        m = task.manifest()
        if m is not None and live(task):
            task.hold(m)
            runlog.record(task.store.root, task.stage, task.key, "reused", code=task.key_doc["code"])
            lifecycle.note_done(task.task_id)
            return
        task.registry.stop(key16, 3.0)  # a stale allocation (cancelled, timed out) and its records go
    s = task.params.slurm
    spec = job_spec(task, name=f"perfdag-serve-{key16}", gpus=s.gpus_for("LaunchServers"))
    if task.params.layout is not None:  # one allocation over the layout's nodes
        spec = dataclasses.replace(spec, nodes=task.params.layout.nodes, gpus_per_node=task.params.layout.gpus_per_node)
    spec.log.parent.mkdir(parents=True, exist_ok=True)
    job = submit(spec, spec.log.parent / f"{task.stage}-{key16}.sbatch")
    task.registry.record_allocation(key16, {"job_id": job.job_id, "run_id": runlog.current_run_id(),
                                            "log": str(job.log), "submitted_at": time.time()})
    entry = {"stage": task.stage, "key": task.key, "job_id": job.job_id, "log": str(job.log),
             "script": str(job.script), "state": "SUBMITTED", "kind": "allocation"}
    runlog.record_job(task.store.root, entry)
    log.info("LaunchServers %s: Slurm allocation %s submitted (servers and measurements run in it); log %s",
             key16, job.job_id, job.log)
    try:
        info = _wait_published(task, job)
        with task.store.lock(task.stage, task.key):
            task.hold(task.manifest())
    except JobError as e:
        runlog.record_job(task.store.root, {**entry, "state": "FAILED", "error": str(e)})
        task.registry.stop(key16, 3.0)
        raise JobError(f"LaunchServers {key16}: {e}") from None
    except BaseException:
        cancelled = job.cancel()
        log.warning("LaunchServers %s: %s Slurm allocation %s (log %s)", key16,
                    "cancelled" if cancelled else "could not cancel", job.job_id, job.log)
        runlog.record_job(task.store.root, {**entry, "state": "CANCELLED by the worker"})
        task.registry.stop(key16, 3.0)
        raise
    wall = round(time.monotonic() - t0, 3)
    runlog.record_job(task.store.root, {**entry, "state": "RUNNING", "node": info.get("NodeList"),
                                        "ready_seconds": wall})
    runlog.record(task.store.root, task.stage, task.key, "built", wall, code=task.key_doc["code"])
    log.info("LaunchServers %s: servers ready in Slurm allocation %s on %s in %.1fs", key16, job.job_id,
             info.get("NodeList", "?"), wall)
    lifecycle.note_done(task.task_id)


def _wait_published(task: "LaunchServers", job: SlurmJob) -> dict:
    seen = None
    poll = task.params.slurm.poll_s
    while True:
        lines = job_lines(job.job_id)
        info = lines[0] if lines else {}
        state = info.get("JobState", "")
        if state and (state, info.get("Reason")) != seen:
            seen = (state, info.get("Reason"))
            log.info("LaunchServers %s: allocation %s %s", task.key[:16], job.job_id, state)
        for line in job.new_log_lines():
            log.info("  [job %s] %s", job.job_id, line)
        if state == "RUNNING" and task.manifest() is not None \
                and (allocation_of(task.servers()) or ("",))[0] == job.job_id:
            return info
        if state and state not in ("PENDING", "RUNNING", "CONFIGURING"):
            info = _settled(job.job_id)
            state = info.get("JobState", state)
            job._flush(lambda line: log.info("  [job %s] %s", job.job_id, line))
            raise JobError(ended_error(job.job_id, state, info, job.log)
                           or f"Slurm job {job.job_id} ended before its servers were published; log: {job.log}")
        time.sleep(poll)


def hold_allocation(task: "LaunchServers") -> None:
    """Inside the holder job, once published: keep the servers up until the job is cancelled (scancel by
    the last lease holder, or its time limit), then stop them."""

    stop = {"now": False}

    def on_term(signum, frame):
        stop["now"] = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_term)
    print(f"perfdag: servers of LaunchServers {task.key[:16]} up in this allocation; held until it is cancelled",
          flush=True)
    while not stop["now"]:
        time.sleep(1.0)
    print("perfdag: allocation ending: stopping its servers", flush=True)
    stop_recorded(task.servers(), timeout=3.0)


# --- measuring stages -------------------------------------------------------------------------------

def measures_inside(task: "StageTask") -> bool:
    return serving(task) and allocation_of(task.upstream()["servers"].servers()) is not None


def measure(task: "StageTask") -> None:
    """The worker's side of a measuring stage: its build runs as a step of the servers' allocation
    (srun --overlap), so LoadGen runs on the node the servers run on; the step's output is streamed.
    A server that crashed mid-measurement (its allocation still RUNNING) is relaunched the way a local
    one is, harness.server_relaunches times at most, except that here the old allocation is ended and
    a new one holds the relaunched servers: the step cannot relaunch them itself, since whatever it
    starts dies with the step, and it cannot cancel the allocation it runs in."""

    lifecycle.setup(task.verbose, root=task)
    servers = task.upstream()["servers"]
    relaunches = task.params.harness.server_relaunches
    for attempt in range(1, relaunches + 2):
        try:
            return _measure_step(task)
        except JobError as exc:
            job_id = (allocation_of(servers.servers()) or ("?",))[0]
            if attempt > relaunches or not _servers_crashed(servers):
                raise
            gone = gone_in_allocation(servers)
            log.warning("%s %s: the servers in Slurm allocation %s stopped answering mid-measurement%s; ending "
                        "that allocation, relaunching them in a new one and measuring again from the start "
                        "(%d of harness.server_relaunches=%d)", task.stage, task.key[:16], job_id,
                        f" ({'; '.join(gone)})" if gone else "", attempt, relaunches)
            runlog.record_relaunch(task.store.root, {"stage": task.stage, "key": task.key, "servers": [job_id, *gone],
                                                     "error": str(exc).splitlines()[0][:500], "kept": None})
            servers.relaunch()  # serve.launch: the stale allocation is scancelled, a new one submitted
    raise AssertionError("unreachable")


def _servers_crashed(servers: "LaunchServers") -> bool:
    """The allocation is still RUNNING but its servers do not answer: they crashed (a cancelled,
    timed-out or failed allocation is an error to report, not a crash to relaunch)."""
    alloc = allocation_of(servers.servers())
    if alloc is None:
        return False
    lines = job_lines(alloc[0])
    return bool(lines) and lines[0].get("JobState") == "RUNNING" and not live(servers, patience_s=10.0)


def _measure_step(task: "StageTask") -> None:
    job_id, node = allocation_of(task.upstream()["servers"].servers())
    key16, t0 = task.key[:16], time.monotonic()
    s = task.params.slurm
    jobs_dir = task.store.root / "runs" / runlog.current_run_id() / "slurm"
    jobs_dir.mkdir(parents=True, exist_ok=True)
    log_path = jobs_dir / f"{task.stage}-{key16}-{job_id}.step.log"
    argv = srun_argv(job_id, job_command(task), name=f"perfdag-{task.stage}-{key16}",
                     container=container_of(s, (task.store.root, REPO_ROOT), REPO_ROOT))
    entry = {"stage": task.stage, "key": task.key, "job_id": job_id, "log": str(log_path), "kind": "step",
             "node": node, "state": "RUNNING"}
    runlog.record_job(task.store.root, {**entry, "job_id": f"{job_id}/{task.stage}"})
    log.info("%s %s: measuring inside Slurm allocation %s on %s (srun --overlap); log %s", task.stage, key16,
             job_id, node or "?", log_path)
    proc = subprocess.Popen(argv, cwd=REPO_ROOT, env={**os.environ, **job_env(task)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        with open(log_path, "ab", buffering=0) as f:
            for raw in proc.stdout:
                f.write(raw)
                log.info("  [job %s] %s", job_id, raw.decode("utf-8", "replace").rstrip("\n"))
        rc = proc.wait()
    except BaseException:
        _stop_step(proc)
        runlog.record_job(task.store.root, {**entry, "job_id": f"{job_id}/{task.stage}",
                                            "state": "CANCELLED by the worker"})
        raise
    wall = round(time.monotonic() - t0, 3)
    if rc != 0 or task.manifest() is None:
        info = _settled(job_id)
        state = info.get("JobState", "")
        why = (ended_error(job_id, state, info, log_path) if state and state != "RUNNING" else None) \
            or f"srun in Slurm allocation {job_id} exited {rc}; log: {log_path}"
        runlog.record_job(task.store.root, {**entry, "job_id": f"{job_id}/{task.stage}", "state": "FAILED",
                                            "error": why})
        raise JobError(f"{task.stage} {key16}: measuring in the servers' allocation failed: {why}"
                       + ("" if rc else f"; the step published nothing at {task.artifact_dir}"))
    runlog.record_job(task.store.root, {**entry, "job_id": f"{job_id}/{task.stage}", "state": "COMPLETED",
                                        "wall_seconds": wall})
    log.info("%s %s: measured in Slurm allocation %s on %s in %.1fs", task.stage, key16, job_id, node or "?", wall)
    lifecycle.note_done(task.task_id)


def _settled(job_id: str) -> dict:
    """The job's fields once a cancel or an end has settled: COMPLETING is waited out (up to 30 s),
    and RUNNING is asked again for up to 3 s (a step can end before the controller records why)."""
    t0 = time.monotonic()
    while True:
        lines = job_lines(job_id)
        info = lines[0] if lines else {}
        state = info.get("JobState", "")
        waiting = state in ("COMPLETING", "CONFIGURING") or (state == "RUNNING" and time.monotonic() - t0 < 3)
        if not waiting or time.monotonic() - t0 > 30:
            return info
        time.sleep(0.5)


def _stop_step(proc: subprocess.Popen) -> None:
    """srun forwards the first SIGINT/SIGTERM to the step; a second within a second cancels it."""
    for sig in (signal.SIGTERM, signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(3)
        except subprocess.TimeoutExpired:
            continue
