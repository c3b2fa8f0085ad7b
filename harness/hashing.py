"""Canonical hashing: stage keys and memoised content hashes of input directories."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from filelock import FileLock


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


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes, memoised per process by (path, size, mtime_ns)."""
    st = os.stat(path)
    return _file_sha256_memo(os.path.realpath(path), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=256)
def _file_sha256_memo(path: str, size: int, mtime_ns: int) -> str:
    return _file_sha256(Path(path))


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def dir_content_hash(directory: str | os.PathLike, memo_file: str | os.PathLike, update: bool = True) -> str:
    """Hash of a directory's files (relative names + contents), or of one file's contents.

    Each file's hash is memoised by (path, size, mtime_ns) in `memo_file`, so an unchanged
    100 GB checkpoint is listed, not re-read. Hidden files are skipped. With `update` False the
    memo is only read: nothing is written (a memo file is replaced atomically, so no lock is needed).
    """
    directory = Path(directory).resolve()
    files = [directory] if directory.is_file() else sorted(p for p in directory.rglob("*") if p.is_file())
    root = directory.parent if directory.is_file() else directory
    memo_path = Path(memo_file)
    if update:
        memo_path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(memo_path) + ".lock") if update else contextlib.nullcontext():
        try:
            memo = json.loads(memo_path.read_text()) if memo_path.is_file() else {}
        except (OSError, ValueError):
            memo = {}
        entries, changed = [], False
        for path in files:
            rel = path.relative_to(root).as_posix()
            if any(part.startswith(".") for part in rel.split("/")):
                continue
            st = path.stat()
            ident = f"{path}|{st.st_size}|{st.st_mtime_ns}"
            digest = memo.get(ident)
            if digest is None:
                digest = memo[ident] = _file_sha256(path)
                changed = True
            entries.append((rel, digest))
        if changed and update:
            tmp = memo_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(memo))
            os.replace(tmp, memo_path)
    return hashlib.sha256(canonical_json(entries).encode()).hexdigest()
