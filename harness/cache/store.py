"""The content-addressed artifact store: artifacts/<Stage>/<key16>/, published atomically.

A result is a directory holding manifest.json, moved into place by one rename, so a reader never
sees a half-built one. The manifest lists every published file with its size, mtime and digest
(harness/cache/integrity.py), so reuse can tell a corrupted or edited artifact from a good one. Builds
run in `.tmp-*` siblings under a per-key flock, which the kernel releases when the holder dies,
so a killed worker leaves no lock that blocks anyone. With a signing key (harness/cache/signing.py) every
manifest is signed at publish, and one without a valid signature is not trusted. A measuring stage's
key keeps every observation (harness/cache/observations.py): publishing a new one archives the last.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import tempfile
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Iterator

from filelock import FileLock, Timeout

from harness.cache import closest, index, integrity, observations, signing, verified
from harness.errors import ArtifactError, PerfdagError
from harness.untrusted import jsonio

MANIFEST = integrity.MANIFEST
# A disk that fills or fails while an artifact is written: one line, not a traceback.
STORAGE_ERRNOS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
                  errno.EIO: "I/O error", errno.EROFS: "read-only file system"}


class PublishError(PerfdagError, OSError):
    """An artifact could not be written or published: the path, and the space it needs."""


def _tree_bytes(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def publish_error(stage: str, key: str, e: OSError, tmp: Path, final: Path, root: Path) -> PublishError:
    """The one line for a disk that failed under a build: the path, what the build had written
    (a lower bound of the space it needs) and what is free."""
    where = e.filename or final  # a failed write() names no file: the artifact being written
    written = _tree_bytes(tmp)
    try:
        free = _human(shutil.disk_usage(root).free)
    except OSError:
        free = "unknown"
    fix = (f"free more than {_human(written)} under {root} (the artifact had {_human(written)} when the disk "
           f"filled; {free} free now) and rerun") if e.errno in (errno.ENOSPC, errno.EDQUOT) else \
        f"check the disk under {root} and rerun"
    return PublishError(f"{stage} {key[:16]}: cannot write {where}: {STORAGE_ERRNOS[e.errno]}; {fix}")


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def finished_at(manifest: dict | None) -> str:
    """When a manifest says its artifact was published, as it wrote it (`utc_now`); "" when it says
    nothing usable: manifests are listed and sorted before they are verified, and a forged one may
    hold any JSON there."""
    value = (manifest or {}).get("finished_at")
    return value if isinstance(value, str) else ""


def _remove(path: Path) -> None:
    """Removes a tree, or a file or link, never following a link."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


