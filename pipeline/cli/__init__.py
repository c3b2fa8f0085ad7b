"""`python -m pipeline COMMAND`: commands around the DAG, one thin module each (its parser and a call
into the logic). status, servers, gc, compare, history, site, score, bfcl, dataset and whisper-triton run
no stage; submission builds the stages a results tree needs; bench measures a running server, sessions
replays sessions against one."""
from __future__ import annotations

import argparse
import os
import sys

import pipeline  # noqa: F401  registers the stages (status and submission read them)
from harness.errors import PerfdagError
from pipeline.cli import (bench, bfcl, compare, dataset, frontier, gc, history, score, search, servers, sessions,
                          site, status, submission, whisper_triton)

COMMANDS = (status, servers, gc, submission, search, frontier, score, bfcl, dataset, compare, history, bench, sessions,
            site, whisper_triton)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    runs = {}
    for command in COMMANDS:
        before = set(sub.choices)
        command.add_parser(sub)
        runs.update({name: command.run for name in set(sub.choices) - before})
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
