"""A per-stage index of what the store holds, so listing a root does not parse every manifest.

`<root>/<Stage>/.index.jsonl` has one line per published artifact (`<Stage>/<key16>/`) and kept observation
(`observations/<Stage>/<key16>/<id>/`) of the stage: its key, run, finished time, size, upstream keys, the
manifest's stat and digest, and `fields` (one 64-bit number per key input: params, tools, upstream, code,
executed) from which `status` finds the closest cached artifact without reading every manifest
(harness/cache/closest.py). The store appends a line when it publishes, archives or moves an artifact aside, gc
when it deletes, each under the stage's index lock (a flock, as the keys' locks are) and while it still holds the
key's lock, so two hosts on one root append in the order their renames happened.

The index only speeds up listing; it never vouches for an artifact (reuse still checks its manifest and files).
It is read as untrusted input: a bounded read, every line parsed and type-checked, and compared with the root
(every directory of the stage has its line, every line its directory, and every manifest's stat, inode and
ctime included, is the one recorded). Anything else (missing, truncated, edited, a line naming another key or
a manifest since replaced, a publish killed before its line) and the index is rebuilt from the manifests:
in memory by a reader that may not write (`status`), and written by gc and the next publish of a stage
without one. `entries(verify=True)` also compares every line with a fresh reading of its manifest (gc --delete
plans from it).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from filelock import FileLock

from harness.cache.integrity import MANIFEST
from harness.cache.observations import OBSERVATIONS, is_id
from harness.errors import InputError
from harness.untrusted import jsonio
from harness.untrusted.files import read_regular

INDEX = ".index.jsonl"
#: An index line is about 1-3 KiB; a stage of a million artifacts stays under this.
MAX_INDEX_BYTES = 4 << 30
#: A manifest lists every file with its digest: tens of KiB for a big engine, far less than this.
MAX_MANIFEST_BYTES = 64 << 20
SECTIONS = ("params", "tools", "upstream", "code", "executed")  # the key inputs status compares
_KEY16 = re.compile(r"[0-9a-f]{16}")
_HEADER = {"perfdag_index": 1}
_INT = {int}  # `set(map(type, xs)) <= _INT`: every x an int, never a bool (as `type(x) is int`), in C


def lock_file(root: Path, stage: str) -> Path:
    """The flock writers of a stage's index take (beside the keys' locks: no key16 is named 'index')."""
    return Path(root) / stage / ".locks" / "index.lock"


@contextmanager
def locked(root: Path, stage: str) -> Iterator[None]:
    p = lock_file(root, stage)
    p.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(p)):
        yield


def _h(text: str, bits: int) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") >> (64 - bits)


def flatten(doc, prefix: str = "") -> dict:
    if isinstance(doc, dict) and doc:
        out: dict = {}
        for k, v in doc.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: doc}


def key_fields(doc: dict) -> dict[str, object]:
    """The key inputs as status compares them: `code.<module>` whole, every other section flattened to leaves."""
    out: dict[str, object] = {}
    for section in SECTIONS:
        value = doc.get(section) or {}
        if section == "code" and isinstance(value, dict):
            out.update({f"code.{mod}": v for mod, v in value.items()})
        else:
            out.update(flatten({section: value}))
    return out


def field_hashes(doc: dict) -> list[int]:
    """Each key input as one number: 24 bits of its name, 40 of its value (canonical JSON)."""
    return sorted((_h(name, 24) << 40) | _h(json.dumps(v, sort_keys=True, default=str), 40)
                  for name, v in key_fields(doc).items())


def distance(now: list[int], then: list[int]) -> int:
    """How many key inputs differ (present on one side only, or with another value): status's count."""
    a, b = set(now), set(then)
    names = {h >> 40 for h in a} | {h >> 40 for h in b}
    return len(names) - len(a & b)


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _size(m: dict, manifest_bytes: int) -> int | None:
    """What the artifact occupies as gc counts it (files, links, manifest), from its manifest; None when the
    manifest cannot say (older layout, or volatile files that grow after publishing)."""
    files, links = m.get("files"), m.get("links") or {}
    if not isinstance(files, dict) or not isinstance(links, dict) or m.get("volatile"):
        return None
    try:
        return manifest_bytes + sum(int(f["size"]) for f in files.values()) + \
            sum(len(os.fsencode(str(t))) for t in links.values())
    except (TypeError, KeyError, ValueError):
        return None


