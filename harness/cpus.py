"""How many CPUs this process may use: its affinity mask, capped by a cgroup CPU quota.

Torch sizes its intra-op pool from the machine's cores, not from what a container or a
`taskset` grants; on a shared host its threads then fight each other and the other jobs (a
56 s model build took 551 s, burning 258 CPU-seconds). perfdag sizes torch from what it may use,
so a loaded machine slows a run down without making it spin.
"""
from __future__ import annotations

import math
import os
from pathlib import Path


def cgroup_cpu_limit(root: str | os.PathLike = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup") -> float | None:
    """CPUs the cgroup quota allows (quota / period; v2 cpu.max or v1 cfs files), None if unlimited.
    The tightest limit of the process's cgroup and its ancestors counts."""
    root = Path(root)
    limits = []
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        v2 = controllers == ""
        if not v2 and "cpu" not in controllers.split(","):
            continue
        base = root if v2 else next((root / d for d in ("cpu", "cpu,cpuacct", "cpuacct,cpu") if (root / d).is_dir()), None)
        if base is None:
            continue
        d = base / path.lstrip("/")
        while True:  # the cgroup and its ancestors, up to the mount's root
            limits.append(_read_limit(d, v2))
            if d == base or base not in d.parents:
                break
            d = d.parent
    found = [x for x in limits if x]
    return min(found) if found else None


def _read_limit(d: Path, v2: bool) -> float | None:
    try:
        if v2:
            quota, period = (d / "cpu.max").read_text().split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        quota = int((d / "cpu.cfs_quota_us").read_text())
        return None if quota <= 0 else quota / int((d / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None


def available_cpus() -> int:
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cgroup_cpu_limit()
    if quota:
        n = min(n, math.floor(quota))  # a 1.5-CPU quota runs one thread at full speed, two throttled
    return max(1, n)


def apply_torch_threads() -> int:
    """Caps torch's intra-op threads at the CPUs available (never raises a lower setting)."""
    import torch

    n = available_cpus()
    if torch.get_num_threads() > n:
        torch.set_num_threads(n)
    return torch.get_num_threads()
