"""A per-user cache file in `~/.cache/perfdag/` ($XDG_CACHE_HOME where set), the code-digest memo's
and the verified-observation memo's: read only when it and its directory belong to this user, nobody
else can write them and neither is a link; replaced whole, never edited in place. A cache, never a
source of truth: a file that is absent, too large, malformed or not private reads as empty.

Each memo's name ends in a digest of the code that reads it (`closest-<rule>.json`), so every upgrade
starts a new file and leaves the old one (a large root's can be 10 MB). Writing a memo removes this
user's files of the same name before the digest that nobody wrote for STALE_S: another checkout still
using its own rule rewrites its file as it adds to it, and a memo removed is only rebuilt."""
from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

from harness.untrusted import jsonio

#: A memo file of an older rule left unwritten this long is removed when one of its kind is written.
STALE_S = 14 * 86400


def path(name: str) -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "perfdag" / name


def private(st: os.stat_result) -> bool:
    """Owned by this user, writable by nobody else, and no link (lstat)."""
    return not stat.S_ISLNK(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def read(f: Path, max_bytes: int) -> dict:
    """The file's JSON object, or {} (see the module's docstring)."""
    try:
        if not private(os.lstat(f.parent)):
            return {}
        fd = os.open(f, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as r:
            st = os.fstat(fd)
            data = r.read(max_bytes + 1) if stat.S_ISREG(st.st_mode) and private(st) else b""
        doc = jsonio.loads(data) if 0 < len(data) <= max_bytes else {}
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def write(f: Path, doc: dict) -> None:
    """Replaces the file whole with `doc` (a private file in a private directory); never fails."""
    try:
        f.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not private(os.lstat(f.parent)):
            return
        tmp = f.with_name(f".{f.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as w:
            w.write(json.dumps(doc, separators=(",", ":")))
        os.replace(tmp, f)
        _prune(f)
    except OSError:
        pass


def _prune(f: Path) -> None:
    """Removes `f`'s stale siblings of the same kind (its name up to the last '-'): this user's regular files."""
    kind, now = f.name.rsplit("-", 1)[0] + "-", time.time()
    with os.scandir(f.parent) as entries:
        for e in entries:
            if e.name != f.name and e.name.startswith(kind) and e.name.endswith(".json"):
                st = e.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and now - st.st_mtime > STALE_S:
                    os.unlink(e.path)