def describe(rel: str, data: bytes | None, st: os.stat_result | None) -> dict:
    """The index line of the directory `rel` (under the stage; `obs/<key16>/<id>` for an observation) whose
    manifest has bytes `data` and stat `st` (None, None: it has no readable manifest)."""
    m = None
    if data is not None:
        try:
            m = jsonio.loads(data)
        except jsonio.NotJson:
            m = None
    if not isinstance(m, dict):
        return {"d": rel, "stamp": _stamp(st) if st else None, "manifest": False}
    ups = m.get("upstream")
    return {"d": rel, "stamp": _stamp(st), "manifest": True,
            "digest": hashlib.blake2b(data, digest_size=16).hexdigest(),
            "key": m.get("key") if isinstance(m.get("key"), str) else None,
            "run_id": m.get("run_id") if isinstance(m.get("run_id"), (str, type(None))) else repr(m.get("run_id")),
            "finished_at": m.get("finished_at") if isinstance(m.get("finished_at"), (str, type(None))) else None,
            "odd": not (isinstance(m.get("run_id"), (str, type(None))) and
                        isinstance(m.get("finished_at"), (str, type(None)))),
            "upstream": [v for v in ups.values() if isinstance(v, str)] if isinstance(ups, dict) else [],
            "size": _size(m, len(data)), "fields": field_hashes(m)}


