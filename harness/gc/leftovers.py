"""What killed runs leave behind, found and removed: servers of a launch that never published,
records of dead servers, and the Python backend's shared-memory regions nobody maps any more.

Used by `gc` (dry run lists, --delete removes). `servers stop` and a relaunch clean up through
the registry's records instead (ServerRegistry.stop / sweep_dead).
"""
from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path

from harness.serving.launcher import is_ours
from harness.serving.registry import ServerRegistry
from harness.serving.shm import SHM_PREFIX, mapped_shm, own_shm_files

_REGION = re.compile(rf"{SHM_PREFIX}[A-Za-z0-9_]")  # a region of a prefix of perfdag's shape


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


def orphan_shm(min_age_s: float = 60.0) -> list[str]:
    """perfdag's Python-backend regions (this user's files named perfdag<letters, digits, _>...)
    that no process maps or holds (a killed server's), older than `min_age_s` so a server that is
    starting is never touched."""
    live = mapped_shm()
    now = time.time()
    out = []
    for path in own_shm_files(SHM_PREFIX):
        with contextlib.suppress(OSError):
            if _REGION.match(os.path.basename(path)) and path not in live and now - os.stat(path).st_mtime > min_age_s:
                out.append(path)
    return sorted(out)
