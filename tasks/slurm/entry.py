"""Inside a Slurm job (or a step of the serving allocation): run the one stage it was submitted for,
locally. The job's command line imports this module, which registers every stage (`import tasks`)."""
from __future__ import annotations

import json
import logging
import os
import sys
import traceback

import tasks  # noqa: F401  registers every stage in tasks.registry.STAGES
from harness.errors import PerfdagError
from tasks.registry import STAGES
from tasks.slurm.serve import hold_allocation
from tasks.slurm.submit import IN_JOB


def main(argv: list[str]) -> int:
    """Inside the job (or a step of the serving allocation): run the one stage, locally."""
    stage, params = argv[0], json.loads(argv[1])

    task = STAGES[stage].from_str_params(params)
    if os.environ.get(IN_JOB) != f"{stage}/{task.key}":
        print(f"perfdag: this job was submitted for {os.environ.get(IN_JOB)}, but here the stage's key is "
              f"{task.key}: the checkout or the environment differs between the submit host and the node",
              file=sys.stderr)
        return 2
    try:
        task.run()
        if stage == "LaunchServers":  # the allocation: keep the servers until it is cancelled
            hold_allocation(task)
    except BaseException as e:  # noqa: BLE001  the worker reads the log; leases are the worker's, not ours
        if isinstance(e, PerfdagError):
            print(f"perfdag: {stage} {task.key[:16]} failed: {e}", file=sys.stderr)
        else:
            traceback.print_exc()
        _leave(1)
    # Published. Leave now: the run's exit-time handlers (tasks/lifecycle.py) would turn a verdict
    # that other stages of this run noted in run.json into this job's exit code, failing a job that
    # built, and would release the worker's leases on its servers.
    _leave(0)


def _leave(code: int):
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
