"""Server, lease and allocation records read back from the artifacts root, as untrusted input.

Whoever can write under the root can edit what perfdag wrote there earlier, so a record is never
trusted for what it names. Each is parsed with a strict schema: exact JSON types, a launch token
and a shared-memory prefix of perfdag's own shape, a log path inside its artifact, a Slurm job id
that is a number. Whether a recorded process is perfdag's is then decided from the process itself
(processes.is_own_process), never from the record, and for the root the record was read from: each
record read is stamped with that root's identity (`_root_id`, which no field of the file can set), so a
record copied from another root never names a process of this one. A record that does not parse is
reported once, one line naming the file, and never acted on: nothing is signalled, deleted or probed
for it.
"""
from __future__ import annotations

import contextlib
import logging
import re
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from harness.serving.processes import TOKEN, root_id
from harness.serving.shm import is_shm_prefix
from harness.untrusted.records import RunId, StrictRecord, Text, Time, Unreadable, ignored, matching, parse, read_json

log = logging.getLogger("perfdag")



def _shm_prefix(v: str) -> str:
    if not is_shm_prefix(v):
        raise ValueError("not a shared-memory prefix perfdag makes (perfdag<letters, digits, _>_: a plain name "
                         "directly under /dev/shm)")
    return v


def _inside(v: str) -> str:
    p = PurePosixPath(v)
    if not v or p.is_absolute() or ".." in p.parts or "\0" in v:
        raise ValueError("not a relative path inside the artifact (absolute, or with '..')")
    return v


Port = Annotated[int, Field(ge=1, le=65535)]
JobId = Annotated[str, matching(re.compile(r"[0-9]{1,20}"), "a Slurm job id (digits)")]



class ServerRecord(StrictRecord):
    """One server: `.servers/<key16>/procs/*.json`, or an entry of a LaunchServers artifact's servers.json."""
    external: bool = False
    host: Text
    port: Port | None = None
    grpc_port: Port | None = None
    http_port: Port | None = None
    metrics_port: Port | None = None
    # the names of serving/protocols.py's records (not imported: that would put the protocols' table in
    # the key of every stage that reads records; tests/test_triton_generate.py checks they agree)
    protocol: Literal["triton-grpc", "triton-generate", "openai-http", "openai-chat", "openai-transcription"] = "triton-grpc"
    models: list[Annotated[str, Field(max_length=4096)]] = Field(max_length=1024)  # '' = the server's one model
    pid: Annotated[int, Field(gt=0)] | None = None
    create_time: Time | None = None
    token: Annotated[str, matching(TOKEN, "a launch token (32 hex digits)")] | None = None
    shm_prefix: Annotated[str, AfterValidator(_shm_prefix)] | None = None
    log: Annotated[str, AfterValidator(_inside)] | None = None
    node: Text | None = None
    slurm_job: JobId | None = None   # the allocation the servers live in (slurm.serve)
    launch_job: JobId | None = None  # the Slurm job that launched them in place (a Sweep's array task)
    # In a serving layout: its role, and the Slurm node it runs on through `srun --overlap` (the
    # recorded pid is that step's client, on `node`). Named in errors; never acted on.
    role: Literal["server", "context", "generation", "router"] | None = None
    instance_node: Text | None = None
    # What was run, kept for people: never acted on, so any JSON is accepted.
    mode: Any = None
    repo: Any = None
    cmd: Any = None
    env: Any = None
    key16: Any = None

    @model_validator(mode="after")
    def _has_a_port(self):
        if self.port is None and self.grpc_port is None:
            raise ValueError("no port")
        return self


class LeaseRecord(StrictRecord):
    """A run's lease on servers: `.servers/<key16>/leases/<run id>.json`."""
    run_id: RunId
    pid: Annotated[int, Field(gt=0)]
    create_time: Time | None = None
    host: str | None = None
    node: Text | None = None       # inside a Slurm job: its node, and the job (alive while it runs there)
    slurm_job: JobId | None = None
    since: Time | None = None


class AllocationRecord(StrictRecord):
    """The Slurm allocation holding servers: `.servers/<key16>/slurm.json`."""
    job_id: JobId
    run_id: RunId | None = None
    log: str | None = None
    submitted_at: Time | None = None



def stamp_of(root: Path | None) -> dict:
    """What a record read under the artifacts root `root` is stamped with: that root's identity (None:
    read from nowhere in particular, so nothing it names is any root's to signal)."""
    if root is None:
        return {"_root_id": None}
    try:
        return {"_root_id": root_id(root)}
    except OSError:  # no such root: nothing it names is any root's
        return {"_root_id": None}


def servers_of(doc, source, root: Path | None = None, stamp: dict | None = None) -> list[dict] | None:
    """The server records of a servers.json document (or a manifest's `servers`) read under the
    artifacts root `root`: all of them checked, or None (reported) when any is malformed: half a
    launch is not acted on either. `stamp`: stamp_of(root), where the caller computed it once for many."""
    if isinstance(doc, dict):
        doc = doc.get("servers")
    if not isinstance(doc, list) or len(doc) > 4096:
        ignored(source, "malformed servers file (no list of servers); perfdag does not act on it")
        return None
    out, stamp = [], stamp if stamp is not None else stamp_of(root)
    for i, item in enumerate(doc):
        rec = parse(ServerRecord, item, f"{source} (server {i})")
        if rec is None:
            return None
        out.append({**rec, "_file": str(source), **stamp})
    return out


def as_written(rec: dict) -> dict:
    """A record as it is written down: without what perfdag stamps on it when reading (`_file`,
    `_root_id`), which no file may say."""
    return {k: v for k, v in rec.items() if not k.startswith("_")}


def read_servers(path: Path, root: Path | None, inside: Path | None = None) -> list[dict] | None:
    """The records of a LaunchServers artifact's servers.json under the artifacts root `root`; None when
    absent or not acted on."""
    try:
        doc = servers_doc(path, inside)
    except (FileNotFoundError, Unreadable):
        return None
    return servers_of(doc, path, root)


def servers_doc(path: Path, inside: Path | None = None):
    """The JSON document of a servers.json, not yet checked (servers_of checks it). FileNotFoundError when it is
    absent; Unreadable, reported, when it is not acted on (a link, not JSON, outside `inside`...)."""
    try:
        return read_json(Path(path), inside)
    except Unreadable as e:
        ignored(path, f"{e}; perfdag does not act on it")
        raise


def log_file(rec: dict, artifact_dir: Path) -> Path | None:
    """The record's server log, when it really lies inside `artifact_dir` (no link leading out)."""
    rel = rec.get("log")
    if not isinstance(rel, str) or not rel:
        return None
    with contextlib.suppress(ValueError):
        _inside(rel)
        path = Path(artifact_dir) / rel
        real, base = path.resolve(), Path(artifact_dir).resolve()
        if base in real.parents and real.is_file():
            return real
    return None
