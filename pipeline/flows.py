"""Which of pipeline's flows `import pipeline` loads, from the command line that imports it.

The flows (Bench, PerformanceRun, Sweep, Frontier, Nightly, FindMaxLoad, Submission) are loaded with the package except
where the command line shows that none can run in this process: `luigi --module pipeline <Task> ...`
whose root task is a stage or FullRun (their requirements are all stages), and `python -m pipeline
COMMAND`, whose command module imports what it runs. A cached FullRun then pays neither the flows'
imports nor their parameters in each of the command-line parsers luigi builds over every registered
task (issue 51). Whatever the command line cannot tell for sure loads them all.
"""
from __future__ import annotations

import os

# Each flow's class -> the module defining it.
FLOWS = {"Bench": "pipeline.bench", "Frontier": "pipeline.frontier", "SessionsFrontier": "pipeline.frontier",
         "Nightly": "pipeline.nightly", "FindMaxLoad": "pipeline.search", "Submission": "pipeline.submission",
         "Sweep": "pipeline.sweep", "PerformanceRun": "pipeline.performance_run"}

# Before the root task, luigi's command line as perfdag's docs and scripts write it; any other flag
# there (one that might take a value) makes the root task uncertain, and every flow is loaded.
_BEFORE_ROOT = ("--local-scheduler", "--module=pipeline")
_HELP = ("-h", "--help", "--help-all")


def luigi_root(argv: list[str]) -> str | None:
    """The root task of a `luigi --module pipeline <Task> ...` command line, or None where argv is not
    one or its root task is not certain."""
    if not argv or not (os.path.basename(argv[0]) == "luigi" or argv[0].endswith(os.path.join("luigi", "__main__.py"))):
        return None
    if any(a in _HELP for a in argv[1:]):
        return None  # help lists every task
    rest = argv[1:]
    module = False
    while rest and rest[0].startswith("-"):
        if rest[0] == "--module" and rest[1:2] == ["pipeline"]:
            module, rest = True, rest[2:]
        elif rest[0] in _BEFORE_ROOT:
            module, rest = module or rest[0] == "--module=pipeline", rest[1:]
        else:
            return None
    return rest[0] if module and rest else None


def needed(argv: list[str], stages: set[str]) -> bool:
    """Whether `import pipeline` under this command line loads the flows (see the module's docstring)."""
    if argv[:1] == ["-m"]:  # `python -m pipeline ...` is locating pipeline.__main__ (Python's documented argv)
        return False
    return luigi_root(argv) not in stages


def load(name: str):
    """The flow class `name`, its module imported (by __import__, which `python -X importtime` sees)."""
    return getattr(__import__(FLOWS[name], fromlist=[name]), name)


def load_all() -> None:
    for name in FLOWS:
        load(name)
