"""The stages, in the DAG's topological order: each stage module registers its class here as it is
defined (`@register`), and `STAGES` names them for --rerun-from, status and Slurm jobs."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # an annotation only: the base registers its subclasses, it is not imported here
    from tasks.base import StageTask


# The DAG's topological order; STAGES (filled by tasks/ as classes are defined) follows it.
# ExternalServers and Bench (pipeline bench) are ordered here for reports but not registered: they
# take only pipeline bench's parameters; nor is PerformanceRun, a flow's point (frontier --no-accuracy).
STAGE_ORDER = ("PrepareModel", "Quantize", "BuildEngine", "FillTritonRepo", "LaunchServers", "ExternalServers",
               "PrepareDataset", "RunLoadgen", "RunSessions", "RunAccuracy", "CheckAccuracy", "RunTest01", "RunTest06", "RunTest07",
               "RunTest09",
               "FullRun", "PerformanceRun", "Bench")


STAGES: dict[str, type[StageTask]] = {}


def register(cls: type[StageTask]) -> type[StageTask]:
    STAGES[cls.stage] = cls
    ordered = sorted(STAGES.items(), key=lambda kv: STAGE_ORDER.index(kv[0]))
    STAGES.clear()
    STAGES.update(ordered)
    return cls
