"""PerformanceRun: FullRun's report of its performance run alone, without the accuracy run.

What `frontier --no-accuracy` (and `Sweep --no-accuracy`) measures at each point of a model perfdag
builds: the same stages up to RunLoadgen, the same report, no RunAccuracy or CheckAccuracy. A level
of a frontier is a different `harness.max_in_flight`, which RunAccuracy's key covers, so a FullRun
point pays a whole accuracy run per level; this point pays none. Its report says `accuracy: null`
and is kept under its own stage's observations, which `history` and `compare` list beside FullRun's.
"""
from __future__ import annotations

from pipeline.bench import Bench
from pipeline.full_run import FullRun
from tasks import RunLoadgen


class PerformanceRun(FullRun):  # not in STAGES: a flow's point, named by `--no-accuracy`
    stage = "PerformanceRun"

    def upstream(self):
        return {"performance": self.clone(RunLoadgen)}


def measurement(endpoint: bool, no_accuracy: bool) -> type[FullRun]:
    """What measures one point of a sweep, or confirms a search: a Bench of the running servers
    (`--url`), a PerformanceRun (`--no-accuracy`), else a FullRun."""
    return Bench if endpoint else PerformanceRun if no_accuracy else FullRun
