"""The one launch loop every backend uses: spawn, wait until ready, warm up, record; and stop.

A backend renders `LaunchSpec`s (pure functions, tested on CPU); this module runs them. A launch
that fails or is interrupted (Ctrl-C, SIGTERM) stops every process it started before raising.
Records (servers.json) carry pid, process start time and the launch token spawn put in the
server's environment: a process is signalled only when it still carries that token, and the
identity of the artifacts root the record was read from (a recycled pid, a stranger's pid in a
forged record, or another root's server named by a record copied from there, never is). Records
read back from the root are parsed first (records.py), which stamps each with that root
(`_root_id`); the functions here take those checked records.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable, Iterator, Sequence

from harness.cache.executed import normalise
from harness.serving import pinned, private, records
from harness.serving.elsewhere import reachable_from_here, running_elsewhere
from harness.serving.ports import port_in_use
from harness.serving.processes import (
    Process,
    ServerError,
    is_own_process,
    is_same_process,
    labels,
    processes_with_token,
    root_id,
    spawn,
    start_time,
    terminate,
)
from harness.serving.protocols import client_for
from harness.serving.shm import mapped_shm, remove_shm_files, shm_regions
from harness.serving.spec import LaunchSpec, on_this_host, url_of
from harness.slurm import srun_argv
from harness.untrusted.records import ignored


@contextlib.contextmanager
def _stop_on_interrupt(started: list[Process], shm_prefixes: list[str]) -> Iterator[None]:
    """Ctrl-C, SIGTERM or an error while launching stops what this launch started, at once: a
    readiness wait or warm-up in progress ends when its server goes, not when its timeout runs out."""
    def on_term(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    previous = None
    with contextlib.suppress(ValueError):  # not the main thread (luigi's multi-worker mode)
        previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    except BaseException as exc:
        # Interrupted: little grace for a model still loading (SIGKILL after 1.5 s); failed: the usual 10 s.
        stop_started(started, shm_prefixes, grace_s=1.5 if isinstance(exc, KeyboardInterrupt) else 10.0)
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def wait_all(futures: Sequence[Future], slice_s: float = 0.25) -> None:
    """Waits for every future and raises the first failure as it happens. The wait is cut in short
    slices because the kernel may hand SIGINT/SIGTERM to one of the waiting threads, and Python runs
    the handler only when the main thread next runs bytecode: one uncut wait would hold Ctrl-C back
    until a readiness timeout (minutes)."""
    pending = set(futures)
    while pending:
        done, pending = wait(pending, timeout=slice_s, return_when=FIRST_COMPLETED)
        for f in done:
            if f.exception() is not None:
                raise f.exception()


def stop_started(started: Sequence[Process], shm_prefixes: Sequence[str], grace_s: float = 10.0) -> None:
    """Stops the processes a launch started and removes their Python-backend shared memory (a
    server killed while its models load leaves its /dev/shm regions behind). A second Ctrl-C
    while this runs cannot cut it short."""
    held = _hold_signals()
    try:
        if started:  # all at once: N servers take one grace period, not N
            with ThreadPoolExecutor(max_workers=min(32, len(started)), thread_name_prefix="stop") as pool:
                list(pool.map(lambda p: terminate(p.pid, grace_s, p.proc), started))
        for prefix in shm_prefixes:
            remove_shm_files(shm_regions(prefix))
        for p in started:
            private.remove(p.token)
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler)


def _hold_signals() -> dict:
    """Ignores SIGINT/SIGTERM until the caller restores the returned handlers (main thread only:
    Python runs handlers there whichever thread the kernel picked)."""
    held = {}
    with contextlib.suppress(ValueError):
        for sig in (signal.SIGINT, signal.SIGTERM):
            held[sig] = signal.signal(sig, signal.SIG_IGN)
    return held


def record_of(spec: LaunchSpec, proc: Process, out_dir: Path, names: dict[str, str] | None = None) -> dict:
    """What servers.json keeps of a launched server; `names` replace machine paths (the artifacts root
    becomes <root>, so the record stays true when the root moves)."""

    names = names or {}
    return {"pid": proc.pid, "create_time": start_time(proc.pid), "host": spec.host, "port": spec.ports["serve"],
            **{f"{k}_port": v for k, v in spec.ports.items() if k != "serve"},
            "protocol": spec.protocol, "models": list(spec.models), "mode": spec.mode,
            "repo": normalise(spec.repo, names), "log": str(proc.log_path.relative_to(out_dir)),
            "cmd": normalise(proc.argv, names), "env": normalise(spec.env, names), "shm_prefix": spec.shm_prefix,
            "token": proc.token,
            **({"role": spec.role} if spec.role else {}),
            **({"instance_node": ",".join(spec.span) or spec.node} if spec.node else {}),
            **({"grpc_port": spec.ports["serve"]} if spec.protocol == "triton-grpc" else {})}


def placed_argv(spec: LaunchSpec) -> list[str]:
    """What runs here for a spec: its argv, or on another node of this Slurm job, the `srun --overlap`
    step that runs it there (its client stays here: signalling it signals the instance, and it ends
    when the instance does)."""
    if not spec.span and (not spec.node or spec.node == os.environ.get("SLURMD_NODENAME")):  # started here
        return list(spec.argv)
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        raise ServerError(f"{spec.role or 'server'} {spec.index}: placed on node {spec.node}, but this process runs "
                          "in no Slurm job (a layout over several nodes launches inside its allocation)")
    # Slurm sets a step's CUDA_VISIBLE_DEVICES to all of the job's GPUs on its node, over what srun passes
    # on, and a site may not export the caller's environment at all (SLURM_EXPORT_ENV): the instance's
    # own settings (its GPUs, its role's env) are set inside the step, on every rank of every node.
    command = (["env", *(f"{k}={v}" for k, v in spec.env.items())] if spec.env else []) + list(spec.argv)
    return srun_argv(job, command, name=f"perfdag-{spec.role or 'server'}-{spec.index}", node=spec.node,
                     nodes=spec.span, tasks_per_node=spec.tasks_per_node, mpi=spec.mpi, container=spec.container)


def launch(specs: Sequence[LaunchSpec], out_dir: str | Path, *, root: str | Path, ready_timeout_s: float,
           warmup_prompt: Sequence[int] | None, streaming: bool,
           on_spawn: Callable[[dict], None] = lambda rec: None,
           log: Callable[[str], None] = print, names: dict[str, str] | None = None) -> list[dict]:
    """Starts every spec, waits until each serves its models, warms each model up; returns the
    records. Each process carries the identity of the artifacts root `root` it serves (only that
    root stops it). `on_spawn` sees each record the moment its process exists (before readiness).
    `names` replace machine paths in what is written down (records, log headers), not in what runs."""
    out_dir = Path(out_dir).resolve()
    rid = root_id(root)
    busy = [f"{s.host}:{p} ({name})" for s in specs for name, p in s.ports.items() if port_in_use(s.host, p)]
    if busy:
        raise ServerError(f"cannot start servers: port(s) already in use: {', '.join(busy)} "
                          "(another server still running? leave the ports unset to pick free ones)")
    started: list[Process] = []
    records: list[dict] = []
    shm_prefixes = [s.shm_prefix for s in specs if s.shm_prefix]
    with _stop_on_interrupt(started, shm_prefixes):

        here: list[bool] = []  # started on this node (not through srun): its private directory is here
        launched: list[LaunchSpec] = []
        for spec in specs:
            shown = " ".join([f"{k}={v}" for k, v in spec.env.items()] + list(spec.argv))
            argv = placed_argv(spec)
            overlay = {**spec.env, private.PLAN_ENV: spec.private.to_json()} if spec.private else spec.env
            proc = spawn(argv, out_dir / "logs" / f"{spec.role or 'server'}_{spec.index}.log",
                         env=spec.base_env,
                         env_overlay=overlay, cwd=spec.cwd, shown=normalise(shown, names or {}), root=rid)
            started.append(proc)
            here.append(argv == list(spec.argv))
            if spec.private and here[-1]:  # a model named by its path (transformers serve's transcriptions)
                spec = dataclasses.replace(spec, models=tuple(                   # names it in the private directory
                    m.replace(private.PLACEHOLDER, str(private.private_dir(proc.token))) for m in spec.models))
            launched.append(spec)
            rec = record_of(spec, proc, out_dir, names)
            on_spawn(rec)
            records.append(rec)
            where = f" on {spec.node}" if spec.node else ""
            log(f"{spec.role or 'server'} {spec.index} ({spec.protocol}, {spec.mode}){where}: pid {proc.pid}, {spec.url}, "
                f"log logs/{proc.log_path.name} in the LaunchServers artifact")
        proto = {s.protocol: client_for(s.protocol) for s in specs}

        def ready_and_warm(spec: LaunchSpec, proc: Process) -> None:
            t0 = time.monotonic()
            proto[spec.protocol].wait_ready(proc, spec.url, list(spec.models), ready_timeout_s)
            for name in spec.models if warmup_prompt else ():  # first requests pay lazy initialisation
                proto[spec.protocol].warmup(spec.url, name, warmup_prompt, streaming)
            log(f"{spec.role or 'server'} {spec.index} (pid {proc.pid}) ready and warm in {time.monotonic() - t0:.1f}s")

        # Every server is waited on and warmed up at once: N servers take as long as the slowest.
        # The first failure stops them all (so the other waits end at once) and is raised. The pool
        # is never joined on the way out: an interrupt stops the servers first, which ends the waits.
        pool = ThreadPoolExecutor(max_workers=min(32, len(specs)) or 1, thread_name_prefix="ready")
        try:
            wait_all([pool.submit(ready_and_warm, spec, proc) for spec, proc in zip(launched, started)])
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        loaded_as_verified(launched, started, here, log)
    return [{**rec, "_root_id": rid} for rec in records]


def loaded_as_verified(specs: Sequence[LaunchSpec], started: Sequence[Process], here: Sequence[bool],
                       log: Callable[[str], None]) -> None:
    """Once the servers are ready: what they loaded in place is what was verified before they started
    (the same directories, files and bytes: each file read again, once per launch), and their private
    copies are intact. Raises (and the launch stops its servers) otherwise."""
    problems: list[str] = []
    read: set[str] = set()
    t0 = time.monotonic()
    for spec, proc, local in zip(specs, started, here):
        if spec.private is None:
            continue
        where = private.private_dir(proc.token) if local else None
        pins = spec.private.pins
        problems += pinned.changes([p for p in pins if p.src not in read], where, mode="fresh")
        problems += pinned.changes([p for p in pins if p.src in read], where, mode="memo")  # read just now
        problems += private.copy_changes(spec.private, where) if where is not None else []
        read |= {p.src for p in pins}
    if problems:
        raise pinned.NotAsVerified("what the servers loaded is not what was verified before they started "
                                       "(changed between the check and the load)", list(dict.fromkeys(problems)))
    if read:
        log(f"loaded as verified: {len(read)} pinned director{'y' if len(read) == 1 else 'ies'} read again in "
            f"{time.monotonic() - t0:.1f}s")  # as a reader of the root would stamp them



def launch_in_order(groups: Sequence[Sequence[LaunchSpec]], out_dir: str | Path, **kw) -> list[dict]:
    """A layout's launch: each group ready and warm before the next starts (workers before their
    router). A group that fails stops the groups already up, then raises."""
    records: list[dict] = []
    try:
        for group in groups:
            if group:
                records += launch(group, out_dir, **kw)
    except BaseException:
        stop_recorded(records, timeout=10.0)
        raise
    return records


def is_ours(rec: dict) -> bool:
    """The recorded pid still is the process we started, on this host, from the root the record was
    read from: same start time, and its environment carries the record's launch token and that root's
    identity (a recycled pid, a stranger's, or another root's server does not)."""
    return not rec.get("external") and on_this_host(rec) \
        and is_own_process(rec.get("pid"), rec.get("create_time"), rec.get("token"), rec.get("_root_id"))


def not_ours_why(rec: dict) -> str:
    """Why a live process a record names is not signalled (for the line that says it is left alone)."""
    token, rid = labels(rec["pid"])
    if token is not None and token == rec.get("token") and rid != rec.get("_root_id"):
        return (f"pid {rec.get('pid')} was launched from another artifacts root (its environment names that "
                "root, not this one; a record copied from there): left alone")
    return (f"pid {rec.get('pid')} is not a process perfdag started (its environment lacks the record's "
            "launch token): left alone")


def gone_servers(recs: Sequence[dict], artifact_dir: Path) -> list[str]:
    """One line per server perfdag launched whose process is gone, with how it ended where its log
    says so (tritonserver prints "Signal (11) received." when it crashes)."""
    import re

    out = []
    for i, rec in enumerate(recs):
        if rec.get("external") or is_ours(rec):
            continue
        how = "is gone"
        log_file = records.log_file(rec, artifact_dir)
        if log_file is not None:
            with open(log_file, "rb") as f:
                f.seek(max(0, log_file.stat().st_size - 64 * 1024))
                tail = f.read().decode("utf-8", "replace")
            if m := re.search(r"Signal \((\d+)\) received", tail):
                num = int(m.group(1))
                name = signal.Signals(num).name if num in signal.valid_signals() else f"signal {num}"
                how = f"crashed ({name}, see {log_file})"
        # a layout's instance is named by its role and node (a generation worker on node7 is gone)
        name = f"{rec['role']} {i}" if rec.get("role") else f"server {i}"
        where = f" on {rec['instance_node']}" if rec.get("instance_node") else ""
        out.append(f"{name}{where} (pid {rec.get('pid')}) {how}")
    return out


def stop_recorded(recs: Sequence[dict], timeout: float = 30.0) -> list[int]:
    """Stops every recorded server that is still ours, and what is left of those that died (backend
    stubs, by their launch token), and removes their shared memory nobody maps; returns the pids
    stopped. A live process that lacks the record's token is not ours: left alone, and said so."""
    stopped = []
    for rec in recs:
        if rec.get("external") or not on_this_host(rec):
            continue
        if is_ours(rec):
            terminate(int(rec["pid"]), timeout)
            stopped.append(int(rec["pid"]))
        else:
            if is_same_process(rec.get("pid"), rec.get("create_time")):
                ignored(rec.get("_file", "a server record"), not_ours_why(rec))
            stopped += kill_leftovers(rec)
        remove_shm(rec)
        if rec.get("_root_id"):  # its private copy, once nothing carries its token (another root's keeps it)
            private.remove(rec.get("token"))
    return stopped


