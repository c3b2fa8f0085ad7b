"""What a sandbox job came to: its RunResult, read from the driver's report (harness/mlperf/codeexec/_sandbox_init.py)
and the job's files. No luigi imports."""
from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # an annotation: sandbox.py builds jobs and imports this module
    from harness.mlperf.codeexec.sandbox import Job

TAIL = 4000  # characters of stdout/stderr kept per result (unless a job asks for more)


@dataclass
class RunResult:
    status: str  # passed | failed | timeout | killed | not_scored (| error: sandbox setup)
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    detail: str = ""
    step: int = 0  # index of the last step run
    verdict: str = ""  # what the channel step wrote to its fd 3 (Step.channel)


def tail(path: Path, chars: int = TAIL) -> str:
    if not path.exists():
        return ""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - chars))
        return f.read().decode("utf-8", "replace")


def signal_name(number: int) -> str:
    """SIGKILL, or 'signal 40' for one the signal module has no name for (real-time signals)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def gib(n: float) -> str:
    return f"{n / (1 << 30):.2f} GiB"


def from_report(lines: list[str], job: Job, base: Path, wall: float, rc: int,
                cut_off_s: float | None = None) -> RunResult:
    """The job's result from its driver's report lines (`_sandbox_init.py`), its stdout/stderr files
    under `base`, its wall time and the driver's exit status; `cut_off_s` when perfdag killed the
    session at that backstop. Only what happens before a program starts is the sandbox's fault
    (status "error", which stops the scoring); from then on anything, the driver's death included, is
    the program's row's."""
    init_err = tail(base / "init.err").strip()
    started = [int(ln.split()[1]) for ln in lines if ln.startswith("start ")]
    setup = [ln[len("setup-error "):] for ln in lines if ln.startswith("setup-error ")]
    if setup and len(started) <= 1:  # the sandbox, or the first step's own tool, cannot start
        return RunResult("error", None, "", init_err, wall, f"sandbox setup: {setup[0]}")
    if not started:
        if rc > 0 and cut_off_s is None:  # bwrap (or the driver) failed before the first step: the sandbox's fault
            first = next((ln for ln in init_err.splitlines() if ln.strip()), f"exit status {rc}")
            return RunResult("error", None, "", init_err, wall, first.strip())
        return RunResult("timeout", None, "", init_err, wall,
                         "sandbox session killed before its first step started")
    index = started[-1]
    step = job.steps[index]
    last = index == len(job.steps) - 1
    out = tail(base / f"stdout.{index}", job.stdout_chars if last else TAIL)
    err = tail(base / f"stderr.{index}")
    ends = [ln.split(" ", 3) for ln in lines if ln.startswith(("exit ", "timeout ", "limit ", "driver-error "))]
    ends = [e for e in ends if int(e[1]) == index]
    if setup:
        return RunResult("failed", None, out, err, wall, f"step {index}: {setup[-1]}", index)
    if not ends:  # the session ended under the program: its init killed (the OOM killer), or cut off by perfdag
        if cut_off_s is not None:
            return RunResult("timeout", None, out, err, wall, f"killed by perfdag after {cut_off_s:g} s", index)
        return RunResult("killed", None, out, err, wall,
                         f"the sandbox ended while the program ran (its driver's status {rc})", index)
    kind = ends[-1][0]
    if kind == "timeout":
        return RunResult("timeout", None, out, err, wall,
                         f"wall-clock timeout after {step.timeout_s:g} s: killed", index)
    if kind == "driver-error":
        why = " ".join(ends[-1][2:])
        return RunResult("killed", None, out, err, wall, f"the sandbox's driver failed: {why}", index)
    if kind == "limit" and ends[-1][2] == "memory":
        held = float(ends[-1][3]) if len(ends[-1]) > 3 else 0.0
        return RunResult("killed", None, out, err, wall,
                         f"killed: the job's processes together held {gib(held)}, over its memory limit of "
                         f"{gib(job.limits.job_memory_bytes)} (Limits.job_memory_bytes)", index)
    if kind == "limit":
        return RunResult("killed", None, out, err, wall,
                         f"killed: more than {job.limits.inodes} files in /tmp and /dev/shm", index)
    rc = int(ends[-1][2])
    if rc in step.ok_returncodes:
        if last:
            return RunResult("passed", rc, out, err, wall, "", index)
        return RunResult("timeout", rc, out, err, wall, "sandbox session killed between steps",
                         index)
    if rc < 0:
        return RunResult("killed", rc, out, err, wall, f"killed by {signal_name(-rc)}", index)
    return RunResult("failed", rc, out, err, wall, f"exit status {rc}", index)
