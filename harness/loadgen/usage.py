"""How busy a client process was: CPU, and how long its busiest thread wanted a CPU.

CPU time alone under-reads a starved process: on a host shared with the server (or with other
jobs) a frontend whose loop never idles may get half a core, and CPU / wall reads 50%. So a
thread's *demand* counts the time it ran plus the time it sat runnable in the run queue
(Linux /proc/<pid>/task/<tid>/schedstat); a process whose busiest thread demanded a CPU for
most of the run was what set the pace. Where schedstat is missing, CPU time stands in.
"""
from __future__ import annotations

import os
import time


def _threads() -> dict[int, int]:
    """ns each thread of this process ran + waited to run, by thread id."""
    out = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                run, wait, _ = f.read().split()
            out[int(tid)] = int(run) + int(wait)
        except (OSError, ValueError):
            continue
    return out


class Usage:
    """Started at the beginning of a window; `stop()` gives {cpu_s, wall_s, demand}."""

    def __init__(self):
        self.cpu0, self.wall0, self.threads0 = time.process_time(), time.monotonic(), _threads()

    def stop(self) -> dict:
        cpu, wall, threads = time.process_time() - self.cpu0, time.monotonic() - self.wall0, _threads()
        demand = None
        if threads and wall > 0:
            demand = max((ns - self.threads0.get(tid, 0)) for tid, ns in threads.items()) / 1e9 / wall
        return {"cpu_s": cpu, "wall_s": wall, "demand": demand}
