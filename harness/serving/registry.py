"""The durable record of every server perfdag starts, and the leases runs hold on them.

    <root>/.servers/<key16>/procs/<pid>-<start>.json   one per process, written the moment it exists
    <root>/.servers/<key16>/leases/<run id>.json       one per run measuring against these servers
    <root>/.servers/<key16>/keep                       a run asked to keep them (--keep-servers)
    <root>/.servers/<key16>/slurm.json                 the Slurm allocation the servers live in (slurm.serve)

A record lives outside any artifact's temp dir, so the next run, `servers stop --all` and gc find a
server even when its launching run was killed before publishing. A lease names the run (its
process id and start time): a lease whose process is gone no longer counts. Servers that are not
kept are stopped by the last lease holder to leave. Callers decide under the LaunchServers key's
lock, so two runs never both launch, and no run stops servers another run is using.

Everything here is read back as untrusted input (records.py): a malformed record, or one reached
through a link out of `.servers`, is reported and never acted on; a recorded process is stopped
only when it carries its launch token; an allocation is cancelled only when Slurm says it is this
key's perfdag-serve job of this user.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import time
from pathlib import Path
from typing import Callable

from harness.cache.store import ArtifactStore
from harness.errors import PerfdagError
from harness.serving import records
from harness.serving.launcher import is_ours, remove_shm, servers_live, stop_recorded
from harness.serving.processes import is_same_process, start_time
from harness.serving.elsewhere import job_runs_there, running_elsewhere
from harness.serving.spec import on_this_host, this_node
from harness.slurm import cancel, job_lines, wait_ended
from harness.untrusted.records import ignored, read

DIR = ".servers"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _write(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str))
    os.replace(tmp, path)


def run_holder(run_id: str) -> dict:
    """A lease holder for the run `run_id` ('<time>-<pid>'): the run's main process, whichever
    worker process asks."""
    pid = int(run_id.rsplit("-", 1)[1])
    job = os.environ.get("SLURM_JOB_ID")
    return {"run_id": run_id, "pid": pid, "create_time": start_time(pid), "host": socket.gethostname(),
            "since": time.time(), **({"node": this_node(), "slurm_job": job} if job else {})}


class ServerRegistry:
    def __init__(self, root: str | os.PathLike):
        self.base = Path(root)  # the artifacts root: what is read or removed here really lies under it
        self.root = self.base / DIR

    def _dir(self, key16: str) -> Path:
        return self.root / _SAFE.sub("_", key16)

    def with_entries(self, keys) -> set[str]:
        """Which of `keys` (key16s) have a directory here, by one listing: the others have no process records and
        no leases to read (gc asks this of every LaunchServers artifact of a root)."""
        try:
            names = set(os.listdir(self.root))
        except OSError:
            return set()
        return {k for k in keys if self._dir(k).name in names}

    # --- process records ---------------------------------------------------------------------
    def record(self, key16: str, rec: dict) -> None:
        """Records a server process at once (before it is ready)."""
        _write(self._dir(key16) / "procs" / f"{rec['pid']}-{int((rec.get('create_time') or 0) * 1000)}.json",
               {**records.as_written(rec), "key16": key16})

    def records(self, key16: str | None = None) -> list[dict]:
        """The checked process records (of one key, or all); `_file` is where each was read."""
        keys = [key16] if key16 else self.keys()
        out, stamp = [], records.stamp_of(self.base)
        for k in keys:
            for f in sorted((self._dir(k) / "procs").glob("*.json")):
                rec = read(records.ServerRecord, f, inside=self.base)
                if rec is not None and rec.get("external"):  # written for launched processes only
                    ignored(f, "a process record that says `external: true` (perfdag records only processes it "
                               "launched); perfdag does not act on it")
                elif rec is not None:
                    out.append({**rec, "key16": k, "_file": str(f), **stamp})
        return out

    def keys(self) -> list[str]:
        return sorted(p.name for p in self.root.glob("*") if p.is_dir() and not p.is_symlink())

    # --- the Slurm allocation holding the servers (tasks/slurm/serve.py) ------------------------
    def record_allocation(self, key16: str, doc: dict) -> None:
        """Written the moment the allocation's job exists, so a killed run's allocation is still found."""
        _write(self._dir(key16) / "slurm.json", doc)

    def allocation(self, key16: str) -> dict | None:
        return read(records.AllocationRecord, self._dir(key16) / "slurm.json", inside=self.base)

    def end_allocation(self, key16: str) -> str | None:
        """scancels the recorded allocation (its servers go with it) and waits until its processes
        are gone; returns its job id. Inside that allocation (its own job) nothing is cancelled, nor
        is a job Slurm does not name perfdag-serve-<key16> of this user (a forged record)."""
        doc = self.allocation(key16)
        if not doc:
            return None
        job_id = doc["job_id"]
        if job_id != os.environ.get("SLURM_JOB_ID"):

            try:
                lines = job_lines(job_id)  # [] once Slurm has forgotten the job: nothing left to cancel
            except PerfdagError as e:  # no Slurm commands on this host
                ignored(self._dir(key16) / "slurm.json", f"allocation {job_id} not cancelled: {e}")
                return None
            if lines and not serves_key(lines[0], key16):
                ignored(self._dir(key16) / "slurm.json",
                                  f"Slurm job {job_id} is {lines[0].get('JobName')!r} of {lines[0].get('UserId')}, "
                                  f"not perfdag-serve-{key16} of this user: not cancelled")
                return None
            if lines:
                cancel(job_id)
                wait_ended(job_id, timeout=120)
        self._unlink(self._dir(key16) / "slurm.json")
        return job_id

    def stop(self, key16: str, timeout: float = 30.0) -> list[int]:
        """Ends the servers' allocation (where they run in one), stops every recorded process of
        `key16` that is still ours, removes the shared memory of those that are gone, and forgets
        them; returns the pids stopped."""
        alloc = self.allocation(key16)
        if alloc and alloc["job_id"] != os.environ.get("SLURM_JOB_ID"):
            self.end_allocation(key16)
        stopped = []
        for rec in self.records(key16):
            if running_elsewhere(rec):  # the array task that launched them stops them, once unleased
                continue
            stopped += stop_recorded([rec], timeout)
            self._unlink(Path(rec["_file"]))
        self._unlink(self._dir(key16) / "keep")
        self._tidy(key16)
        return stopped

    def sweep_dead(self, key16: str | None = None) -> int:
        """Forgets records of processes that are gone (after removing their shared memory)."""
        n = 0
        for rec in self.records(key16):
            if on_this_host(rec) and not is_ours(rec):  # another node's: its allocation knows
                remove_shm(rec)
                n += self._unlink(Path(rec["_file"]))
        for k in [key16] if key16 else self.keys():
            self._tidy(k)
        return n

    def _unlink(self, path: Path) -> bool:
        """Removes one of the registry's files, never one a link leads to outside the root."""
        with contextlib.suppress(OSError, RuntimeError):
            real, base = path.parent.resolve(), self.base.resolve()
            if real == base or base in real.parents:
                path.unlink()
                return True
        return False

    def _tidy(self, key16: str) -> None:
        d = self._dir(key16)
        for sub in ("procs", "leases", ""):
            if not sub and (d / "slurm.json").is_file():
                continue
            with contextlib.suppress(OSError):
                (d / sub).rmdir() if sub else d.rmdir()

    # --- a server's life: launch (replacing what a stale launch left), use, release -----------------
    def replace(self, key16: str, stale: list[dict], start: Callable[[Callable[[dict], None]], list[dict]],
                marks: dict | None = None) -> list[dict]:
        """Launches `key16`'s servers anew (call under the key's lock): what a stale launch left (a dead
        run's, or crashed servers) is stopped first, then `start(on_spawn)` launches, and each process is
        recorded the moment it exists. `marks` (a Slurm job's node and allocation) go into every record."""
        marks = marks or {}
        stop_recorded(stale)
        self.stop(key16)
        servers = start(lambda rec: self.record(key16, {**rec, **marks}))
        return [{**rec, **marks} for rec in servers]

    @staticmethod
    def live(records: list[dict], patience_s: float = 30.0) -> bool:
        """The servers answer ready (a server busy with another run's measurement answers late, and is
        not dead: `patience_s`)."""
        return servers_live(records, patience_s=patience_s)

    def hold(self, key16: str, run_id: str) -> None:
        """The run `run_id` uses `key16`'s servers: nobody stops them until it releases them."""
        self.lease(key16, run_holder(run_id))

    def release_run(self, run_id: str, keys16: list[str] | None = None, *, keep: bool, grace_s: float = 30.0,
                    log: Callable[[str], None] = lambda line: None) -> list[int]:
        """Drops `run_id`'s leases (all it holds, or on `keys16`). `keep` marks the servers to be kept;
        else servers no other live run holds, and nobody asked to keep, are stopped (SIGKILL after
        `grace_s`). Decided under each key's lock, like launches. Returns the pids stopped."""
        store = ArtifactStore(self.base)
        stopped: list[int] = []
        # Named keys are released whether this run used them or not (a FullRun whose measurements were
        # all cached is still where its servers end); at exit, only what this run holds.
        for key16 in self.leased_by(run_id) if keys16 is None else keys16:
            if not self.records(key16) and not self.holders(key16):
                continue
            try:
                with store.lock("LaunchServers", key16):  # no run starts using them meanwhile
                    others = self.release(key16, run_id)
                    if keep:
                        self.keep(key16)
                    elif not others and not self.kept(key16):
                        alloc = self.allocation(key16)
                        stopped += self.stop(key16, grace_s)
                        if alloc:
                            log(f"servers {key16}: ended their Slurm allocation {alloc.get('job_id')}")
                    elif others:
                        log(f"servers {key16} stay up: run(s) {', '.join(h['run_id'] for h in others)} still use them")
            except OSError as e:
                log(f"could not release servers {key16}: {e}")
        return stopped

    # --- leases -------------------------------------------------------------------------------
    def lease(self, key16: str, holder: dict) -> None:
        _write(self._dir(key16) / "leases" / f"{_SAFE.sub('_', holder['run_id'])}.json", holder)

    def holders(self, key16: str) -> list[dict]:
        """Live lease holders (a lease whose run is gone is removed)."""
        out = []
        for f in sorted((self._dir(key16) / "leases").glob("*.json")):
            h = read(records.LeaseRecord, f, inside=self.base)
            if h is None:  # malformed (reported) or gone: no holder, and the file is left as it is
                continue
            if h.get("node") and h["node"] != this_node():  # a run on another node: alive while its job is
                alive = job_runs_there(h.get("slurm_job"), h["node"])
            else:
                alive = is_same_process(h["pid"], h.get("create_time"))
            if alive:
                out.append(h)
            else:
                self._unlink(f)
        return out

    def release(self, key16: str, run_id: str) -> list[dict]:
        """Drops `run_id`'s lease; returns the live holders left."""
        self._unlink(self._dir(key16) / "leases" / f"{_SAFE.sub('_', run_id)}.json")
        return self.holders(key16)

    def leased_by(self, run_id: str) -> list[str]:
        """The keys `run_id` holds a lease on."""
        name = f"{_SAFE.sub('_', run_id)}.json"
        return [k for k in self.keys() if (self._dir(k) / "leases" / name).is_file()]

    def keep(self, key16: str) -> None:
        self._dir(key16).mkdir(parents=True, exist_ok=True)
        (self._dir(key16) / "keep").touch()

    def kept(self, key16: str) -> bool:
        return (self._dir(key16) / "keep").is_file()