def kill_leftovers(rec: dict) -> list[int]:
    """Processes a dead server left (its Python-backend stubs, MPI ranks): those whose environment
    carries its launch token and the identity of the root the record was read from, which they
    inherited. Never chosen by anything else a record says."""
    import psutil

    if not on_this_host(rec) or not rec.get("_root_id"):  # no root read it: nothing is its to stop
        return []
    gone = []
    for pid in processes_with_token(rec.get("token"), rec["_root_id"]):
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
            gone.append(pid)
    return gone


def remove_shm(rec: dict) -> list[str]:
    """Removes the /dev/shm regions of a server that is gone (its Python backend leaves them on a
    kill): this user's files named by its prefix (of perfdag's shape) that no process maps."""
    prefix = rec.get("shm_prefix")
    if not prefix or not on_this_host(rec) or is_ours(rec):
        return []
    regions = shm_regions(prefix)
    if regions:
        live = mapped_shm()
        regions = [r for r in regions if r not in live]
    return remove_shm_files(regions)


def _running(rec: dict) -> bool:
    """Still the process we started (on this node), or launched on another node by a Slurm job that
    still runs there and reachable from here (a Sweep's array task sharing its servers)."""
    if rec.get("external") or is_ours(rec):
        return True
    return running_elsewhere(rec) and reachable_from_here(rec)


