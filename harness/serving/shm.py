"""Shared-memory regions of the servers perfdag starts: Triton's Python backend keeps its tensors in
/dev/shm files named by a prefix unique to each server, and a killed server leaves them behind.

A prefix read back from a record is untrusted: only names of perfdag's own shape, directly in /dev/shm,
owned by this user and mapped by no process, are ever removed.
"""
from __future__ import annotations

import contextlib
import os
import re
from typing import Sequence

SHM_PREFIX = "perfdag"
SHM_DIR = "/dev/shm"
# The shape of every region prefix perfdag makes (shm_prefix below; trtllm's perfdag_s<i>_): a plain
# name, so a prefix read back from a record can never reach outside /dev/shm ('/', '..') or glob more.
SHM_PREFIX_SHAPE = re.compile(rf"{SHM_PREFIX}[A-Za-z0-9_]{{1,64}}_")


def shm_prefix(tag: str) -> str:
    """A Python-backend shared-memory prefix unique to one server (`tag`: pid + random)."""
    return f"{SHM_PREFIX}{tag}_"


def is_shm_prefix(prefix) -> bool:
    """`prefix` has the shape of a region prefix perfdag makes."""
    return isinstance(prefix, str) and SHM_PREFIX_SHAPE.fullmatch(prefix) is not None


def shm_regions(prefix: str) -> list[str]:
    """The /dev/shm files a server with this prefix created. None for a prefix not of perfdag's shape."""
    return own_shm_files(prefix) if is_shm_prefix(prefix) else []


def own_shm_files(prefix: str) -> list[str]:
    """This user's regular files directly in /dev/shm whose name starts with `prefix` (no links,
    directories or other users' files)."""
    out = []
    with contextlib.suppress(OSError), os.scandir(SHM_DIR) as entries:
        for e in entries:
            with contextlib.suppress(OSError):
                if e.name.startswith(prefix) and e.is_file(follow_symlinks=False) \
                        and e.stat(follow_symlinks=False).st_uid == os.getuid():
                    out.append(os.path.join(SHM_DIR, e.name))
    return sorted(out)


def mapped_shm() -> set[str]:
    """/dev/shm files some process maps or holds open (Linux /proc; our own processes are enough)."""
    import glob

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


def remove_shm_files(paths: Sequence[str]) -> list[str]:
    """Unlinks the regions; returns those removed (one already gone is skipped). Only plain names
    directly in /dev/shm are touched."""
    gone = []
    for path in paths:
        if os.path.dirname(path) != SHM_DIR or os.path.basename(path) in ("", ".", ".."):
            continue
        with contextlib.suppress(OSError):
            os.unlink(path)
            gone.append(path)
    return gone
