"""`python -m pipeline compare RUN_OR_REPORT RUN_OR_REPORT`: two FullRuns side by side.

Each argument is a report (report.json or its FullRun directory), a FullRun key (its first
characters will do), or a run id under artifacts/runs/ whose run touched one FullRun.
"""
from __future__ import annotations

import json

from harness.reports.compare import compare, load, render, resolve
from tasks.settings import artifacts_root


def add_parser(sub) -> None:
    c = sub.add_parser("compare", help="two runs side by side: metrics and the parameters that differ; runs nothing",
                       description=__doc__)
    c.add_argument("a", metavar="RUN_OR_REPORT")
    c.add_argument("b", metavar="RUN_OR_REPORT")
    c.add_argument("--json", action="store_true", help="machine-readable output")



def run(args) -> int:
    root = artifacts_root()
    doc = compare(load(resolve(args.a, root)), load(resolve(args.b, root)))
    print(json.dumps(doc, indent=2, default=str) if args.json else render(doc))
    return 0
