"""perfdag's DAG. `luigi --module pipeline <Task>` finds every stage here.

Importing this package defines the tasks and nothing else: no logging, signal or exit handlers;
those are installed when a run starts (tasks/lifecycle.py). The stages and FullRun are always
defined; the flows (Bench, Sweep, Frontier, Nightly, FindMaxLoad, Submission) too, except where the
command line shows none of them runs in this process (pipeline/flows.py). `from pipeline import
Sweep` works either way.
"""
import sys

from pipeline.collector import paused_for_imports

__all__ = ["STAGES", "StageTask", "PrepareModel", "Quantize", "BuildEngine", "FillTritonRepo",
           "LaunchServers", "ExternalServers", "PrepareDataset", "RunLoadgen", "RunSessions", "RunAccuracy", "CheckAccuracy", "FullRun",
           "Bench", "PerformanceRun", "Sweep", "Frontier", "SessionsFrontier", "Nightly", "FindMaxLoad",
           "RunTest01", "RunTest06", "RunTest07", "RunTest09", "Submission"]

with paused_for_imports():  # and the flows below
    from pipeline import flows
    from pipeline.full_run import FullRun
    from tasks import (
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

    if flows.needed(sys.argv, set(__all__) - set(flows.FLOWS) - {"STAGES", "StageTask"}):
        flows.load_all()


def __getattr__(name: str):
    """A flow not loaded with the package (pipeline/flows.py), loaded when it is asked for."""
    if name in flows.FLOWS:
        return flows.load(name)
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
