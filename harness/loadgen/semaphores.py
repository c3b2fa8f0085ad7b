"""The LoadGen driver's multiprocessing semaphores, named so that perfdag finds its own and only those.

The driver's frontends are fed through pipes, so today's driver makes none; a multiprocessing.Queue
or Lock (in a spawn context) would hold POSIX named semaphores, /dev/shm/sem.<name>, as the
drivers before did. Python unlinks them at a clean exit, and its resource tracker after most
others, but a driver killed together with its process group (a hung or stopped driver, SIGKILL)
leaves them behind for good. So the driver names them

    /dev/shm/sem.perfdag-lg-<driver pid>-<driver start, ms>-<random>

and its caller removes those of its driver once the driver is gone (every exit path of
runner._run_driver), and gc those whose driver no longer runs (a killed run's). A name of another
shape (Python's own sem.mp-*, another program's) is never touched, nor another user's file.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys

from harness.serving.processes import is_same_process, start_time

SHM_DIR = "/dev/shm"
PREFIX = "perfdag-lg"
_NAME = re.compile(rf"sem\.{PREFIX}-([0-9]{{1,10}})-([0-9]{{1,16}})-[A-Za-z0-9_]{{1,16}}")


def name_semaphores_as_perfdag() -> None:
    """In the driver, before any Queue exists: its semaphores get perfdag's names (Linux only:
    elsewhere a named semaphore may hold 31 characters, and Python's names stay)."""
    import multiprocessing.process


    started = start_time(os.getpid())
    if sys.platform.startswith("linux") and started is not None:
        multiprocessing.process.current_process()._config["semprefix"] = \
            f"/{PREFIX}-{os.getpid()}-{int(started * 1000)}"


def _own_files() -> list[tuple[str, int, float]]:
    """(path, pid, start) of this user's regular files in /dev/shm named like the driver's semaphores."""
    out = []
    with contextlib.suppress(OSError), os.scandir(SHM_DIR) as entries:
        for e in entries:
            m = _NAME.fullmatch(e.name)
            with contextlib.suppress(OSError):
                if m and e.is_file(follow_symlinks=False) and e.stat(follow_symlinks=False).st_uid == os.getuid():
                    out.append((os.path.join(SHM_DIR, e.name), int(m.group(1)), int(m.group(2)) / 1000))
    return out


def _unlink(paths: list[str]) -> list[str]:
    gone = []
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)
            gone.append(path)
    return gone


def remove_left_by(pid: int) -> list[str]:
    """Removes the semaphores driver `pid` left (call once it is gone); returns those removed."""
    return _unlink([path for path, p, _ in _own_files() if p == pid])


def orphans() -> list[str]:
    """Semaphores of drivers that no longer run (same pid and start time): a killed run's."""

    return sorted(path for path, pid, started in _own_files() if not is_same_process(pid, started))


def remove(paths: list[str]) -> list[str]:
    """Unlinks what `orphans` found, if each is still one (its driver did not come back)."""
    still = set(orphans())
    return _unlink([p for p in paths if p in still])
