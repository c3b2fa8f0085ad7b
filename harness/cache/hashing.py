"""Canonical hashing: stage keys and memoised content hashes of input files and directories.

A file's content hash is memoised by its identity: path, size, mtime_ns, and what an edit in place
cannot keep, ctime_ns, inode and device (the kernel moves ctime on every write and every utime(),
so restoring size and mtime by hand leaves it moved). The memo in the root (`.hashcache/`) is only
ever a shortcut for an identical identity; `rehash` (--verify) ignores it and reads every byte.
Within one process a file read once at an identity is not read again at the same identity.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from filelock import FileLock

from harness.errors import InputError
from harness.untrusted import jsonio
from harness.untrusted.files import not_regular


def canonical_json(obj: Any) -> str:
    """One spelling per value: sorted keys, no whitespace, so YAML key order never matters."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def stage_key(stage: str, schema_version: int, params: dict, tools: dict, upstream: dict,
              code: dict | None = None, executed: dict | None = None) -> str:
    """sha256 of everything a stage's output depends on; upstream keys chain it (Merkle style).
    `code`: digests of the perfdag modules that do the work; `executed`: what an external tool runs."""
    doc = {"stage": stage, "schema_version": schema_version, "params": params,
           "tools": tools, "upstream": upstream, "code": code or {}, "executed": executed or {}}
    return hashlib.sha256(canonical_json(doc).encode()).hexdigest()


def identity(path: str | os.PathLike, st: os.stat_result) -> str:
    """What names one version of a file: an edit in place that restores size and mtime still moves ctime."""
    return f"{path}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}|{st.st_dev}"


_HEX64 = re.compile(r"[0-9a-f]{64}")
_SEEN: dict[str, str] = {}  # identity -> sha256, hashed by this process


def file_sha256(path: str | os.PathLike, rehash: bool = False) -> str:
    """sha256 of a regular file's bytes (links followed), read once per process per identity
    (`rehash`: read again whatever this process saw)."""
    real = os.path.realpath(path)
    if what := not_regular(real):
        raise InputError(f"{path}: is {what}, not a regular file; give the file itself")
    st = os.stat(real)
    ident = identity(real, st)
    if rehash or ident not in _SEEN:
        _SEEN[ident] = _file_sha256(Path(real))
    return _SEEN[ident]


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def input_files(directory: Path) -> list[tuple[str, Path, os.stat_result]]:
    """(relative name, path, stat with links followed) of a directory's files, or of one file; hidden
    entries skipped. A FIFO, socket or device (or a link to one, or a broken link) is an InputError:
    reading it would block, never end, or hash nothing while a loader fails later."""
    if not directory.is_dir():
        paths, root = [directory], directory.parent
    else:
        paths, root = sorted(p for p in directory.rglob("*") if not p.is_dir()), directory
    out = []
    for path in paths:
        rel = path.relative_to(root).as_posix()
        if any(part.startswith(".") for part in rel.split("/")):
            continue
        try:
            st = path.stat()
        except OSError as e:
            target = f" (symlink to {os.readlink(path)})" if path.is_symlink() else ""
            raise InputError(f"{path}{target}: cannot be read ({e.strerror})") from None
        if not stat.S_ISREG(st.st_mode):
            via = f" (symlink to {os.readlink(path)})" if path.is_symlink() else ""
            raise InputError(f"{path}{via}: is {not_regular(path)}, not a regular file; replace it with the file itself")
        out.append((rel, path, st))
    return out


def dir_content_hash(directory: str | os.PathLike, memo_file: str | os.PathLike, update: bool = True,
                     rehash: bool = False) -> str:
    """Hash of a directory's files (relative names + contents), or of one file's contents.

    Each file's hash is memoised by its identity (see `identity`) in `memo_file`, so an unchanged
    100 GB checkpoint is listed, not re-read. Hidden files are skipped; special files are refused
    (`input_files`). With `update` False the memo is only read: nothing is written (a memo file is
    replaced atomically, so no lock is needed). With `rehash` the memo is not trusted: every file is
    read (once per process per identity) and the memo corrected.
    """
    directory = Path(directory).resolve()
    files = input_files(directory)
    memo_path = Path(memo_file)
    if update:
        memo_path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(memo_path) + ".lock") if update else contextlib.nullcontext():
        try:
            memo = jsonio.loads(memo_path.read_bytes()) if memo_path.is_file() else {}
        except (OSError, jsonio.NotJson):
            memo = {}
        if not isinstance(memo, dict):  # the memo is a shortcut read back from the root: anything else is none
            memo = {}
        entries, fresh = [], {}
        for rel, path, st in files:
            ident = identity(path, st)
            digest = memo.get(ident)
            if rehash or not (isinstance(digest, str) and _HEX64.fullmatch(digest)):
                digest = _SEEN[ident] = _SEEN.get(ident) or _file_sha256(path)
                if memo.get(ident) != digest:
                    fresh[str(path)] = (ident, digest)
            entries.append((rel, digest))
        if fresh and update:  # a file's older identities go: the memo keeps one entry per path
            memo = {k: v for k, v in memo.items() if not {k.rsplit("|", 5)[0], k.rsplit("|", 2)[0]} & fresh.keys()}
            memo.update(dict(fresh.values()))
            tmp = memo_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(memo))
            os.replace(tmp, memo_path)
    return hashlib.sha256(canonical_json(entries).encode()).hexdigest()
