"""Sandbox processes left alive, as one xdist worker sees them.

Each worker leases sandbox uids from a range of its own (conftest sets PERFDAG_SANDBOX_UID_BASE), so
the sandboxed modules run on both workers at once. A leftover is any process of this worker's uids,
or a sandbox driver, bwrap or marked command that is not another worker's: not of another worker's
uids, not started under another worker (its ancestry or its environment's uid base says so). An
orphan that says nothing about its owner counts against whoever looks, as before.
"""
from __future__ import annotations

import os
from pathlib import Path

import psutil

from harness.mlperf.codeexec import uids as sandbox_uids

WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def worker_uid_base(worker: str | None) -> int:
    """gw0's range follows the default one, gw1's follows gw0's; without xdist the default."""
    if not worker:
        return sandbox_uids.DEFAULT_UID_BASE
    return sandbox_uids.DEFAULT_UID_BASE + (int(worker.removeprefix("gw")) + 1) * sandbox_uids.UID_SLOTS


def _other_workers() -> set[int]:
    """pids of the sibling xdist workers (children of the controller, not this process)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return set()
    me = psutil.Process()
    parent = me.parent()
    return {p.pid for p in parent.children()} - {me.pid} if parent else set()


def _environ_base(pid: str) -> str | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    key = sandbox_uids.UID_BASE_ENV.encode() + b"="
    return next((e[len(key):].decode() for e in env if e.startswith(key)), None)


def _anothers(pid: str, uids: list[int], mine: range, others: set[int]) -> bool:
    all_ranges = range(sandbox_uids.DEFAULT_UID_BASE, sandbox_uids.DEFAULT_UID_BASE + (WORKERS + 1) * sandbox_uids.UID_SLOTS)
    if any(u in all_ranges and u not in mine for u in uids):
        return True
    base = _environ_base(pid)
    if base is not None and base != str(mine.start):
        return True
    try:
        return any(p.pid in others for p in psutil.Process(int(pid)).parents())
    except psutil.Error:
        return False


def leftovers(marker: str | None = None, bwraps: bool = False) -> list[str]:
    """'pid: command' of this worker's sandbox processes still alive (see the module's docstring).
    `marker`: also any process whose command line holds it; `bwraps`: also any root-run bwrap."""
    base = sandbox_uids.uid_base()
    mine = range(base, base + sandbox_uids.UID_SLOTS)
    others = _other_workers()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            status = Path(f"/proc/{entry.name}/status").read_text()
            cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ").decode("latin-1")
        except OSError:
            continue
        uids = [int(u) for u in next(ln.split()[1:] for ln in status.splitlines() if ln.startswith("Uid:"))]
        if os.geteuid() == 0 and any(u in mine for u in uids):
            found.append(f"{entry.name}: {cmd[:120]}")
            continue
        looks = "_sandbox_init.py" in cmd or "sandbox's driver" in cmd or (marker is not None and marker in cmd) \
            or (bwraps and cmd.startswith(("bwrap ", "/usr/bin/bwrap ")) and "--disable-userns" in cmd)
        if looks and not _anothers(entry.name, uids, mine, others):
            found.append(f"{entry.name}: {cmd[:120]}")
    return found
