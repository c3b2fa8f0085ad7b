"""Every published file checksummed, so a corrupted or edited artifact is never reused (as DVC).

At publish, each file's size, mtime and content digest go into the manifest, and the artifact's
`content_digest` summarises them. Reuse checks size and mtime every time (a stat per file); a file
whose mtime moved (a copy that did not keep times, or an edit) is re-hashed, and `full=True`
(`--verify`) re-hashes everything. The digest is BLAKE3, a cryptographic hash several times faster
than sha256 (bench/digest_speed.py measures both); sha256 is the fallback when blake3 is missing.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Iterable

CHUNK = 8 << 20
MANIFEST = "manifest.json"


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


def _files(root: Path, skip: Iterable[str]) -> list[Path]:
    skip = tuple(skip)
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if rel == MANIFEST or any(rel == s.rstrip("/") or rel.startswith(s.rstrip("/") + "/") for s in skip):
            continue
        if "__pycache__" in rel.split("/"):  # Python's own cache of a published source: not content
            continue
        if p.is_file() and not p.is_symlink():
            out.append(p)
    return out


def describe(root: str | os.PathLike, skip: Iterable[str] = ()) -> dict:
    """{relative path: {size, mtime_ns, digest}} of every file under `root` but the manifest and `skip`."""
    root = Path(root)
    out = {}
    for p in _files(root, skip):
        st = p.stat()
        out[p.relative_to(root).as_posix()] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns,
                                              "digest": file_digest(p)}
    return out


def content_digest(files: dict) -> str:
    """One digest for the artifact's content: names, sizes and file digests (not times)."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(f"{rel}\0{files[rel]['size']}\0{files[rel]['digest']}\n".encode())
    return "sha256:" + h.hexdigest()


def problems(root: str | os.PathLike, files: dict, *, full: bool = False, skip: Iterable[str] = ()) -> list[str]:
    """What differs between `root` and the recorded `files` (empty: intact). Cheap unless `full`
    or a file's mtime moved; a file present but not recorded is a problem too."""
    root = Path(root)
    out = []
    for rel, want in sorted(files.items()):
        p = root / rel
        try:
            st = p.stat()
        except OSError:
            out.append(f"{rel}: missing")
            continue
        if st.st_size != want["size"]:
            out.append(f"{rel}: size {st.st_size} bytes, published {want['size']}")
        elif full or st.st_mtime_ns != want["mtime_ns"]:
            if file_digest(p) != want["digest"]:
                out.append(f"{rel}: content differs from what was published")
    recorded = set(files)
    extra = [p.relative_to(root).as_posix() for p in _files(root, skip)]
    out += [f"{rel}: not part of the published artifact" for rel in extra if rel not in recorded]
    return out
