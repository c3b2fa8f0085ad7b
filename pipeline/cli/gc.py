"""`python -m pipeline gc`: remove artifacts no recent run referenced; dry run unless --delete.
The logic is harness/gc/collect.py (what is kept and why, what goes, the report)."""
from __future__ import annotations

import json
import sys

from harness.gc.collect import gc, render, to_json
from tasks.settings import artifacts_root


def add_parser(sub) -> None:
    gc_ = sub.add_parser("gc", help="remove artifacts no recent run referenced (dry run unless --delete)",
                         description="Remove artifacts that no run within --keep-days referenced, keeping their "
                                     "upstream, live servers' artifacts and keys being built. Prints what it would "
                                     "free; only --delete deletes. runs/ and Nightly/ history are never deleted.")
    gc_.add_argument("--keep-days", type=float, default=14, metavar="N",
                     help="keep what runs updated within N days referenced (default 14)")
    mode = gc_.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only print what would go (the default)")
    mode.add_argument("--delete", action="store_true", help="delete it")
    gc_.add_argument("--json", action="store_true", help="machine-readable output")
    gc_.add_argument("-v", "--verbose", action="store_true", help="also list what is kept and why")


def run(args) -> int:
    if not 0 <= args.keep_days <= 36500:  # also refuses nan
        print(f"--keep-days must be between 0 and 36500, not {args.keep_days:g}", file=sys.stderr)
        return 2
    p = gc(artifacts_root(), args.keep_days, args.delete)
    print(json.dumps(to_json(p, args.delete), indent=2, default=str) if args.json else render(p, args.delete, args.verbose))
    return 1 if any(e.status.startswith("failed") for e in p.goes) else 0
