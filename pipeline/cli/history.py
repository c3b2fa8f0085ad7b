"""`python -m pipeline history KEY_OR_PARAMS`: the observations of one FullRun, PerformanceRun, Bench or RunSessions configuration.

The configuration is a FullRun, PerformanceRun, Bench or RunSessions key (its first characters will do; `python -m pipeline
bench`'s summary names its report, Bench/<key16>/report.md) or a params file (with --overrides)
whose FullRun key perfdag computes, or its Bench key where the file measures a running server
(openai.endpoints) and that key has observations; nothing runs. Every execution of a measurement is
an observation of its key, kept; each is listed with its headline numbers, newest first.

`--all` lists every observation of every FullRun, PerformanceRun, Bench and RunSessions key in the root (those a Nightly or a
Sweep made are FullRun observations); `--csv` writes one row per observation with every summary
metric and the host's state, for a spreadsheet or a dashboard.
"""
from __future__ import annotations

import json
from pathlib import Path

from harness.cache.store import ArtifactStore
from harness.errors import InputError, PerfdagError
from harness.reports.compare import REPORT_NAMES, REPORT_STAGES, keys_of, report_key
from harness.reports.history import history, render, rows_of_root, to_csv
from pipeline.bench import Bench
from pipeline.full_run import FullRun
from pipeline.performance_run import PerformanceRun
from tasks.settings import artifacts_root, signing_key


def add_parser(sub) -> None:
    h = sub.add_parser("history", help="every observation (measurement) of one FullRun, PerformanceRun, Bench or RunSessions configuration, with "
                                       "its headline numbers; runs nothing", description=__doc__)
    h.add_argument("config", metavar="KEY_OR_PARAMS", nargs="?",
                   help="a FullRun, PerformanceRun, Bench or RunSessions key (prefix) or a params file (or --all)")
    h.add_argument("--all", action="store_true", help="every observation of every FullRun, PerformanceRun, Bench and RunSessions key in the root")
    h.add_argument("--overrides", default="", help='with a params file: "section.key=value,..." applied last')
    out = h.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="machine-readable output")
    out.add_argument("--csv", action="store_true",
                     help="one row per observation: every summary metric and the host's state")


def run(args) -> int:
    store = ArtifactStore(artifacts_root(), signing_key=signing_key())
    if (args.config is None) == (not args.all):
        raise InputError("history: name one configuration (a key or a params file) or give --all, not both")
    if args.all:
        keys = [(stage, k) for stage in REPORT_STAGES for k in sorted(keys_of(stage, "", store.root))]
        if args.csv:
            print(to_csv(rows_of_root(store, keys)), end="")
        elif args.json:
            print(json.dumps({"observations": rows_of_root(store, keys)}, indent=2, default=str))
        else:
            print("\n\n".join(render(k, history(store, k, stage), stage) for stage, k in keys) or
                  f"no {REPORT_NAMES} observations under {store.root}")
        return 0
    if args.config.endswith((".yaml", ".yml")) or Path(args.config).is_file():
        stage, key = of_params(store, args.config, args.overrides)
    else:
        stage, key = report_key(args.config, store.root, ", and it is no params file")
    if args.csv:
        print(to_csv(rows_of_root(store, [(stage, key)])), end="")
        return 0
    rows = history(store, key, stage)
    print(json.dumps({"stage": stage, "key": key, "observations": rows}, indent=2, default=str) if args.json
          else render(key, rows, stage))
    return 0


def of_params(store: ArtifactStore, params_file: str, overrides: str) -> tuple[str, str]:
    """A params file's FullRun key, or its PerformanceRun key (`frontier --no-accuracy` measures the same
    file) or Bench key (`bench --params-file`) where that one has observations: more than one having
    some is refused, naming them."""
    keys = {"FullRun": FullRun(params_file=params_file, overrides=overrides).key,
            "PerformanceRun": PerformanceRun(params_file=params_file, overrides=overrides).key}
    try:
        keys["Bench"] = Bench(params_file=params_file, overrides=overrides).key
    except PerfdagError:  # not a running server's measurement (no openai.endpoints)
        pass
    seen = [(stage, key) for stage, key in keys.items() if store.observations(stage, key)]
    if len(seen) > 1:
        raise InputError(f"{params_file}: " + " and ".join(f"its {s} {k[:16]}" for s, k in seen) +
                         " have observations; name the one you mean by its key")
    return seen[0] if seen else ("FullRun", keys["FullRun"])