def servers_live(records: Sequence[dict], timeout_s: float = 2.0, patience_s: float = 0.0) -> bool:
    """Every server answers ready for all its models (and, when we launched it, still is our pid).

    A server busy with another run's load may answer a probe late: with `patience_s`, a live process
    that does not answer is asked again, with longer timeouts, for up to that long before it counts
    as down (a dead process counts as down at once)."""
    for rec in records:
        if not _running(rec):
            return False
        proto = client_for(rec.get("protocol", "triton-grpc"))
        deadline, t = time.monotonic() + patience_s, timeout_s
        while not proto.probe(url_of(rec), rec["models"], t):
            if time.monotonic() + t > deadline or not _running(rec):
                return False
            t = min(t * 2, 10.0)
    return True


def external_servers(endpoints: Sequence[str], models: Sequence[str], ready_timeout_s: float,
                     protocol: str = "triton-grpc") -> list[dict]:
    """Servers launched outside perfdag: readiness checks only, nothing spawned."""
    proto = client_for(protocol)
    records = []
    for ep in endpoints:
        host, _, port = ep.rpartition(":")
        rec = {"external": True, "host": host, "port": int(port), "protocol": protocol, "models": list(models)}
        if protocol == "triton-grpc":
            rec["grpc_port"] = int(port)
        proto.wait_ready(None, ep, list(models), ready_timeout_s)
        records.append(rec)
    return records
