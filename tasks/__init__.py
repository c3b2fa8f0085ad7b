"""One module per stage: thin luigi tasks that call into harness/. The stage base is tasks/base.py;
tasks never import pipeline/ (pipeline composes them into FullRun, Sweep and the CLI)."""
from .base import STAGE_ORDER, STAGES, StageTask
from .build_engine import BuildEngine
from .check_accuracy import CheckAccuracy
from .fill_triton_repo import FillTritonRepo
from .launch_servers import LaunchServers
from .prepare_dataset import PrepareDataset
from .prepare_model import PrepareModel
from .quantize import Quantize
from .run_accuracy import RunAccuracy
from .run_loadgen import RunLoadgen
from .run_test06 import RunTest06
from .run_test07 import RunTest07
from .run_test09 import RunTest09

__all__ = ["STAGE_ORDER", "STAGES", "StageTask", "PrepareModel", "Quantize", "BuildEngine", "FillTritonRepo",
           "LaunchServers", "PrepareDataset", "RunLoadgen", "RunAccuracy", "CheckAccuracy",
           "RunTest06", "RunTest07", "RunTest09"]
