"""Progress of a long loop (training a stand-in model), where its reader is: a live bar on a terminal,
and elsewhere (a CI job, a Slurm log, `luigi ... 2> log`) one line at a steady interval, so a log shows
the stage is alive and how far it got. A bar drawn into a file prints nothing until it ends."""
from __future__ import annotations

import sys
import time
from typing import Callable

# Off a terminal: a line at most this often (and always at the last step).
EVERY_S = 10.0


class Steps:
    """`with Steps(label, total, log) as steps: steps.advance(loss)` once per step."""

    def __init__(self, label: str, total: int, log: Callable[[str], None], *, every_s: float = EVERY_S,
                 live: bool | None = None, clock: Callable[[], float] = time.monotonic):
        self.label, self.total, self.log, self.every_s, self.clock = label, total, log, every_s, clock
        self.live = sys.stderr.isatty() if live is None else live
        self.done, self.bar, self.task = 0, None, None

    def __enter__(self) -> "Steps":
        self.t0 = self.last = self.clock()
        if self.live:
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn(self.label), BarColumn(),
                                TextColumn("{task.completed}/{task.total} loss {task.fields[loss]}"),
                                TimeRemainingColumn(), transient=False)
            self.bar.__enter__()
            self.task = self.bar.add_task("steps", total=self.total, loss="-")
        return self

    def advance(self, loss: float) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(self.task, advance=1, loss=f"{loss:.3f}")
            return
        now = self.clock()
        if now - self.last >= self.every_s or self.done == self.total:
            self.last = now
            elapsed = now - self.t0
            left = elapsed / self.done * (self.total - self.done)
            self.log(f"{self.label}: step {self.done}/{self.total}, loss {loss:.3f}, {elapsed:.0f} s"
                     + (f", about {left:.0f} s left" if self.done < self.total else ""))

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)
