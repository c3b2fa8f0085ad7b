"""`python -m pipeline history KEY_OR_PARAMS`: the observations of one FullRun or Bench configuration.

The configuration is a FullRun or Bench key (its first characters will do; `python -m pipeline
bench`'s summary names its report, Bench/<key16>/report.md) or a params file (with --overrides)
whose FullRun key perfdag computes, or its Bench key where the file measures a running server
(openai.endpoints) and that key has observations; nothing runs. Every execution of a measurement is
an observation of its key, kept; each is listed with its headline numbers, newest first.
"""
from __future__ import annotations

import json
from pathlib import Path

from harness.cache.store import ArtifactStore
from harness.errors import InputError, PerfdagError
from harness.reports.compare import report_key
from harness.reports.history import history, render
from pipeline.bench import Bench
from pipeline.full_run import FullRun
from tasks.settings import artifacts_root, signing_key


def add_parser(sub) -> None:
    h = sub.add_parser("history", help="every observation (measurement) of one FullRun or Bench configuration, with "
                                       "its headline numbers; runs nothing", description=__doc__)
    h.add_argument("config", metavar="KEY_OR_PARAMS", help="a FullRun or Bench key (prefix) or a params file")
    h.add_argument("--overrides", default="", help='with a params file: "section.key=value,..." applied last')
    h.add_argument("--json", action="store_true", help="machine-readable output")


def run(args) -> int:
    store = ArtifactStore(artifacts_root(), signing_key=signing_key())
    if args.config.endswith((".yaml", ".yml")) or Path(args.config).is_file():
        stage, key = of_params(store, args.config, args.overrides)
    else:
        stage, key = report_key(args.config, store.root, ", and it is no params file")
    rows = history(store, key, stage)
    print(json.dumps({"stage": stage, "key": key, "observations": rows}, indent=2, default=str) if args.json
          else render(key, rows, stage))
    return 0


def of_params(store: ArtifactStore, params_file: str, overrides: str) -> tuple[str, str]:
    """A params file's FullRun key, or its Bench key (`bench --params-file` measures the same file) where
    that one has observations: both having some is refused, naming both."""
    full = FullRun(params_file=params_file, overrides=overrides).key
    try:
        bench = Bench(params_file=params_file, overrides=overrides).key
    except PerfdagError:  # not a running server's measurement (no openai.endpoints): a FullRun's only
        return "FullRun", full
    seen = [(stage, key) for stage, key in (("FullRun", full), ("Bench", bench)) if store.observations(stage, key)]
    if len(seen) > 1:
        raise InputError(f"{params_file}: both its FullRun {full[:16]} and its Bench {bench[:16]} have observations; "
                         "name the one you mean by its key")
    return seen[0] if seen else ("FullRun", full)
