"""`python -m pipeline submission`: MLPerf Inference's results tree from cached runs (runs what is missing),
optionally checked by MLCommons' submission checker. The flow is pipeline/submission.py."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from harness.cache import runs as runlog
from harness.errors import InputError, PerfdagError
from harness.mlperf import checker as mlperf_checker
from pipeline.cli.flow import build_flow
from pipeline.submission import Submission
from tasks.base import log
from tasks.settings import DEFAULT_PARAMS, artifacts_root


def add_parser(sub) -> None:
    sb = sub.add_parser("submission", help="MLPerf Inference's results tree from cached runs (runs what is missing)",
                        description="Builds (or reuses) the timed, accuracy and TEST06 runs of every scenario and "
                                    "assembles MLPerf's results tree; --checker runs MLCommons' submission checker "
                                    "on it. Exit 0: tree built (and the checker passed); 14: the checker found errors.")
    sb.add_argument("--params-file", default=DEFAULT_PARAMS)
    sb.add_argument("--overrides", default="")
    sb.add_argument("--scenarios", default="Offline,Server", help="comma-separated: Offline,Server,Interactive,SingleStream")
    sb.add_argument("--layout", default="", choices=["", "loadgen", "endpoints"],
                    help="the results layout: loadgen (LoadGen's logs) or endpoints (config.yaml, result_summary.json, "
                         "accuracy_results.json, as MLCommons' endpoints client publishes them); default: the "
                         "benchmark's first (endpoints for qwen3.6-27b)")
    sb.add_argument("--system", default="", metavar="YAML",
                    help="systems/<system>.json fields perfdag cannot read from the machine (+ measurements:)")
    sb.add_argument("--out", default="", metavar="DIR", help="also copy the tree here (a new directory)")
    sb.add_argument("--checker", default="", metavar="CHECKOUT",
                    help="an mlcommons/inference checkout: run its submission checker on the tree")
    sb.add_argument("--checker-version", default="", help="the round to check (default: the params' loadgen.round)")
    sb.add_argument("--checker-python", default="", help="the Python that runs the checker (needs PyYAML)")
    sb.add_argument("--keep-servers", action="store_true", help="leave the servers running afterwards")
    sb.add_argument("--verbose", action="store_true", help="show third-party warnings and chatter")


def run(args) -> int:
    """Builds the tree (luigi, local scheduler), copies it to --out, runs the checker if asked."""
    try:
        if args.checker:
            mlperf_checker.check_checkout(args.checker)
        if args.out and Path(args.out).exists() and any(Path(args.out).iterdir()):
            raise InputError(f"--out: {args.out} exists and is not empty; name a new directory")
        task = Submission(params_file=args.params_file, overrides=args.overrides, scenarios=args.scenarios,
                          system=args.system or "", keep_servers=args.keep_servers, verbose=args.verbose,
                          layout=args.layout)
    except PerfdagError as e:
        print(e)
        return 2
    if build_flow(task, "the submission tree was not built", detailed=True):
        return 1
    tree = task.tree
    if args.out:
        shutil.copytree(tree, args.out, dirs_exist_ok=True)
        tree = Path(args.out)
        print(f"  copied to   {tree}")
    if not args.checker:
        return 0
    # The round the runs were made for (loadgen.round, always set): its seeds are in the logs, and the
    # checker compares them with its own round's.
    version = args.checker_version or task.params.loadgen.round
    out = runlog.run_file(artifacts_root()).parent / "checker"
    out.mkdir(parents=True, exist_ok=True)
    verdict = mlperf_checker.run_checker(args.checker, tree, version, out / "summary.csv",
                                         python=args.checker_python or None)
    (out / "verdict.json").write_text(json.dumps(verdict, indent=2) + "\n")
    print("\n".join(mlperf_checker.summary_lines(verdict)))
    print(f"  command     {verdict['command']}\n  verdict     {out / 'verdict.json'}")
    log.info("checker: %s", "PASS" if verdict["passed"] else "FAIL")
    return 0 if verdict["passed"] and not verdict["errors"] else 14
