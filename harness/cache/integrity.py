"""Every published file checksummed, so a corrupted or edited artifact is never reused (as DVC).

At publish, each file's size, mtime, ctime, inode and content digest go into the manifest, and the
artifact's `content_digest` summarises them. Reuse checks them every time (a stat per file); a file
whose mtime, ctime or inode moved is re-hashed. ctime is what an edit in place cannot keep: the
kernel moves it on every write and every utime(), so an edit that restores size and mtime is still
re-hashed (a copied root moves it too, and is re-hashed once per process). `full=True` (`--verify`,
and a launch for what its servers load) re-hashes everything. Within a process a file is hashed once
per identity (path, device, inode, size, mtime, ctime), so a launch's check and the check before it
read the bytes once. The digest is BLAKE3, a cryptographic hash several times faster than sha256
(bench/digest_speed.py measures both); sha256 is the fallback when blake3 is missing.

A published file is the artifact's own inode: one hard-linked from elsewhere (a tool that links
from a cache) is copied at publish, so no other name can edit it.

Nothing is followed out of an artifact: a symlink may be published only if it is relative and
stays inside the artifact (the manifest records its target); any other symlink, a FIFO, socket or
device, or a file that was not published is a problem, cheap check and `--verify` alike. A server
or loader that opened such an entry would read (or run) what someone put outside the root.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path
from typing import Iterable, Iterator

CHUNK = 8 << 20
MANIFEST = "manifest.json"


class UnpublishableEntry(ValueError):
    """An artifact being published holds something it may not publish (a link out, a FIFO...)."""


def _hasher():
    try:
        import blake3
        return "blake3", blake3.blake3(max_threads=blake3.blake3.AUTO)
    except ImportError:  # pragma: no cover - blake3 is a dependency
        return "sha256", hashlib.sha256()


def file_digest(path: str | os.PathLike) -> str:
    """'<algorithm>:<hex>' of a file's bytes."""
    name, h = _hasher()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return f"{name}:{h.hexdigest()}"


_DIGESTS: dict[tuple, str] = {}  # (dev, ino, size, mtime_ns, ctime_ns) -> digest, hashed by this process