class ArtifactStore:
    def __init__(self, root: str | os.PathLike, signing_key: bytes | None = None):
        self.root = Path(root).resolve()
        self.signing_key = signing_key

    def path(self, stage: str, key: str) -> Path:
        return self.root / stage / key[:16]

    def manifest(self, stage: str, key: str) -> dict | None:
        """The published manifest, or None. A prefix collision (other full key) is not ours."""
        f = self.path(stage, key) / MANIFEST
        try:
            m = jsonio.loads(f.read_bytes())
        except (FileNotFoundError, NotADirectoryError, jsonio.NotJson):
            return None
        return m if isinstance(m, dict) and m.get("key") == key else None

    def is_published(self, stage: str, key: str) -> bool:
        return self.manifest(stage, key) is not None

    def manifests(self, stage: str) -> list[dict]:
        """Every published manifest of a stage, newest first."""
        out = []
        for f in (self.root / stage).glob(f"*/{MANIFEST}"):
            try:
                m = jsonio.loads(f.read_bytes())
            except (OSError, jsonio.NotJson):
                continue
            if isinstance(m, dict):
                m["_dir"] = str(f.parent)
                out.append(m)
        return sorted(out, key=lambda m: (finished_at(m), m["_dir"]), reverse=True)

    def closest(self, stage: str, key_doc: dict) -> dict | None | bool:
        """The published manifest of `stage` whose key inputs are closest to `key_doc`'s, found from the stage's
        index (harness/cache/closest.py); None: none published; False: the index's pick is not what is published
        (read `manifests` instead)."""
        return closest.closest(self.root, stage, key_doc)

    def problems(self, stage: str, key: str, manifest: dict, *, full: bool = False,
                 where: Path | None = None) -> list[str]:
        """How the artifact on disk (at `where`, default its key's path) differs from what was
        published, or why its manifest is not trusted (empty: intact)."""
        if why := signing.problem(manifest, self.signing_key):
            return [why]
        files, links = manifest.get("files"), manifest.get("links") or {}
        if not isinstance(files, dict) or not isinstance(links, dict):
            return ["manifest lists no files (published by an older perfdag); rebuild it"]
        return integrity.problems(where or self.path(stage, key), files, links=links, full=full,
                                  skip=manifest.get("volatile", ()))

    # --- observations (harness/cache/observations.py) ------------------------------------------
    def observations(self, stage: str, key: str) -> list[dict]:
        """Every observation of a key, newest first: {"id", "dir", "latest", "manifest" (None when
        unreadable)}. The latest is the published artifact; the others are archived. `read` names the manifest's
        bytes as read (harness/cache/verified.py; None where it is no plain file read whole)."""
        out = []
        latest, read = verified.read_manifest(self.path(stage, key))
        if latest is None:  # a link, or unreadable: read as before, never memoised
            latest, read = self.manifest(stage, key), None
        if latest is not None and latest.get("key") == key:
            out.append({"id": observations.id_of(latest), "dir": self.path(stage, key), "latest": True,
                        "manifest": latest, "read": read})
        base = observations.archive_dir(self.root, stage, key)
        for obs in observations.archived_ids(self.root, stage, key):
            m, read = verified.read_manifest(base / obs)
            if m is None:
                try:
                    m = jsonio.loads((base / obs / MANIFEST).read_bytes())
                except (OSError, jsonio.NotJson):
                    m = None
            out.append({"id": obs, "dir": base / obs, "latest": False, "manifest": m if isinstance(m, dict) else None,
                        "read": read})
        return sorted(out, key=lambda o: (o["latest"], finished_at(o["manifest"]), observations.sequence(o["id"])),
                      reverse=True)

    def observation_problems(self, stage: str, key: str, obs: dict, *, full: bool = True) -> list[str]:
        """Why an observation (an entry of `observations`) must not be read as what it claims to be:
        its manifest is unreadable, names another key or another observation id than where it lies,
        is not signed as required, or its files differ from what was published (re-hashed: `full`). A full check
        that found it intact is memoised by the identity of every path it read (harness/cache/verified.py), and
        taken from there while none of them has moved."""
        memo = (stage, key, obs["dir"], self.signing_key)
        if full and verified.intact(obs.get("read"), *memo):
            return []
        seen = self._read_paths(obs["manifest"], Path(obs["dir"])) if full and obs.get("read") else None
        out = self._observation_problems(stage, key, obs, full=full)
        if seen is not None and not out:
            verified.remember(obs["read"], *memo, seen)
        return out

    def _read_paths(self, m: dict | None, where: Path) -> list[tuple[str, list | None]]:
        """What the full check of the observation at `where` reads, each with its identity now: its own tree, and
        where each observation it was made from is looked for (its key's published directory and its kept one)."""
        paths = verified.tree(where)
        observed = (m or {}).get("observed_from")
        for ident, obs_id in (observed.items() if isinstance(observed, dict) else ()):
            stage, _, key16 = str(ident).partition("/")
            if stage.isidentifier() and len(key16) == 16 and all(c in "0123456789abcdef" for c in key16) \
                    and observations.is_id(obs_id):
                paths += verified.tree(self.root / stage / key16)
                paths += verified.tree(observations.archive_dir(self.root, stage, key16) / obs_id)
        return [(p, verified.identity(p)) for p in dict.fromkeys(paths)]

    def _observation_problems(self, stage: str, key: str, obs: dict, *, full: bool) -> list[str]:
        m = obs["manifest"]
        if m is None:
            return ["no readable manifest.json"]
        if m.get("key") != key:
            return [f"its manifest names key {str(m.get('key'))[:16]}, not {key[:16]}: another key's observation"]
        if not obs["latest"] and observations.id_of(m) != obs["id"]:
            return [f"its manifest names observation {observations.id_of(m)}, not {obs['id']}: "
                    "another observation put in its place"]
        return self.problems(stage, key, m, full=full, where=Path(obs["dir"])) or self.evidence_problems(m, full=full)

    def find_observation(self, stage: str, key16: str, obs_id: str) -> dict | None:
        """Observation `obs_id` of the key starting with `key16`, published or kept (an entry as
        `observations` gives it); None where neither place holds one by that id."""
        latest = self.root / stage / key16
        try:
            m = json.loads((latest / MANIFEST).read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            m = None
        if isinstance(m, dict) and observations.id_of(m) == obs_id and str(m.get("key", ""))[:16] == key16:
            return {"id": obs_id, "dir": latest, "latest": True, "manifest": m}
        kept = observations.archive_dir(self.root, stage, key16) / obs_id
        if not kept.is_dir() or kept.is_symlink():
            return None
        try:
            m = json.loads((kept / MANIFEST).read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            m = None
        return {"id": obs_id, "dir": kept, "latest": False, "manifest": m if isinstance(m, dict) else None}

    def evidence_problems(self, manifest: dict, *, full: bool = True) -> list[str]:
        """Why the observations an observation was made from (its manifest's `observed_from`, which names
        every observation of its lineage: a report's measurement, its score and the accuracy log scored)
        no longer stand behind it: one gone, one whose files are not what was published (re-hashed:
        `full`), or one holding other content than `made_from` recorded. Reuse checks the same through
        its upstreams (tasks/trust.py); history and compare, which read kept observations, check it here.
        Empty: every one is intact."""
        observed, made = manifest.get("observed_from"), manifest.get("made_from")
        if not isinstance(observed, dict):
            return []
        made = made if isinstance(made, dict) else {}
        out: list[str] = []
        for ident, obs_id in observed.items():
            stage, _, key16 = str(ident).partition("/")
            if not (stage.isidentifier() and len(key16) == 16 and all(c in "0123456789abcdef" for c in key16)
                    and observations.is_id(obs_id)):
                out.append(f"made from {str(ident)[:40]!r}@{str(obs_id)[:40]!r}, which names no observation")
                continue
            found = self.find_observation(stage, key16, obs_id)
            m = (found or {}).get("manifest") or {}
            if found is None:
                why = ["gone"]
            elif not isinstance(m.get("key"), str):
                why = ["no readable manifest.json"]
            elif m["key"][:16] != key16 or observations.id_of(m) != obs_id:
                why = ["another observation put in its place"]
            elif why := self.problems(stage, m["key"], m, full=full, where=Path(found["dir"])):
                pass
            elif isinstance(made.get(ident), dict) and made[ident].get("content_digest") != m.get("content_digest"):
                why = ["holds other content than it was made from"]
            out += [f"{stage} {key16}@{obs_id} (what it was made from): {w}" for w in why]
        return out

    def move_aside(self, stage: str, key: str, dest: Path, finished_at: str | None) -> Path | None:
        """Moves a corrupt published artifact to `dest` (kept as evidence; `gc` ages it out), so the
        next build publishes afresh. Call under lock(). None, and nothing moved, when what is published
        now is not the artifact found corrupt (`finished_at` differs: rebuilt meanwhile)."""
        final = self.path(stage, key)
        m = self.manifest(stage, key)
        if m is None or m.get("finished_at") != finished_at or final.is_symlink():
            return None
        dest.parent.mkdir(parents=True, exist_ok=True)
        n, where = 1, dest
        while os.path.lexists(where):  # the same artifact twice in a run: keep both
            n += 1
            where = dest.with_name(f"{dest.name}-{n}")
        os.replace(final, where)  # under the root: one rename
        self._index(stage, [], gone=[final])
        return where

    def _index(self, stage: str, dirs: list[Path], gone: list[Path] = ()) -> None:
        """Tells the stage's index (harness/cache/index.py) what was just published or removed. Call under the
        key's lock. An index that cannot be written is only slower: readers find it inconsistent and rebuild it."""
        try:
            index.record(self.root, stage, dirs, gone)
        except OSError:
            pass

    @contextmanager
    def lock(self, stage: str, key: str) -> Iterator[None]:
        path = lock_path(self.root, stage, key[:16])
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path)):
            yield

    def _clear_stale_tmp(self, stage: str, key: str) -> None:
        # Only called under the key's lock: any tmp dir for this key is a dead builder's.
        for d in (self.root / stage).glob(f".tmp-{key[:16]}-*"):
            shutil.rmtree(d, ignore_errors=True)

    def build(self, stage: str, key: str, make: Callable[[Path], dict], manifest: dict,
              volatile: Iterable[str] = (), archive: bool = False) -> dict:
        """Builds the artifact in a temp dir and publishes it by one rename, replacing any old one
        (`archive`: an observation, which is kept under observations/ instead of removed).

        `make(tmp_dir)` fills the directory and returns extra manifest fields. Files under
        `volatile` (e.g. logs a running server keeps writing) are not checksummed. Call under lock().
        """
        self._clear_stale_tmp(stage, key)
        final = self.path(stage, key)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key[:16]}-", dir=final.parent))
        started, t0 = utc_now(), time.monotonic()
        try:
            extra = make(tmp) or {}
            volatile = sorted(volatile)
            try:
                integrity.own_inodes(tmp, skip=volatile)  # no other name may edit what is published
                files, links = integrity.describe(tmp, skip=volatile)
            except integrity.UnpublishableEntry as e:
                raise ArtifactError(f"{stage} {key[:16]}: not published: {e}") from None
            doc = {**manifest, "stage": stage, "key": key, "host": socket.gethostname(),
                   "pid": os.getpid(), "started_at": started, "finished_at": utc_now(),
                   "wall_seconds": round(time.monotonic() - t0, 3), **extra,
                   "files": files, "links": links, "volatile": volatile,
                   "content_digest": integrity.content_digest(files, links)}
            doc = json.loads(json.dumps(doc, default=str))  # signed as it will be read back
            if self.signing_key is not None:
                doc[signing.FIELD] = signing.signature(doc, self.signing_key)
            (tmp / MANIFEST).write_text(json.dumps(doc, indent=2, sort_keys=True, default=str))
            kept = observations.archive(self.root, stage, key, final) \
                if archive and os.path.lexists(final) else None
            if os.path.lexists(final):  # an old artifact, or whatever replaced it (a file, a link)
                trash = final.parent / f".trash-{key[:16]}-{os.getpid()}"
                os.replace(final, trash)
                _remove(trash)
            os.replace(tmp, final)
            self._index(stage, [final] + ([kept] if kept else []))
        except OSError as e:
            err = publish_error(stage, key, e, tmp, final, self.root) if e.errno in STORAGE_ERRNOS else None
            shutil.rmtree(tmp, ignore_errors=True)
            if err is None:
                raise
            raise err from e
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return doc

    def ensure(self, stage: str, key: str, make: Callable[[Path], dict], manifest: dict, *,
               reusable: Callable[[dict], bool] = lambda m: True,
               hold: Callable[[dict], None] = lambda m: None,
               volatile: Iterable[str] = (), archive: bool = False,
               on_fail: Callable[[], None] = lambda: None) -> tuple[str, dict]:
        """('reused' | 'built', manifest). Under the key's lock: a published artifact that
        `reusable` accepts is reused, anything else is (re)built; `hold` runs on the result before
        the lock is released (e.g. to take a lease on servers). `on_fail` runs, still under the lock,
        when building fails or is interrupted (e.g. to stop servers the build launched, before another
        run may launch their replacements)."""
        self.path(stage, key).parent.mkdir(parents=True, exist_ok=True)
        with self.lock(stage, key):
            existing = self.manifest(stage, key)
            if existing is not None and reusable(existing):
                status, doc = "reused", existing
            else:
                try:
                    status, doc = "built", self.build(stage, key, make, manifest, volatile, archive)
                except BaseException:
                    on_fail()
                    raise
            hold(doc)
            return status, doc


def lock_path(root: Path, stage: str, key16: str) -> Path:
    """The flock a key's builders (and gc, and server stops) take: one file per stage and key."""
    return root / stage / ".locks" / f"{key16}.lock"


def lock_held(root: Path, stage: str, key16: str) -> bool:
    """Someone (a building stage) holds the key's flock. A missing lock file is a free lock."""
    p = lock_path(root, stage, key16)
    if not p.exists():
        return False
    lock = FileLock(str(p), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return True
    lock.release()
    return False
