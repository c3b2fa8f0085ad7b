"""A memo of kept observations that were re-hashed and found intact, so `history` and `compare` do not re-hash an
unchanged one on every call.

`~/.cache/perfdag/verified-observations-<rule>.json` ($XDG_CACHE_HOME where set), private to the user as the
code-digest memo is (harness/cache/codehash.py: read only when it and its directory belong to the user and nobody
else can write them, no link). An entry is looked up by the sha256 of the observation's manifest bytes, its
directory and the signing key's fingerprint, and holds the identity (device, inode, size, mtime, ctime, type) of
every path the full check read: every file, link and directory of the observation and of each observation it was
made from, and where the check looked for them. It is taken only while every one of them still has that identity:
a write, touch, rename, link or removal there moves one (the kernel sets ctime on each), and the check runs again,
re-hashing everything, exactly as without the memo. Only a clean result is kept; a refusal is always recomputed.
`PERFDAG_VERIFY=1` never reads it. Deleting the directory is always safe.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import stat
from functools import lru_cache
from pathlib import Path

from harness.cache import private_memo
from harness.cache.integrity import MANIFEST
from harness.untrusted import jsonio

MEMO_ENTRIES = 20_000
_MEMO_BYTES = 256 << 20
_MEMO: dict | None = None
_FRESH: list[str] = []
_SHAS: set[str] | None = None


@lru_cache(maxsize=1)
def _memo_file() -> Path:
    """One memo per version of this module and of the checks it stands for (a rule change starts afresh)."""
    here = Path(__file__).parent
    rule = hashlib.sha256(b"".join((here / f).read_bytes() for f in ("verified.py", "integrity.py", "store.py",
                                                                    "signing.py"))).hexdigest()[:12]
    return private_memo.path(f"verified-observations-{rule}.json")


def _memo() -> dict:
    global _MEMO
    if _MEMO is None:
        doc = private_memo.read(_memo_file(), _MEMO_BYTES)
        _MEMO = {k: v for k, v in doc.items() if isinstance(k, str) and _paths_ok(v)}
    return _MEMO


def _checked() -> set[str]:
    """The sha256 of every manifest a memoised check read."""
    global _SHAS
    if _SHAS is None or len(_SHAS) != len(_memo()):
        _SHAS = {k.partition("|")[0] for k in _memo()}
    return _SHAS


def _paths_ok(v) -> bool:
    return isinstance(v, list) and all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str)
                                       and (p[1] is None or isinstance(p[1], list) and len(p[1]) == 6
                                            and all(type(x) is int for x in p[1])) for p in v)


def save() -> None:
    """Adds this process's new entries to the memo (a private file, replaced whole); never fails."""
    if not _FRESH:
        return
    _FRESH.clear()
    private_memo.write(_memo_file(), dict(list(_memo().items())[-MEMO_ENTRIES:]))


def identity(path: str | os.PathLike) -> list[int] | None:
    """What a path is now, never following a link at its end; None where nothing is."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, stat.S_IFMT(st.st_mode)]


def tree(d: Path) -> list[str]:
    """`d` and every path under it (a link is listed, never followed)."""
    out, stack = [str(d)], [str(d)]
    while stack:
        try:
            scan = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for e in scan:
            out.append(e.path)
            if e.is_dir(follow_symlinks=False):
                stack.append(e.path)
    return out


def read_manifest(d: Path) -> tuple[dict | None, str | None]:
    """(the manifest of directory `d` as parsed, the memo's name for exactly those bytes at that identity: their
    sha256 and the file's identity, or None when the file moved while it was read)."""
    f = d / MANIFEST
    try:
        fd = os.open(f, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None, None
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            return None, None
        chunks = []
        while block := os.read(fd, 1 << 20):
            chunks.append(block)
        after = os.fstat(fd)
    except OSError:
        return None, None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    sha = hashlib.sha256(data).hexdigest()
    try:
        m = loads(data, sha)
    except jsonio.NotJson:
        return None, None
    if not isinstance(m, dict):
        return None, None
    same = (before.st_ino, before.st_size, before.st_mtime_ns, before.st_ctime_ns) == \
        (after.st_ino, after.st_size, after.st_mtime_ns, after.st_ctime_ns)
    return m, (sha + ":" + json.dumps(identity_of(after)) if same else None)


def loads(data: bytes, sha: str | None = None):
    """jsonio.loads(data), without its depth walk for the bytes of a manifest a memoised check read (they passed
    the walk then: it is a function of the bytes)."""
    if (sha or hashlib.sha256(data).hexdigest()) in _checked():
        try:
            return json.loads(data)
        except (ValueError, RecursionError):
            pass
    return jsonio.loads(data)


def identity_of(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, stat.S_IFMT(st.st_mode)]


def _key(read: str, stage: str, key: str, where: Path, signing_key: bytes | None) -> str:
    fp = hashlib.sha256(signing_key).hexdigest()[:16] if signing_key is not None else "-"
    return f"{read.partition(':')[0]}|{stage}|{key}|{where}|{fp}"


def intact(read: str | None, stage: str, key: str, where: Path, signing_key: bytes | None) -> bool:
    """Whether `stage` `key`'s observation at `where`, whose manifest was read as `read` (read_manifest), was found
    intact by a full check while every path it read had the identity it has now (`PERFDAG_VERIFY=1`: never)."""
    if read is None or os.environ.get("PERFDAG_VERIFY") == "1":
        return False
    paths = _memo().get(_key(read, stage, key, where, signing_key))
    if not paths or json.dumps(identity(Path(where) / MANIFEST)) != read.partition(":")[2]:
        return False
    return all(identity(p) == ident for p, ident in paths)


def remember(read: str | None, stage: str, key: str, where: Path, signing_key: bytes | None,
             paths: list[tuple[str, list | None]]) -> None:
    """A full check found `stage` `key`'s observation at `where` intact; `paths` are the identities taken before it
    ran (so anything that moved during the check is checked again next time). Written when the process exits."""
    if read is None or json.dumps(identity(Path(where) / MANIFEST)) != read.partition(":")[2]:
        return
    if any(p.endswith(os.sep + MANIFEST) and ident and ident[5] == stat.S_IFLNK for p, ident in paths):
        return  # a manifest read through a link: its target's changes would not move what is recorded
    name = _key(read, stage, key, where, signing_key)
    memo = _memo()
    memo.pop(name, None)  # re-inserted last: the newest entry
    memo[name] = [[p, ident] for p, ident in paths]
    if not _FRESH:
        atexit.register(save)
    _FRESH.append(name)