def identity(st: os.stat_result) -> tuple:
    """What a file's bytes are known by in this process: an edit, a touch or a rename moves its ctime."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def fd_digest(fd: int, *, fresh: bool = False) -> tuple[str, os.stat_result]:
    """(digest, stat) of the open file `fd`: its own bytes, whatever its name leads to now. Read once per
    process per identity unless `fresh` (a re-hash that must read every byte again). A file written
    while it is read (its ctime moved) is read again."""
    for _ in range(3):
        st = os.fstat(fd)
        if not fresh and identity(st) in _DIGESTS:
            return _DIGESTS[identity(st)], st
        name, h = _hasher()
        offset = 0
        while block := os.pread(fd, CHUNK, offset):
            h.update(block)
            offset += len(block)
        if identity(os.fstat(fd)) == identity(st):
            _DIGESTS[identity(st)] = f"{name}:{h.hexdigest()}"
            return _DIGESTS[identity(st)], st
    raise OSError(f"fd {fd}: written to while it was read")


def checked_digest(path: str | os.PathLike, st: os.stat_result) -> str:
    """file_digest(path) of the file `st` describes, read once per process per identity: a file written
    or touched since has another ctime. (An artifact's publishing rename keeps its files' identities.)"""
    ident = identity(st)
    if ident not in _DIGESTS:
        _DIGESTS[ident] = file_digest(path)
    return _DIGESTS[ident]


def moved(st: os.stat_result, want: dict) -> bool:
    """Whether a file's stat differs from what was published in a way that calls for re-hashing it
    (ctime and inode are recorded since perfdag records them; older manifests have mtime only)."""
    return (st.st_mtime_ns != want.get("mtime_ns") or st.st_ctime_ns != want.get("ctime_ns", st.st_ctime_ns)
            or st.st_ino != want.get("ino", st.st_ino))


def kind(mode: int) -> str:
    """What an lstat mode is, in words."""
    for test, name in ((stat.S_ISREG, "regular file"), (stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symlink"),
                       (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device")):
        if test(mode):
            return name
    return "special file"


def _skipped(rel: str, skip: tuple[str, ...]) -> bool:
    return any(rel == s.rstrip("/") or rel.startswith(s.rstrip("/") + "/") for s in skip)


def _entries(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """(relative path, lstat) of everything under `root` but directories, never following a link."""
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            scan = list(os.scandir(d))
        except OSError:
            continue
        for e in scan:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append(Path(e.path))
            else:
                yield Path(e.path).relative_to(root).as_posix(), st


def link_problem(root: Path, rel: str, target: str) -> str | None:
    """Why the symlink `rel` -> `target` may not be in the artifact at `root` (None: it may)."""
    if os.path.isabs(target):
        return f"symlink to {target}: absolute; only relative links inside the artifact are allowed"
    real_root = os.path.realpath(root)
    where = os.path.realpath(root / rel)  # the kernel's resolution: links in between followed
    lexical = os.path.normpath(os.path.join(os.path.dirname(rel), target))
    if lexical == ".." or lexical.startswith("../") or os.path.commonpath([real_root, where]) != real_root:
        return f"symlink to {target}: points outside the artifact"
    return None


def own_inodes(root: str | os.PathLike, skip: Iterable[str] = ()) -> list[str]:
    """Replaces every hard-linked regular file under `root` with a copy of its own (times kept), so
    nothing outside the artifact can edit what it publishes; returns the copied paths."""
    root, skip = Path(root), tuple(skip)
    out = []
    for rel, st in sorted(_entries(root)):
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and not _skipped(rel, skip):
            src = root / rel
            tmp = src.with_name(f".own-{os.getpid()}-{src.name}")
            shutil.copy2(src, tmp)
            os.replace(tmp, src)
            out.append(rel)
    return out


def describe(root: str | os.PathLike, skip: Iterable[str] = ()) -> tuple[dict, dict]:
    """({relative path: {size, mtime_ns, digest}}, {relative path: link target}) of what `root` publishes,
    but the manifest and `skip`. Raises UnpublishableEntry for a link out of `root` or a special file."""
    root, skip = Path(root), tuple(skip)
    files, links = {}, {}
    for rel, st in sorted(_entries(root)):
        if rel == MANIFEST or _skipped(rel, skip):
            continue
        if stat.S_ISREG(st.st_mode):
            files[rel] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
                          "ino": st.st_ino, "digest": checked_digest(root / rel, st)}
        elif stat.S_ISLNK(st.st_mode):
            target = os.readlink(root / rel)
            if why := link_problem(root, rel, target):
                raise UnpublishableEntry(f"{rel}: {why}")
            links[rel] = target
        else:
            raise UnpublishableEntry(f"{rel}: a {kind(st.st_mode)}; an artifact publishes files, directories "
                                     "and links inside itself only")
    return files, links


def content_digest(files: dict, links: dict | None = None) -> str:
    """One digest for the artifact's content: names, sizes and file digests (not times), and links."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(f"{rel}\0{files[rel]['size']}\0{files[rel]['digest']}\n".encode())
    for rel in sorted(links or {}):  # none: the digest of an artifact published before links were recorded
        h.update(f"{rel}\0->\0{links[rel]}\n".encode())
    return "sha256:" + h.hexdigest()


def problems(root: str | os.PathLike, files: dict, *, links: dict | None = None, full: bool = False,
             skip: Iterable[str] = ()) -> list[str]:
    """What differs between `root` and the recorded `files` and `links` (empty: intact). Cheap unless
    `full` or a file's stat moved (`moved`). Anything present but not recorded is a problem too; under `skip`
    (files that change after publishing, e.g. logs) only links and special files are."""
    root, skip, links = Path(root), tuple(skip), links or {}
    if not root.is_dir() or root.is_symlink():
        return [f"{root}: not a directory"]
    out = []
    for rel, want in sorted(files.items()):
        p = root / rel
        try:
            st = os.lstat(p)
        except OSError:
            out.append(f"{rel}: missing")
            continue
        if not stat.S_ISREG(st.st_mode):
            out.append(f"{rel}: a {kind(st.st_mode)}, published as a regular file")
        elif st.st_size != want["size"]:
            out.append(f"{rel}: size {st.st_size} bytes, published {want['size']}")
        elif full or moved(st, want):
            if checked_digest(p, st) != want["digest"]:
                out.append(f"{rel}: content differs from what was published")
    for rel, target in sorted(links.items()):
        try:
            now = os.readlink(root / rel)
        except OSError:
            gone = not os.path.lexists(root / rel)
            out.append(f"{rel}: {'missing' if gone else 'not a symlink'} (published as a symlink to {target})")
            continue
        if now != target:
            out.append(f"{rel}: symlink to {now}, published pointing to {target}")
        elif why := link_problem(root, rel, now):
            out.append(f"{rel}: {why}")
    for rel, st in sorted(_entries(root)):
        if rel == MANIFEST or rel in files or rel in links:
            continue
        what = kind(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            out.append(f"{rel}: symlink to {os.readlink(root / rel)}, not part of the published artifact")
        elif not stat.S_ISREG(st.st_mode):
            out.append(f"{rel}: a {what}, not part of the published artifact")
        elif not _skipped(rel, skip):
            out.append(f"{rel}: not part of the published artifact")
    return out
