"""perfdag's work, with no luigi: cache, config, model, backends, serving, loadgen, mlperf, slurm, reports, gc."""
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent  # the perfdag checkout (holds harness/, tasks/, pipeline/)
DATA = CHECKOUT / "harness" / "data"  # shipped text: the corpus and the stand-in datasets
