"""perfdag's DAG. `luigi --module pipeline <Task>` finds every stage here.

Importing this package defines the tasks and nothing else: no logging, signal or exit handlers;
those are installed when a run starts (tasks/lifecycle.py).
"""
from pipeline.bench import Bench
from pipeline.frontier import Frontier, SessionsFrontier
from pipeline.full_run import FullRun
from pipeline.nightly import Nightly
from pipeline.search import FindMaxLoad
from pipeline.submission import Submission
from pipeline.sweep import Sweep
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

__all__ = ["STAGES", "StageTask", "PrepareModel", "Quantize", "BuildEngine", "FillTritonRepo",
           "LaunchServers", "ExternalServers", "PrepareDataset", "RunLoadgen", "RunSessions", "RunAccuracy", "CheckAccuracy", "FullRun",
           "Bench", "Sweep", "Frontier", "SessionsFrontier", "Nightly", "FindMaxLoad",
           "RunTest01", "RunTest06", "RunTest07", "RunTest09", "Submission"]
