"""`python -m pipeline history KEY_OR_PARAMS`: the observations of one FullRun configuration.

The configuration is a FullRun key (its first characters will do) or a params file (with
--overrides) whose FullRun key perfdag computes; nothing runs. Every execution of a measurement is
an observation of its key, kept; each is listed with its headline numbers, newest first.
"""
from __future__ import annotations

import json
from pathlib import Path

from harness.cache.store import ArtifactStore
from harness.reports.compare import full_key
from harness.reports.history import history, render
from pipeline.full_run import FullRun
from tasks.settings import artifacts_root, signing_key


def add_parser(sub) -> None:
    h = sub.add_parser("history", help="every observation (measurement) of one FullRun configuration, with its "
                                       "headline numbers; runs nothing", description=__doc__)
    h.add_argument("config", metavar="KEY_OR_PARAMS", help="a FullRun key (prefix) or a params file")
    h.add_argument("--overrides", default="", help='with a params file: "section.key=value,..." applied last')
    h.add_argument("--json", action="store_true", help="machine-readable output")


def run(args) -> int:
    store = ArtifactStore(artifacts_root(), signing_key=signing_key())
    if args.config.endswith((".yaml", ".yml")) or Path(args.config).is_file():
        key = FullRun(params_file=args.config, overrides=args.overrides).key
    else:
        key = full_key(args.config, store.root)
    rows = history(store, key)
    print(json.dumps({"key": key, "observations": rows}, indent=2, default=str) if args.json else render(key, rows))
    return 0