# --- where a stage's directories are --------------------------------------------------------------
def subdirs(d: Path) -> list[str]:
    """The names of `d`'s subdirectories; a link is none (the entry's type as readdir gives it: no stat per name)."""
    try:
        return [e.name for e in os.scandir(d) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def artifact_name(name: str) -> bool:
    """Whether `name` is a published artifact's directory name (a key's first 16 hex digits)."""
    return bool(_KEY16.fullmatch(name))


def artifact_dirs(root: Path, stage: str) -> list[str]:
    """The names of the stage's published artifacts' directories (`<key16>`), sorted."""
    return sorted(n for n in subdirs(root / stage) if _KEY16.fullmatch(n))


def stamp_now(manifest: str) -> list[int] | None:
    """The stat a line records of the manifest at path `manifest` (`stamp`), as it is now; None: none there."""
    try:
        s = os.lstat(manifest)
    except OSError:
        return None
    return [s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns]


def listing(root: Path, stage: str) -> list[str]:
    """Every directory of `stage` an index line describes: `<key16>` and `obs/<key16>/<id>`."""
    out = [n for n in subdirs(root / stage) if _KEY16.fullmatch(n)]
    obs = root / OBSERVATIONS / stage
    if not obs.is_symlink():
        for k in subdirs(obs):
            if _KEY16.fullmatch(k):
                out += [f"obs/{k}/{i}" for i in subdirs(obs / k) if is_id(i)]
    return sorted(out)


def directory(root: Path, stage: str, rel: str) -> Path:
    return root / OBSERVATIONS / stage / rel[4:] if rel.startswith("obs/") else root / stage / rel


def rel_of(root: Path, stage: str, d: Path) -> str | None:
    """The index name of directory `d` of `stage` (None: not one the index lists)."""
    try:
        parts = Path(d).relative_to(root).parts
    except ValueError:
        return None
    if len(parts) == 2 and parts[0] == stage and _KEY16.fullmatch(parts[1]):
        return parts[1]
    if len(parts) == 4 and parts[:2] == (OBSERVATIONS, stage) and _KEY16.fullmatch(parts[2]) and is_id(parts[3]):
        return f"obs/{parts[2]}/{parts[3]}"
    return None


def read_manifest(d: Path) -> tuple[bytes | None, os.stat_result | None]:
    f = d / MANIFEST
    try:
        st = os.lstat(f)
        if not stat.S_ISREG(st.st_mode):
            return None, st
        return read_regular(f, "manifest", MAX_MANIFEST_BYTES, "a manifest is a few KiB"), st
    except (OSError, InputError):
        return None, None


def entry_of(root: Path, stage: str, rel: str) -> dict:
    return describe(rel, *read_manifest(directory(root, stage, rel)))


def rebuild(root: Path, stage: str) -> dict[str, dict]:
    """Every line of `stage`'s index from the manifests themselves."""
    return {rel: entry_of(root, stage, rel) for rel in listing(root, stage)}


# --- reading ----------------------------------------------------------------------------------------
def _line_ok(e) -> bool:
    if not isinstance(e, dict) or not isinstance(e.get("d"), str):
        return False
    if e.get("op") == "del":
        return True
    st = e.get("stamp")
    if not (st is None or (isinstance(st, list) and len(st) == 4 and set(map(type, st)) <= _INT)):
        return False
    if e.get("manifest") is False:
        return True
    key, fields = e.get("key"), e.get("fields")
    return (isinstance(key, (str, type(None))) and isinstance(e.get("digest"), str) and st is not None
            and isinstance(e.get("upstream"), list) and all(isinstance(u, str) for u in e["upstream"])
            and (e.get("size") is None or type(e.get("size")) is int)
            and isinstance(fields, list) and set(map(type, fields)) <= _INT
            and all(isinstance(e.get(f), (str, type(None))) for f in ("run_id", "finished_at")))


_OBS_LINE = b'{"d":"obs/'  # how `_write` and `record` begin an observation's line (compact separators)
_FIELDS = b',"fields":['  # and how they end every line with a manifest: `fields` last (describe's order)
_UINTS = re.compile(rb"(?:(?:0|[1-9][0-9]*)(?:,(?:0|[1-9][0-9]*))*)?")  # JSON's non-negative ints, comma-separated


def _loads(line: bytes, fields: bool) -> dict:
    """One line parsed; without `fields`, a line ending in a `fields` list of plain integers (every line perfdag
    writes) is parsed without it (most of a line's bytes; gc's dry run never reads it), the list checked by a regex
    for exactly what `_line_ok` would have taken. Any other line is parsed whole."""
    if not fields and line.endswith(b"]}") and (i := line.rfind(_FIELDS)) > 0 \
            and _UINTS.fullmatch(line, i + len(_FIELDS), len(line) - 2):
        e = json.loads(line[:i] + b"}")
        if isinstance(e, dict):
            e["fields"] = _UNREAD
        return e
    return json.loads(line)


class _Unread(list):
    """`fields` of a line read without them (checked, not kept): a list of no ints, so `_line_ok` takes it."""


_UNREAD = _Unread()


def read(root: Path, stage: str, *, artifacts_only: bool = False, fields: bool = True) -> dict[str, dict] | None:
    """The index's lines (by directory) as written, or None when it is missing or malformed. `artifacts_only`
    (status's closest, which reads no observation): an observation's line is skipped unparsed, and so unchecked;
    the caller compares only the artifacts' lines with the root (`consistent(..., artifacts_only=True)`). Without
    `fields`, each line's `fields` is checked but not parsed (`_loads`): an empty list stands for it."""
    path = Path(root) / stage / INDEX
    try:
        data = read_regular(path, "index", MAX_INDEX_BYTES, "rebuilt from the manifests")
    except (OSError, InputError):
        return None
    lines = data.split(b"\n")
    if lines[-1] != b"" or not lines[0]:  # a torn last line: a writer killed mid-write
        return None
    out: dict[str, dict] = {}
    for i, line in enumerate(lines[:-1]):
        if artifacts_only and line.startswith(_OBS_LINE):
            continue
        try:  # no depth walk (jsonio's): `_line_ok` takes only flat lines of exact types
            e = _loads(line, fields or i == 0)
        except (ValueError, RecursionError):
            return None
        if i == 0:
            if e != _HEADER:
                return None
            continue
        if not _line_ok(e):
            return None
        if e.get("op") == "del":
            out.pop(e["d"], None)
        elif not (artifacts_only and e["d"].startswith("obs/")):
            out[e["d"]] = e
    return out


def consistent(root: Path, stage: str, entries: dict[str, dict], *, artifacts_only: bool = False) -> bool:
    """Whether the index names exactly the stage's directories (`artifacts_only`: its published artifacts'), each
    with the manifest recorded (its stat), and each artifact's key where its directory says. Paths as strings: this
    runs once per item of a root on every listing."""
    want = artifact_dirs(root, stage) if artifacts_only else listing(root, stage)
    if sorted(entries) != want:
        return False
    base, obs = f"{root}/{stage}/", f"{root}/{OBSERVATIONS}/{stage}/"  # (os.path.join per item: a large root's cost)
    for rel, e in entries.items():
        in_obs = rel.startswith("obs/")
        if stamp_now(f"{obs}{rel[4:]}/{MANIFEST}" if in_obs else f"{base}{rel}/{MANIFEST}") != e.get("stamp"):
            return False
        key = e.get("key")
        if e.get("manifest") and key is not None and key[:16] != rel.split("/")[-2 if in_obs else 0]:
            return False
    return True


def entries(root: str | os.PathLike, stage: str, *, write: bool = False, verify: bool = False,
            fields: bool = True) -> dict[str, dict]:
    """The stage's index lines by directory, checked against the root (and, with `verify`, every manifest's
    lines against a fresh reading of them); rebuilt from the manifests when they do not hold, and then written when
    `write`. Without `fields` (a reader that compares no key inputs: gc's dry run, a key prefix), a line's `fields`
    may be an empty list (`read`)."""
    root = Path(root)
    got = read(root, stage, fields=fields or verify)
    if got is not None and consistent(root, stage, got) and (not verify or _lines_hold(root, stage, got)):
        return got
    if not write or not (root / stage).is_dir():
        return rebuild(root, stage)
    with locked(root, stage):
        fresh = rebuild(root, stage)
        _write(root, stage, fresh)
    return fresh


def _lines_hold(root: Path, stage: str, got: dict[str, dict]) -> bool:
    """Every line is what its manifest gives now (every manifest read: the cost of a rebuild)."""
    return all(entry_of(root, stage, rel) == e for rel, e in got.items())


# --- writing (under the stage's index lock) --------------------------------------------------------------
def _write(root: Path, stage: str, lines: dict[str, dict]) -> None:
    path = root / stage / INDEX
    tmp = path.with_name(f"{INDEX}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(_HEADER) + "\n")
        for rel in sorted(lines):
            f.write(json.dumps(lines[rel], separators=(",", ":")) + "\n")
    os.replace(tmp, path)


def _ends_whole(path: Path) -> bool:
    """The index exists as a regular file whose last line is whole (readers check the rest)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        return stat.S_ISREG(st.st_mode) and st.st_size > 0 and os.pread(fd, 1, st.st_size - 1) == b"\n"
    finally:
        os.close(fd)


def record(root: str | os.PathLike, stage: str, dirs: list[Path], gone: list[Path] = ()) -> None:
    """Appends the lines of directories just published (`dirs`, from their manifests) and just removed (`gone`).
    Call while holding their key's lock. A stage without an index gets a whole one, rebuilt."""
    root = Path(root)
    with locked(root, stage):
        path = root / stage / INDEX
        if not _ends_whole(path):  # missing, or a writer killed mid-line: appending would not make it whole
            _write(root, stage, rebuild(root, stage))
            return
        out = [json.dumps({"op": "del", "d": r}) for d in gone if (r := rel_of(root, stage, d))]
        out += [json.dumps(entry_of(root, stage, r), separators=(",", ":")) for d in dirs
                if (r := rel_of(root, stage, d))]
        if out:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.write(fd, ("\n".join(out) + "\n").encode())
            finally:
                os.close(fd)