def serves_key(job: dict, key16: str) -> bool:
    """Slurm's record of a job (scontrol show job) is this key's server allocation, of this user."""
    uid = job.get("UserId", "")
    return job.get("JobName") == f"perfdag-serve-{key16}" and (not uid or uid.endswith(f"({os.getuid()})"))


def published(store: ArtifactStore) -> list[tuple[str, list[dict]]]:
    """(key16, server records) of every published LaunchServers artifact."""
    out = []
    for f in sorted((store.root / "LaunchServers").glob("*/servers.json")):
        recs = records.read_servers(f, store.root, inside=store.root / "LaunchServers")
        if recs is not None:
            out.append((f.parent.name, recs))
    return out


def list_servers(root: Path) -> list[dict]:
    """One row per server recorded under the artifacts root `root`: its state and who holds it."""
    store = ArtifactStore(root)
    registry = ServerRegistry(store.root)
    rows, seen = [], set()
    for rec in registry.records():
        key16 = rec["key16"]
        seen.add((key16, rec.get("pid")))
        state = "ready" if servers_live([rec]) else ("running" if is_ours(rec) or running_elsewhere(rec) else "gone")
        rows.append(_row(key16, rec, state, registry))
    for key16, recs in published(store):
        for rec in recs:
            if (key16, rec.get("pid")) in seen or not (rec.get("external") or is_ours(rec)):
                continue
            live = servers_live([rec])
            if rec.get("external") and not live and not registry.holders(key16):
                continue  # an endpoint someone else ran, gone and used by no run: history, not a server
            rows.append(_row(key16, rec, "ready" if live else "down", registry))
    return rows


def _row(key16: str, rec: dict, state: str, registry: ServerRegistry) -> dict:
    holders = registry.holders(key16)
    return {"key": key16, "pid": rec.get("pid"), "address": f"{rec['host']}:{rec.get('port', rec.get('grpc_port'))}",
            "protocol": rec.get("protocol", "triton-grpc"), "models": rec.get("models", []),
            "external": bool(rec.get("external")), "state": state, "kept": registry.kept(key16),
            "held_by": [h["run_id"] for h in holders]}


def stop_servers(root: Path, key16: str | None) -> list[int]:
    """Stops the servers of one LaunchServers key, or of all when key16 is None (leases or not:
    the user asked), and removes the shared memory of dead ones."""
    store = ArtifactStore(root)
    registry = ServerRegistry(store.root)
    stopped: list[int] = []
    keys = [key16] if key16 else sorted(set(registry.keys()) | {k for k, _ in published(store)})
    for k in keys:
        with store.lock("LaunchServers", k):
            stopped += registry.stop(k)
            for kk, recs in published(store):
                if kk == k:
                    stopped += stop_recorded(recs)
    registry.sweep_dead()
    return sorted(set(stopped))
