"""`python -m pipeline COMMAND`: commands around the DAG. status, servers, gc, compare and score
run no stage; submission builds the stages a results tree needs."""
from __future__ import annotations

import argparse
import json
import sys

from harness.errors import PerfdagError
from pipeline.cli import compare as compare_cli
from pipeline.cli import score as score_cli
from pipeline.cli import servers as servers_cli
from pipeline.cli.status import print_status, stage_status
from tasks.settings import DEFAULT_PARAMS


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    st = sub.add_parser("status", help="print every stage's key and whether it is cached; runs nothing")
    st.add_argument("--params-file", default=DEFAULT_PARAMS)
    st.add_argument("--overrides", default="")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.add_argument("--full", action="store_true", help="every differing field in full (default: a few lines per stage)")
    st.add_argument("--verify", action="store_true",
                    help="re-hash every published file (default: size and mtime, re-hash what moved)")
    sv = sub.add_parser("servers", help="list or stop the tritonserver processes perfdag started")
    sv.add_argument("action", choices=["list", "stop"])
    sv.add_argument("--all", action="store_true", help="stop: every recorded server, not just this params' ones")
    sv.add_argument("--params-file", default=DEFAULT_PARAMS)
    sv.add_argument("--overrides", default="")
    sv.add_argument("--json", action="store_true")
    gc = sub.add_parser("gc", help="remove artifacts no recent run referenced (dry run unless --delete)",
                        description="Remove artifacts that no run within --keep-days referenced, keeping their "
                                    "upstream, live servers' artifacts and keys being built. Prints what it would "
                                    "free; only --delete deletes. runs/ and Nightly/ history are never deleted.")
    gc.add_argument("--keep-days", type=float, default=14, metavar="N",
                    help="keep what runs updated within N days referenced (default 14)")
    mode = gc.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only print what would go (the default)")
    mode.add_argument("--delete", action="store_true", help="delete it")
    gc.add_argument("--json", action="store_true", help="machine-readable output")
    gc.add_argument("-v", "--verbose", action="store_true", help="also list what is kept and why")
    sb = sub.add_parser("submission", help="MLPerf Inference's results tree from cached runs (runs what is missing)",
                        description="Builds (or reuses) the timed, accuracy and TEST06 runs of every scenario and "
                                    "assembles MLPerf's results tree; --checker runs MLCommons' submission checker "
                                    "on it. Exit 0: tree built (and the checker passed); 14: the checker found errors.")
    sb.add_argument("--params-file", default=DEFAULT_PARAMS)
    sb.add_argument("--overrides", default="")
    sb.add_argument("--scenarios", default="Offline,Server", help="comma-separated: Offline,Server,Interactive")
    sb.add_argument("--system", default="", metavar="YAML",
                    help="systems/<system>.json fields perfdag cannot read from the machine (+ measurements:)")
    sb.add_argument("--out", default="", metavar="DIR", help="also copy the tree here (a new directory)")
    sb.add_argument("--checker", default="", metavar="CHECKOUT",
                    help="an mlcommons/inference checkout: run its submission checker on the tree")
    sb.add_argument("--checker-version", default="", help="the round to check (default: the params' loadgen.round)")
    sb.add_argument("--checker-python", default="", help="the Python that runs the checker (needs PyYAML)")
    sb.add_argument("--keep-servers", action="store_true", help="leave the servers running afterwards")
    sb.add_argument("--verbose", action="store_true", help="show third-party warnings and chatter")
    score_cli.add_parser(sub)
    compare_cli.add_parser(sub)
    args = ap.parse_args(argv)



    try:
        if args.command == "status":
            rows = stage_status(args.params_file, args.overrides, verify=args.verify)
            print(json.dumps(rows, indent=2, default=str)) if args.json else print_status(rows, args.full)
        elif args.command == "servers":
            return servers_command(args)
        elif args.command == "submission":
            from pipeline import submission
            return submission.command(args)
        elif args.command == "score":
            return score_cli.command(args)
        elif args.command == "compare":
            return compare_cli.command(args)
        elif args.command == "gc":
            from harness.gc import collect as gc_module
            return gc_module.command(args)
    except PerfdagError as e:
        print(e, file=sys.stderr)
        return 2
    return 0


def servers_command(args) -> int:
    if args.action == "list":
        rows = servers_cli.list_servers()
        if args.json:
            print(json.dumps(rows, indent=2))
        elif not rows:
            print("no servers recorded")
        for r in rows if not args.json else []:
            kind = "external" if r["external"] else f"pid {r['pid']}"
            who = ("held by " + ", ".join(r["held_by"])) if r["held_by"] else "no run holds it"
            print(f"{r['key']}  {kind:>12}  {r['address']:<22} {r['state']:<7} {','.join(r['models'])}  "
                  f"{who}{'  (kept)' if r['kept'] else ''}")
        return 0
    key16 = None
    if not args.all:
        from tasks import LaunchServers
        key16 = LaunchServers(params_file=args.params_file, overrides=args.overrides).key[:16]
    stopped = servers_cli.stop(key16)
    print(f"stopped {len(stopped)} server(s)" + (f": pids {', '.join(map(str, stopped))}" if stopped else ""))
    return 0


def _main_closing_quietly() -> int:
    """`python -m pipeline gc | head`: a reader that leaves early is no error worth a traceback."""
    import os

    try:
        code = main()
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python flushes stdout at exit
        return 141  # what a shell reports for a command killed by SIGPIPE


if __name__ == "__main__":
    sys.exit(_main_closing_quietly())
