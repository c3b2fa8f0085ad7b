"""perfdag's DAG. `luigi --module pipeline <Task>` finds every stage here.

Importing this package defines the tasks and nothing else: no logging, signal or exit handlers;
those are installed when a run starts (tasks/lifecycle.py). The stages and FullRun are always
defined; the flows (Bench, Sweep, Frontier, Nightly, FindMaxLoad, Submission) too, except where the
command line shows none of them runs in this process (pipeline/flows.py). `from pipeline import
Sweep` works either way.
"""
import gc
import sys

# The imports below allocate hundreds of thousands of objects and free almost none: the collector's
# passes over them are ~10% of a cached FullRun's CPU (issue 51). It is paused while they run, and what
# they made is frozen afterwards (it lives as long as the process; later passes need not walk it).
_COLLECTING = gc.isenabled()
gc.disable()

from pipeline import flows  # noqa: E402
from pipeline.full_run import FullRun  # noqa: E402
from tasks import (  # noqa: E402
                   STAGES,
                   BuildEngine,
                   CheckAccuracy,
                   ExternalServers,
                   FillTritonRepo,
                   LaunchServers,
                   PrepareDataset,
                   PrepareModel,
                   Quantize,
                   RunAccuracy,
                   RunLoadgen,
                   RunSessions,
                   RunTest01,
                   RunTest06,
                   RunTest07,
                   RunTest09,
                   StageTask,
)

__all__ = ["STAGES", "StageTask", "PrepareModel", "Quantize", "BuildEngine", "FillTritonRepo",
           "LaunchServers", "ExternalServers", "PrepareDataset", "RunLoadgen", "RunSessions", "RunAccuracy", "CheckAccuracy", "FullRun",
           "Bench", "PerformanceRun", "Sweep", "Frontier", "SessionsFrontier", "Nightly", "FindMaxLoad",
           "RunTest01", "RunTest06", "RunTest07", "RunTest09", "Submission"]

try:
    if flows.needed(sys.argv, set(__all__) - set(flows.FLOWS) - {"STAGES", "StageTask"}):
        flows.load_all()
finally:
    gc.freeze()
    if _COLLECTING:
        gc.enable()


def __getattr__(name: str):
    """A flow not loaded with the package (pipeline/flows.py), loaded when it is asked for."""
    if name in flows.FLOWS:
        return flows.load(name)
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
