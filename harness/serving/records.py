"""Server, lease and allocation records read back from the artifacts root, as untrusted input.

Whoever can write under the root can edit what perfdag wrote there earlier, so a record is never
trusted for what it names. Each is parsed with a strict schema: exact JSON types, a launch token
and a shared-memory prefix of perfdag's own shape, a log path inside its artifact, a Slurm job id
that is a number. Whether a recorded process is perfdag's is then decided from the process itself
(processes.is_own_process), never from the record. A record that does not parse is reported once,
one line naming the file, and never acted on: nothing is signalled, deleted or probed for it.
"""
from __future__ import annotations

import contextlib
import json
import logging
import re
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Iterator, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.errors import MAX_LINE, InputError
from harness.host.files import read_regular
from harness.serving.processes import TOKEN
from harness.serving.shm import is_shm_prefix

log = logging.getLogger("perfdag")
MAX_BYTES = 1 << 20  # a record is a few hundred bytes (a servers.json a few KiB): more is not a record


def _matching(pattern: re.Pattern, what: str):
    def check(v: str) -> str:
        if not pattern.fullmatch(v):
            raise ValueError(f"not {what}")
        return v
    return AfterValidator(check)


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


Text = Annotated[str, Field(min_length=1, max_length=4096)]
Port = Annotated[int, Field(ge=1, le=65535)]
Time = Annotated[float, Field(allow_inf_nan=False, ge=0)]
JobId = Annotated[str, _matching(re.compile(r"[0-9]{1,20}"), "a Slurm job id (digits)")]
RunId = Annotated[str, _matching(re.compile(r"[A-Za-z0-9_.:-]{1,128}"), "a run id")]


class StrictRecord(BaseModel):
    # Exact types; fields this perfdag does not know are dropped, never acted on.
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class ServerRecord(StrictRecord):
    """One server: `.servers/<key16>/procs/*.json`, or an entry of a LaunchServers artifact's servers.json."""
    external: bool = False
    host: Text
    port: Port | None = None
    grpc_port: Port | None = None
    http_port: Port | None = None
    metrics_port: Port | None = None
    protocol: Literal["triton-grpc", "openai-http"] = "triton-grpc"
    models: list[Annotated[str, Field(max_length=4096)]] = Field(max_length=1024)  # '' = the server's one model
    pid: Annotated[int, Field(gt=0)] | None = None
    create_time: Time | None = None
    token: Annotated[str, _matching(TOKEN, "a launch token (32 hex digits)")] | None = None
    shm_prefix: Annotated[str, AfterValidator(_shm_prefix)] | None = None
    log: Annotated[str, AfterValidator(_inside)] | None = None
    node: Text | None = None
    slurm_job: JobId | None = None
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
    since: Time | None = None


class AllocationRecord(StrictRecord):
    """The Slurm allocation holding servers: `.servers/<key16>/slurm.json`."""
    job_id: JobId
    run_id: RunId | None = None
    log: str | None = None
    submitted_at: Time | None = None


# --- reporting --------------------------------------------------------------------------------
_reported: set[str] = set()
_sinks: list[list[str]] = []


def ignored(source, why: str) -> None:
    """Reports a record perfdag will not act on: once per process, one line naming the file (to the
    innermost `collected()` list, else as a warning of the 'perfdag' logger)."""
    line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in f"ignoring {source}: {why}")  # one line
    if len(line) > MAX_LINE:
        line = line[:MAX_LINE] + "..."
    if line in _reported:
        return
    _reported.add(line)
    if _sinks:
        _sinks[-1].append(line)
    else:
        log.warning("%s", line)


@contextlib.contextmanager
def collected() -> Iterator[list[str]]:
    """Collects the lines `ignored` reports meanwhile (gc prints them with its report)."""
    sink: list[str] = []
    _sinks.append(sink)
    try:
        yield sink
    finally:
        _sinks.remove(sink)


def _problems(err: ValidationError) -> str:
    out = []
    for e in err.errors()[:3]:
        where = ".".join(str(x) for x in e["loc"]) or "record"
        out.append(f"{where}: {e['msg'].removeprefix('Value error, ')}")
    more = len(err.errors()) - 3
    return "; ".join(out) + (f" (and {more} more)" if more > 0 else "")


# --- reading ------------------------------------------------------------------------------------
class _Unreadable(Exception):
    pass


def _read_json(path: Path, inside: Path | None):
    """The JSON document in `path`: a regular file that is no link (harness.host.files: no FIFO or device,
    at most MAX_BYTES read) and, with `inside`, really under that directory. FileNotFoundError when it
    is gone (no report)."""
    if inside is not None:
        try:
            real, base = path.resolve(), Path(inside).resolve()
        except (OSError, RuntimeError) as e:
            raise _Unreadable(str(e)) from None
        if real != base and base not in real.parents:
            raise _Unreadable(f"it lies outside {inside} (a link leads out)")
    if path.is_symlink():
        raise _Unreadable("a symbolic link, not a record")
    try:
        data = read_regular(path, "record", MAX_BYTES, "a record is a few KiB")
    except InputError as e:
        raise _Unreadable(str(e).removeprefix(f"record {path}: ")) from None
    except FileNotFoundError:
        raise
    except OSError as e:
        raise _Unreadable(e.strerror or str(e)) from None
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:
        raise _Unreadable(f"not JSON ({e})") from None


M = TypeVar("M", bound=StrictRecord)


def parse(model: type[M], doc, source) -> dict | None:
    """`doc` as `model` (the fields it holds, checked), or None after reporting why not."""
    try:
        return model.model_validate(doc).model_dump(exclude_unset=True)
    except ValidationError as e:
        ignored(source, f"malformed {model.__name__.removesuffix('Record').lower()} record ({_problems(e)}); "
                        "perfdag does not act on it")
        return None


def read(model: type[M], path: Path, inside: Path | None = None) -> dict | None:
    """The record in `path`, checked; None when it is absent, or unreadable or malformed (reported)."""
    try:
        doc = _read_json(Path(path), inside)
    except FileNotFoundError:
        return None
    except _Unreadable as e:
        ignored(path, f"{e}; perfdag does not act on it")
        return None
    return parse(model, doc, path)


def servers_of(doc, source) -> list[dict] | None:
    """The server records of a servers.json document (or a manifest's `servers`): all of them
    checked, or None (reported) when any is malformed: half a launch is not acted on either."""
    if isinstance(doc, dict):
        doc = doc.get("servers")
    if not isinstance(doc, list) or len(doc) > 4096:
        ignored(source, "malformed servers file (no list of servers); perfdag does not act on it")
        return None
    out = []
    for i, item in enumerate(doc):
        rec = parse(ServerRecord, item, f"{source} (server {i})")
        if rec is None:
            return None
        out.append({**rec, "_file": str(source)})
    return out


def read_servers(path: Path, inside: Path | None = None) -> list[dict] | None:
    """The records of a LaunchServers artifact's servers.json; None when absent or not acted on."""
    try:
        doc = _read_json(Path(path), inside)
    except FileNotFoundError:
        return None
    except _Unreadable as e:
        ignored(path, f"{e}; perfdag does not act on it")
        return None
    return servers_of(doc, path)


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
