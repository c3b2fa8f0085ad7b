"""One module per stage: thin luigi tasks that call into harness/. The stage base is tasks/base.py;
tasks never import pipeline/ (pipeline composes them into FullRun, Sweep and the CLI)."""
from tasks.base import StageTask
from tasks.build_engine import BuildEngine
from tasks.check_accuracy import CheckAccuracy
from tasks.external_servers import ExternalServers
from tasks.fill_triton_repo import FillTritonRepo
from tasks.launch_servers import LaunchServers
from tasks.prepare_dataset import PrepareDataset
from tasks.prepare_model import PrepareModel
from tasks.quantize import Quantize
from tasks.registry import STAGE_ORDER, STAGES
from tasks.run_accuracy import RunAccuracy
from tasks.run_loadgen import RunLoadgen
from tasks.run_sessions import RunSessions
from tasks.run_test01 import RunTest01
from tasks.run_test06 import RunTest06
from tasks.run_test07 import RunTest07
from tasks.run_test09 import RunTest09

__all__ = ["STAGE_ORDER", "STAGES", "StageTask", "PrepareModel", "Quantize", "BuildEngine", "FillTritonRepo",
           "LaunchServers", "ExternalServers", "PrepareDataset", "RunLoadgen", "RunSessions", "RunAccuracy", "CheckAccuracy",
           "RunTest01", "RunTest06", "RunTest07", "RunTest09"]
