"""The LoadGen SUT: settings, the caller side (runner), the driver process, frontends with their
client cores (one per protocol), and results. `run_loadgen` is the entry point."""
from harness.loadgen.results import parse_summary, read_requests_csv
from harness.loadgen.runner import LoadgenError, run_loadgen
from harness.loadgen.settings import latency_constraints

__all__ = ["LoadgenError", "latency_constraints", "parse_summary", "read_requests_csv",
           "run_loadgen"]
