"""`python -m pipeline compare RUN_OR_REPORT RUN_OR_REPORT`: two FullRuns or Benches side by side, with
their noise.

Each argument names one observation of a FullRun or of a Bench (`python -m pipeline bench`: a running
server measured; every execution of a measurement is kept): a report (report.json or its directory),
KEY@OBSERVATION (`python -m pipeline history` lists them), a FullRun, PerformanceRun, Bench or RunSessions key (its first
characters will do: its latest observation), or a run id under artifacts/runs/ whose run touched one
FullRun, PerformanceRun, Bench or RunSessions (the observation that run made or read). A Bench and a FullRun compare on the
metrics both reports hold (a Bench has no accuracy). Each side's noise comes from its run's repeats
(`--repeat`), else from every observation of its key; a change is called worse or better only
outside it (Mann-Whitney's test, p <= 0.10, beyond the metric's floor).
"""
from __future__ import annotations

import functools
import json

from harness.reports.compare import compare, load, render, resolve
from harness.cache.store import ArtifactStore
from tasks.settings import artifacts_root, signing_key


def add_parser(sub) -> None:
    c = sub.add_parser("compare", help="two runs (FullRun, PerformanceRun, Bench or RunSessions) side by side: metrics and the parameters that "
                                       "differ; runs nothing",
                       description=__doc__)
    c.add_argument("a", metavar="RUN_OR_REPORT")
    c.add_argument("b", metavar="RUN_OR_REPORT")
    c.add_argument("--json", action="store_true", help="machine-readable output")



def run(args) -> int:
    store = ArtifactStore(artifacts_root(), signing_key=signing_key())
    # each key's observations listed once for this command (both sides, and each side's noise, list the same key;
    # every one is still checked where it is read: observation_problems)
    store.observations = functools.cache(store.observations)
    memo: dict = {}  # what both sides read (one key's observations, checked and read once: harness/reports/compare.py)
    doc = compare(load(resolve(args.a, store, memo), store, memo), load(resolve(args.b, store, memo), store, memo))
    print(json.dumps(doc, indent=2, default=str) if args.json else render(doc))
    return 0
