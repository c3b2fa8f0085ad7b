"""What killed runs leave behind, found and removed: servers of a launch that never published,
records of dead servers, and the Python backend's shared-memory regions nobody maps any more.

Used by `gc` (dry run lists, --delete removes). `servers stop` and a relaunch clean up through
the registry's records instead (ServerRegistry.stop / sweep_dead).
"""
from __future__ import annotations

import contextlib
import glob
import os
import time
from pathlib import Path

from .launcher import is_ours
from .registry import ServerRegistry
from .tritonserver import SHM_PREFIX


def orphan_servers(root: str | os.PathLike, lock_free) -> list[dict]:
    """Live recorded servers whose launch never published (its run was killed), nobody holds, and
    whose key nobody is launching (`lock_free(key16)`)."""
    root = Path(root)
    registry = ServerRegistry(root)
    out = []
    for rec in registry.records():
        k = rec["key16"]
        if not is_ours(rec) or (root / "LaunchServers" / k / "manifest.json").is_file():
            continue
        if registry.holders(k) or not lock_free(k):
            continue
        out.append(rec)
    return out


def mapped_shm() -> set[str]:
    """/dev/shm files some process maps or holds open (Linux /proc; our own processes are enough)."""
    out: set[str] = set()
    for maps in glob.glob("/proc/[0-9]*/maps"):
        with contextlib.suppress(OSError):
            with open(maps) as f:
                for line in f:
                    i = line.find("/dev/shm/")
                    if i >= 0:
                        out.add(line[i:].strip().removesuffix(" (deleted)"))
    for fd in glob.glob("/proc/[0-9]*/fd/*"):
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("/dev/shm/"):
                out.add(target)
    return out


def orphan_shm(min_age_s: float = 60.0) -> list[str]:
    """perfdag's Python-backend regions that no process maps or holds (a killed server's), older
    than `min_age_s` so a server that is starting is never touched."""
    live = mapped_shm()
    now = time.time()
    out = []
    for path in glob.glob(f"/dev/shm/{SHM_PREFIX}*"):
        with contextlib.suppress(OSError):
            if path not in live and now - os.stat(path).st_mtime > min_age_s:
                out.append(path)
    return sorted(out)
