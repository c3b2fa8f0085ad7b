"""`python -m pipeline COMMAND`: commands around the DAG, one thin module each (its parser and a call
into the logic). status, servers, gc, compare, history, site, score, bfcl, dataset and whisper-triton run
no stage; submission builds the stages a results tree needs; bench measures a running server, sessions
replays sessions against one.

A command imports only its own module (pipeline/cli/<command>.py, `-` as `_`); `--help`, a mistyped
command and the like build every command's parser, to list them all."""
from __future__ import annotations

import argparse
import os
import sys

from harness.errors import PerfdagError
from pipeline.collector import paused_for_imports

# The commands in the order --help lists them; each is pipeline/cli/<name with - as _>.py.
COMMANDS = ("status", "servers", "gc", "submission", "search", "frontier", "score", "bfcl", "dataset", "compare",
            "history", "bench", "sessions", "site", "whisper-triton")


def _module(command: str):
    # __import__, not importlib.import_module: `python -X importtime` (the import guards) sees only the former
    return __import__(f"pipeline.cli.{command.replace('-', '_')}", fromlist=["run"])


def _asked_for(argv: list[str]) -> tuple[str, ...]:
    """The one command argv runs (its first argument, when that names one), else all of them."""
    return (argv[0],) if argv and argv[0] in COMMANDS else COMMANDS


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    runs = {}
    with paused_for_imports():
        for name in _asked_for(argv):
            command = _module(name)
            command.add_parser(sub)
            runs[name] = command.run
    args = ap.parse_args(argv)
    try:
        return runs[args.command](args)
    except PerfdagError as e:
        print(e, file=sys.stderr)
        return 2


def main_closing_quietly() -> int:
    """`python -m pipeline gc | head`: a reader that leaves early is no error worth a traceback."""
    try:
        code = main()
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python flushes stdout at exit
        return 141  # what a shell reports for a command killed by SIGPIPE
