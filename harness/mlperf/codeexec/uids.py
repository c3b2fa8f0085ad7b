"""Unprivileged uids leased to sandbox jobs when perfdag runs as root. No luigi imports.

Root's processes are exempt from RLIMIT_NPROC (the kernel skips the check for uid 0), so a job
started by root runs under a uid of its own: bwrap is started as that uid (and maps it into the
job's user namespace), which keeps the process limit in force, keeps one job's fork bomb from
starving another, and lets perfdag find and kill anything of the job that is left.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import signal
import tempfile
import time
from pathlib import Path

from harness.mlperf.codeexec.view import SandboxSettingError, SandboxUnavailable

UID_BASE_ENV = "PERFDAG_SANDBOX_UID_BASE"
DEFAULT_UID_BASE = 1500000000
UID_SLOTS = 4096
UID_MAX = 2**32 - 2 - UID_SLOTS  # (uid_t)-1 is "no uid"


def uid_base() -> int:
    """The first leased uid: PERFDAG_SANDBOX_UID_BASE, read when a job needs it (never at import)."""
    text = os.environ.get(UID_BASE_ENV, "").strip()
    if not text:
        return DEFAULT_UID_BASE
    try:
        value = int(text, 10)
    except ValueError:
        value = -1
    if not 1000 <= value <= UID_MAX:
        raise SandboxSettingError(f"{UID_BASE_ENV}={text[:40]!r}: not a uid; give a whole number from 1000 "
                                  f"to {UID_MAX}, the first of {UID_SLOTS} uids no account uses "
                                  f"(default {DEFAULT_UID_BASE})")
    return value


def _state_dir() -> Path:
    d = Path(tempfile.gettempdir()) / "perfdag-sandbox-uids"
    d.mkdir(mode=0o700, exist_ok=True)
    return d


def _uid_in_use(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True  # a real account: never borrow it
    except KeyError:
        return bool(processes_of_uid(uid))


@contextlib.contextmanager
def uid_lease():
    """A uid (used as gid too) that no other job, here or in another perfdag, holds meanwhile."""
    base = uid_base()
    state = _state_dir()
    for slot in range(UID_SLOTS):
        uid = base + slot
        fd = os.open(state / f"{uid}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if _uid_in_use(uid):
            os.close(fd)
            continue
        try:
            yield uid
        finally:
            kill_uid(uid)
            os.close(fd)
        return
    raise SandboxUnavailable(f"sandbox: all {UID_SLOTS} uids from {base} are in use; set "
                             f"{UID_BASE_ENV} to a free range")


def processes_of_uid(uid: int) -> list[int]:
    """Pids whose real, effective or saved uid is `uid`."""
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if str(uid) in line.split()[1:4]:
                            pids.append(int(entry.name))
                        break
        except OSError:
            pass
    return pids


def kill_uid(uid: int, patience_s: float = 5.0) -> None:
    """SIGKILL every process of `uid` until none is left."""
    deadline = time.monotonic() + patience_s
    while pids := processes_of_uid(uid):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise SandboxUnavailable(f"sandbox: processes of uid {uid} survive SIGKILL: {pids}")
        time.sleep(0.02)
